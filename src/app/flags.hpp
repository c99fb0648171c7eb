// The flag engine of the commands (private to the app module): a row per flag with its name,
// metavar, help text and how its value is applied; the one loop that applies a command line (and
// the flags' environment variables) to a table; the flag list of --help printed from the same
// rows; and every wording of a usage error, in one place. Pure (a row's apply may read a file:
// properties_file.hpp). A table writes through references into the options it was built for:
// build it, parse, drop it, on one thread. The kinds of values are in flag_kinds.hpp and
// properties_file.hpp, the commands' tables in command_tables.hpp.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/app/options.hpp"

namespace outbox::app::flags {

// One row. A row without a metavar is a switch.
struct Flag {
  using Apply = std::function<void(const std::string& flag, const std::string& value)>;

  Flag(std::string name, std::string metavar, std::string help, Apply apply)
      : name(std::move(name)),
        metavar(std::move(metavar)),
        help(std::move(help)),
        apply(std::move(apply)) {}

  std::string name;     // "--slot"; a two-character flag ("-X") also takes "-Xvalue"
  std::string metavar;  // "NAME", "DURATION"; empty for a switch
  std::string help;     // lines after the first separated by '\n'
  // Parses the value ("" for a switch), checks its bounds and stores it. Throws UsageError.
  Apply apply;
  std::string required;  // non-empty: the flag must be given a non-empty value; the message hint
  std::string alias;     // another name (e.g. -h), not listed in the help
  bool stops = false;    // a switch such as --help: once given, required flags are not checked
  // The row may also come from the environment (env_name()). Off for --help, --version, -X
  // (repeatable) and switches that must be typed on purpose (--yes, --repair).
  bool from_env = true;
  // The row's error is reported only after --help and the required flags were checked, and a
  // later good value clears it: how empty names, --table, --topic and --timeout were always
  // checked (after the whole command line was read).
  bool deferred = false;

  Flag require(std::string hint) && {
    required = std::move(hint);
    return std::move(*this);
  }
  Flag also(std::string other) && {
    alias = std::move(other);
    return std::move(*this);
  }
  Flag defer() && {
    deferred = true;
    return std::move(*this);
  }
  Flag argv_only() && {
    from_env = false;
    return std::move(*this);
  }
};

using Table = std::vector<Flag>;

// The environment as the parser sees it (reconcile_options.hpp).
using Environment = app::Environment;

// Every flag's environment variable: OUTBOX_RELAY_ and the name without its dashes, upper case,
// '-' as '_' (--kafka-config: OUTBOX_RELAY_KAFKA_CONFIG). Empty for a row that is argv only.
inline constexpr const char* kEnvPrefix = "OUTBOX_RELAY_";
std::string env_name(const Flag& flag);

// Applies the environment's values of the table's rows first (in table order; a switch takes
// 1/true/yes/on or 0/false/no/off/empty; errors name the variable and the flag), then `args`
// ("--flag value", "--flag=value", "-Xvalue", switches) in order, so the command line wins;
// then, unless a stopping switch was given, checks that every required row got a non-empty
// value, then reports the errors of deferred rows (each time the first in table order). Throws
// UsageError.
void parse(const std::vector<std::string>& args, const Table& table, const Environment& env = {});

// The flag lines of --help: "  NAME METAVAR" and the help text from column 33.
std::string help(const Table& table);

// "  LABEL" and `text` from column 33 (on the next line when the label is too long); the lines
// of `text` after the first are indented to the same column.
void append_row(std::string& out, const std::string& label, const std::string& text);

// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string>& words);

// --- the wordings of usage errors; each names the flag (or argument) first
UsageError invalid(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::string& expected);  // F: invalid NOUN 'T' (EXPECTED)
UsageError unknown(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::vector<std::string>& choices);  // F: unknown NOUN 'T' (expected ...)
UsageError malformed(const std::string& flag, const std::string& form,
                     const std::string& text);  // F: expected FORM, got 'T'
UsageError rejected(const std::string& flag, const std::string& reason);  // F: REASON

}  // namespace outbox::app::flags
