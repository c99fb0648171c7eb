// The flag engine (flags.hpp): the wordings of usage errors, the help rows, the environment
// names and the one loop that applies a command line to a table.
#include "flags.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <optional>

namespace outbox::app::flags {

UsageError invalid(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::string& expected) {
  return UsageError(flag + ": invalid " + noun + " '" + text + "' (" + expected + ")");
}

UsageError unknown(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::vector<std::string>& choices) {
  return UsageError(flag + ": unknown " + noun + " '" + text + "' (expected " + one_of(choices) +
                    ")");
}

UsageError malformed(const std::string& flag, const std::string& form, const std::string& text) {
  return UsageError(flag + ": expected " + form + ", got '" + text + "'");
}

UsageError rejected(const std::string& flag, const std::string& reason) {
  return UsageError(flag + ": " + reason);
}

std::string one_of(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

void append_row(std::string& out, const std::string& label, const std::string& text) {
  constexpr std::size_t kColumn = 33;
  std::string line = "  " + label;
  if (line.size() + 1 > kColumn) {
    out += line + "\n";
    line.clear();
  }
  line.resize(kColumn, ' ');
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find('\n', begin);
    out += line + text.substr(begin, end - begin) + "\n";
    if (end == std::string::npos) break;
    line.assign(kColumn, ' ');
    begin = end + 1;
  }
}

std::string help(const Table& table) {
  std::string out;
  for (const Flag& f : table) {
    append_row(out, f.metavar.empty() ? f.name : f.name + " " + f.metavar, f.help);
  }
  return out;
}

std::string env_name(const Flag& flag) {
  if (!flag.from_env || flag.stops || flag.name.rfind("--", 0) != 0) return "";
  std::string out = kEnvPrefix;
  for (char c : flag.name.substr(2)) {
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

void parse(const std::vector<std::string>& args, const Table& table, const Environment& env) {
  const auto find = [&](const std::string& arg) -> const Flag* {
    for (const Flag& f : table) {
      if (f.name == arg || f.alias == arg) return &f;
    }
    return nullptr;
  };
  std::vector<const Flag*> given;                        // rows whose last value was not empty
  std::vector<std::pair<const Flag*, UsageError>> late;  // errors of deferred rows
  bool stopped = false;
  // The environment first, so that the command line wins.
  for (const Flag& f : table) {
    const std::string var = env ? env_name(f) : "";
    if (var.empty()) continue;
    const std::optional<std::string> value = env(var);
    if (!value) continue;
    const std::string label = var + " (" + f.name + ")";
    if (f.metavar.empty()) {
      static const char* const kYes[] = {"1", "true", "yes", "on"};
      static const char* const kNo[] = {"", "0", "false", "no", "off"};
      const auto is = [&](const auto& words) {
        return std::find(std::begin(words), std::end(words), *value) != std::end(words);
      };
      if (is(kNo)) continue;
      if (!is(kYes))
        throw invalid(label, "switch value", *value, "expected 1, true, yes or 0, false, no");
    }
    try {
      f.apply(label, *value);
    } catch (const UsageError& e) {
      if (!f.deferred) throw;
      late.emplace_back(&f, e);
    }
    if (f.metavar.empty() || !value->empty()) given.push_back(&f);
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.size() > 2 && arg[0] == '-') {
      if (const Flag* f = find(arg.substr(0, 2)); f && !f->metavar.empty()) {
        inline_value = arg.substr(2);
        arg = arg.substr(0, 2);
      }
    }
    const Flag* f = find(arg);
    if (!f) {
      throw UsageError((arg.rfind("-", 0) == 0 ? "unknown flag " : "unexpected argument ") + arg +
                       " (see --help)");
    }
    if (f->metavar.empty()) {
      if (inline_value) throw rejected(arg, "takes no value");
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw rejected(arg, "missing value");
      inline_value = args[++i];
    }
    const std::string value = inline_value.value_or("");
    std::erase_if(late, [&](const auto& e) { return e.first == f; });
    try {
      f->apply(f->name, value);
    } catch (const UsageError& e) {
      if (!f->deferred) throw;
      late.emplace_back(f, e);
    }
    std::erase(given, f);
    if (f->metavar.empty() || !value.empty()) given.push_back(f);
    stopped = stopped || f->stops;
  }
  if (stopped) return;
  for (const Flag& f : table) {
    if (!f.required.empty() && std::find(given.begin(), given.end(), &f) == given.end()) {
      throw rejected(f.name, "required (" + f.required + ")");
    }
  }
  for (const Flag& f : table) {
    for (const auto& [row, error] : late) {
      if (row == &f) throw error;
    }
  }
}

}  // namespace outbox::app::flags
