#include "outbox/app/reference.hpp"

#include "command_tables.hpp"
#include "flags.hpp"
#include "outbox/app/metric_defs.hpp"

namespace outbox::app {
namespace {

// The help text on one line.
std::string one_line(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  return out;
}

// The last word before `pos`, without punctuation.
std::string word_before(const std::string& text, std::size_t pos) {
  std::size_t end = pos;
  while (end > 0 && text[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && text[begin - 1] != ' ' && text[begin - 1] != '(') --begin;
  std::string word = text.substr(begin, end - begin);
  while (!word.empty() && (word.back() == ',' || word.back() == ':')) word.pop_back();
  return word;
}

// The default a help text states: "(default X)", "(default: X)", "(default X; more)",
// "WORD (default)", "WORD (default; more)", "(WORD, the default)", "WORD (...; the default)".
std::string default_of(const std::string& help) {
  if (help.find("[required]") != std::string::npos) return "required";
  // "[required unless --nats]": required, with its exception.
  if (const auto at = help.find("[required unless "); at != std::string::npos) {
    const auto end = help.find(']', at);
    if (end != std::string::npos) return help.substr(at + 1, end - at - 1);
  }
  if (const auto at = help.find("(default"); at != std::string::npos) {
    std::size_t begin = at + 8;
    if (begin < help.size() && help[begin] == ':') ++begin;
    while (begin < help.size() && help[begin] == ' ') ++begin;
    const std::size_t end = help.find_first_of(";)", begin);
    std::string value = help.substr(begin, end == std::string::npos ? end : end - begin);
    while (!value.empty() && value.back() == ' ') value.pop_back();
    return value.empty() ? word_before(help, at) : value;
  }
  if (const auto at = help.find("the default)"); at != std::string::npos) {
    const std::size_t open = help.rfind('(', at);
    if (open == std::string::npos) return "";
    const std::size_t comma = help.find(", the default)", open);
    if (comma != std::string::npos && help.find(' ', open) > comma) {
      return help.substr(open + 1, comma - open - 1);
    }
    return word_before(help, open);
  }
  return "";
}

// A table cell: '|' escaped.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::vector<Command> all_commands() {
  return {Command::kRun,  Command::kSetup,     Command::kStatus,
          Command::kDrop, Command::kReconcile, Command::kPrune};
}

std::string command_word(Command command) {
  switch (command) {
    case Command::kRun:
      return "run";
    case Command::kSetup:
      return "setup";
    case Command::kStatus:
      return "status";
    case Command::kDrop:
      return "drop";
    case Command::kReconcile:
      return "reconcile";
    case Command::kPrune:
      return "prune";
  }
  return "run";
}

std::vector<FlagDoc> flag_docs(Command command) {
  std::vector<FlagDoc> out;
  flags::visit_table(command, [&out](const flags::Table& table) {
    for (const flags::Flag& f : table) {
      const std::string help = one_line(f.help);
      std::string default_value = default_of(help);
      // A switch not given is off.
      if (default_value.empty() && f.metavar.empty() && !f.stops) default_value = "off";
      out.push_back({f.name, f.metavar, default_value, help, flags::env_name(f)});
    }
  });
  return out;
}

std::string flag_table_markdown(Command command) {
  std::string out =
      "| flag | default | environment | description |\n"
      "|---|---|---|---|\n";
  for (const FlagDoc& f : flag_docs(command)) {
    const std::string label = f.metavar.empty() ? f.flag : f.flag + " " + f.metavar;
    out += "| `" + cell(label) + "` | " + (f.default_value.empty() ? "" : cell(f.default_value)) +
           " | " + (f.env.empty() ? "argv only" : "`" + f.env + "`") + " | " + cell(f.description) +
           " |\n";
  }
  return out;
}

std::vector<MetricDoc> metric_docs() {
  std::vector<MetricDoc> out;
  for (const auto& defs : {relay_metric_defs(), backlog_metric_defs(), failover_metric_defs()}) {
    for (const MetricDef& d : defs) {
      std::string labels;
      for (const std::string_view label : d.labels) {
        if (!labels.empty()) labels += ", ";
        labels += label;
      }
      out.push_back({std::string(d.name), std::string(type_name(d.type)), std::move(labels),
                     std::string(d.help)});
    }
  }
  return out;
}

std::string metrics_table_markdown() {
  std::string out =
      "| metric | type | labels | description |\n"
      "|---|---|---|---|\n";
  for (const MetricDoc& d : metric_docs()) {
    out +=
        "| `" + d.name + "` | " + d.type + " | " + cell(d.labels) + " | " + cell(d.help) + " |\n";
  }
  return out;
}

}  // namespace outbox::app
