// The flag tables of the commands (private to the app module): one row per flag with its name,
// value kind, target, bounds and help text; one loop that applies a command line to a table; the
// flag list of --help printed from the same rows; and every wording of a usage error, in one
// place. Pure. A table writes through references into the options it was built for: build it,
// parse, drop it, on one thread. Defined in options.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
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

// --- value kinds: each returns a row whose apply parses into `target`

// Any text, the empty one included (with require(), empty counts as not given).
Flag text(std::string name, std::string metavar, std::string& target, std::string help);
// A non-empty name (slot, publication, column, topic). Deferred.
Flag name(std::string name, std::string& target, std::string help);
// A switch that sets `target` to true.
Flag on(std::string name, bool& target, std::string help);
// A switch that sets `target` to false.
Flag off(std::string name, bool& target, std::string help);
// --help (-h) or --version: sets `target`, and required flags are not checked.
Flag stop(std::string name, bool& target, std::string help);

// "10", "500ms", "250us", "1m" (also "1min"), "2h", "7d"; a bare number is seconds.
// A duration below `min` is rejected with the wording given by `below`:
//   kInvalid:  F: invalid duration 'T' (expected e.g. 500ms, 10s, 1m, 7d, at least MIN)
//   kIsBelow:  F: 'T' is below MIN
//   kPositive: F: must be positive
enum class Below { kInvalid, kIsBelow, kPositive };
struct MinDuration {
  std::chrono::microseconds min{0};
  Below below = Below::kInvalid;
};
Flag duration(std::string name, std::chrono::microseconds& target, std::string help,
              MinDuration bound = {});
Flag duration(std::string name, std::chrono::milliseconds& target, std::string help,
              MinDuration bound = {});
Flag duration(std::string name, std::optional<std::chrono::milliseconds>& target, std::string help,
              MinDuration bound = {});

// A decimal integer of at least `min` (0 or 1), no unit.
Flag count(std::string name, std::uint64_t& target, std::string help, std::uint64_t min = 1);
Flag count(std::string name, std::optional<std::uint64_t>& target, std::string help,
           std::uint64_t min = 0);
// A positive number of bytes: "268435456", "512KiB" (k, K), "256MiB" (M, m), "1GiB" (G, g).
Flag size(std::string name, std::uint64_t& target, std::string help);

// One of `choices`; anything else: F: unknown NOUN 'T' (expected a, b or c).
template <class T>
Flag choice(std::string name, std::string metavar, T& target, std::string noun,
            std::vector<std::pair<std::string, T>> choices, std::string help) {
  auto apply = [&target, noun = std::move(noun), choices = std::move(choices)](
                   const std::string& flag, const std::string& value) {
    std::vector<std::string> words;
    for (const auto& [word, v] : choices) {
      if (word == value) {
        target = v;
        return;
      }
      words.push_back(word);
    }
    throw unknown(flag, noun, value, words);
  };
  return {std::move(name), std::move(metavar), std::move(help), std::move(apply)};
}

// A file of librdkafka properties, as kcat -F reads one: PROPERTY=VALUE lines (the name and the
// value trimmed of surrounding blanks), '#' comment lines and blank lines. Read when the flag is
// applied; the last file given replaces `target`. Errors name the flag and FILE:LINE, never the
// line's text (it may hold a secret). Symbolic links are followed (Kubernetes mounts secrets
// through them), but what is opened must be a regular file (never a FIFO or a device: opened
// without blocking, then checked). A file that others, or a group other than the process's
// primary group, may read is read, with a line appended to `warnings`.
Flag properties_file(std::string name, std::vector<std::pair<std::string, std::string>>& target,
                     std::vector<std::string>& warnings, std::string help);
// PROPERTY=VALUE, repeatable: appended to `target`. Argv only. A malformed value is never echoed
// (-X sasl.password:secret).
Flag property(std::string name, std::vector<std::pair<std::string, std::string>>& target,
              std::string help);

// Properties that make librdkafka run a command or load code (plugin.library.paths,
// sasl.kerberos.kinit.cmd, ssl.engine.location, ssl.providers; a sasl.kerberos.principal or
// keytab with shell metacharacters, which the default kinit command passes to /bin/sh): refused
// (UsageError naming the property, never the value) unless `allowed`. `source` names the flags
// ("-X, --kafka-config").
void check_kafka_properties(const std::vector<std::pair<std::string, std::string>>& properties,
                            bool allowed, const std::string& source);
// SCHEMA.TABLE or TABLE (schema public). Deferred.
Flag table(std::string name, std::string& schema, std::string& table, std::string help);
// A topic template over columns (mapping::TopicTemplate). Deferred.
Flag topic_template(std::string name, std::string& target, std::string help);
// SCHEMA.TABLE or TABLE, repeatable: the first value replaces the default table, the others are
// further tables (`more`). A bad value, or a table given twice, is reported even when a good
// value follows. Deferred.
Flag tables(std::string name, std::string& schema, std::string& table,
            std::vector<std::pair<std::string, std::string>>& more, std::string help);
// COLUMN:header|partition[:ALIAS], repeatable, also as a comma-separated list (Debezium's
// table.fields.additional.placement): appended to `target`; at most one partition placement.
Flag placement(std::string name, std::vector<mapping::Placement>& target, std::string help);

// The rows of the mapping flags, shared by run and reconcile so that both read the same record
// layout from the same flags (and OUTBOX_RELAY_* variables): --table (repeatable; `table_help`
// says what more tables mean to the command), --topic, the --column-* names, --require-json,
// --additional-placement, --column-timestamp, --tombstone-on-empty-payload, --format,
// --ce-source, --content-type, --column-traceparent, --column-tracestate.
Table mapping_flags(mapping::MapperConfig& config, std::string table_help);
// The combinations of those flags that make no sense (--ce-source or --content-type without
// --format cloudevents, --column-tracestate without --column-traceparent). Throws UsageError.
void check_mapping(const mapping::MapperConfig& config);

}  // namespace outbox::app::flags

namespace outbox::app::flags {

// The rows of a command's table, built over throwaway options, handed to `visit` (for the
// reference pages, reference.cpp). Defined in options.cpp; reconcile's rows come from
// reconcile_table (reconcile_options.cpp).
void visit_table(Command command, const std::function<void(const Table&)>& visit);
Table reconcile_table(ReconcileOptions& options);

}  // namespace outbox::app::flags
