// The value kinds of the flag tables: each returns a row (flags.hpp) whose apply parses the value,
// checks its bounds and stores it into `target`. Pure: none reads a file (--kafka-config's reader
// is in properties_file.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flags.hpp"
#include "outbox/app/reconcile_options.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::app::flags {

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

// AGE|TIMESTAMP (parse_time_bound): one end of reconcile's window.
Flag time_bound(std::string name, TimeBound& target, std::string help);
Flag time_bound(std::string name, std::optional<TimeBound>& target, std::string help);

}  // namespace outbox::app::flags
