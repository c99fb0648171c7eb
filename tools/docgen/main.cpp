// outbox-docgen: writes (or checks) the generated parts of the pages under docs/: the blocks
//   <!-- BEGIN GENERATED: flags COMMAND -->  ...  <!-- END GENERATED -->
//   <!-- BEGIN GENERATED: metrics -->        ...  <!-- END GENERATED -->
// from the commands' flag tables and the metric definitions /metrics is written from
// (outbox/app/reference.hpp, metric_defs.hpp).
//
//   outbox-docgen --write DOCS_DIR   rewrites the blocks (cmake --build build --target docs)
//   outbox-docgen --check DOCS_DIR   exit 1 naming each page whose block differs (ctest
//                                    docs.generated), or a command or the metrics without a page
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "outbox/app/reference.hpp"

namespace {

namespace fs = std::filesystem;
using outbox::app::Command;

constexpr std::string_view kBegin = "<!-- BEGIN GENERATED: ";
constexpr std::string_view kEnd = "<!-- END GENERATED -->";

std::optional<std::string> generate(const std::string& key) {
  if (key == "metrics") return outbox::app::metrics_table_markdown();
  if (key.rfind("flags ", 0) == 0) {
    for (Command c : outbox::app::all_commands()) {
      if (key == "flags " + outbox::app::command_word(c)) {
        return outbox::app::flag_table_markdown(c);
      }
    }
  }
  return std::nullopt;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() != 2 || (args[0] != "--write" && args[0] != "--check")) {
    std::cerr << "usage: outbox-docgen --write|--check DOCS_DIR\n";
    return 2;
  }
  const bool write = args[0] == "--write";
  std::vector<fs::path> pages;
  for (const auto& entry : fs::recursive_directory_iterator(args[1])) {
    if (entry.is_regular_file() && entry.path().extension() == ".md") pages.push_back(entry.path());
  }
  std::sort(pages.begin(), pages.end());
  std::set<std::string> seen;
  int failures = 0;
  for (const fs::path& page : pages) {
    const std::string text = read(page);
    std::istringstream in(text);
    std::string out;
    std::string line;
    bool changed = false;
    while (std::getline(in, line)) {
      out += line + "\n";
      if (line.rfind(kBegin, 0) != 0) continue;
      const std::size_t end = line.find(" -->", kBegin.size());
      const std::string key = line.substr(kBegin.size(), end - kBegin.size());
      const auto generated = generate(key);
      if (!generated) {
        std::cerr << page.string() << ": unknown generated block '" << key << "'\n";
        ++failures;
        continue;
      }
      seen.insert(key);
      std::string old;
      bool closed = false;
      while (std::getline(in, line)) {
        if (line == kEnd) {
          closed = true;
          break;
        }
        old += line + "\n";
      }
      if (!closed) {
        std::cerr << page.string() << ": block '" << key << "' has no " << kEnd << "\n";
        ++failures;
        break;
      }
      out += *generated + std::string(kEnd) + "\n";
      if (old != *generated) {
        changed = true;
        if (!write) {
          std::cerr << page.string() << ": the generated block '" << key
                    << "' differs from the code; run: cmake --build build --target docs\n";
          ++failures;
        }
      }
    }
    if (write && changed) {
      std::ofstream(page, std::ios::binary) << out;
      std::cout << "wrote " << page.string() << "\n";
    }
  }
  std::vector<std::string> wanted{"metrics"};
  for (Command c : outbox::app::all_commands()) {
    wanted.push_back("flags " + outbox::app::command_word(c));
  }
  for (const std::string& key : wanted) {
    if (!seen.count(key)) {
      std::cerr << args[1] << ": no page holds the generated block '" << key << "'\n";
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
