// The generated parts of the reference pages under docs/: each command's flag table, from the
// rows its parser and --help use, and the list of metrics, from the definitions the renderers of
// /metrics write their families from (metric_defs.hpp). Pure.
// tools/docgen writes them into the pages; the docs.generated test fails when a page differs.
#pragma once

#include <string>
#include <vector>

#include "outbox/app/options.hpp"

namespace outbox::app {

// One flag as the reference pages show it.
struct FlagDoc {
  std::string flag;           // "--slot", "-X"
  std::string metavar;        // "NAME"; empty for a switch
  std::string default_value;  // from the help text's "(default ...)"; "required"; "" when none
  std::string description;    // the help text of --help, on one line
  std::string env;            // OUTBOX_RELAY_...; empty when the flag is read from argv only
};

// The command's flags, in the order --help lists them.
std::vector<FlagDoc> flag_docs(Command command);

// The command word ("run", "setup", ...), and the command of a word (nullopt: none).
std::string command_word(Command command);
std::vector<Command> all_commands();

// A markdown table: flag, default, environment variable, description.
std::string flag_table_markdown(Command command);

// One series family of /metrics.
struct MetricDoc {
  std::string name;
  std::string type;    // counter, gauge, histogram
  std::string labels;  // "topic", "state", ... (comma-separated); empty when none
  std::string help;    // the # HELP text
};

// Every family /metrics can serve (the relay's, the backlog sampler's and the failover
// sampler's), in the order served.
std::vector<MetricDoc> metric_docs();
std::string metrics_table_markdown();

}  // namespace outbox::app
