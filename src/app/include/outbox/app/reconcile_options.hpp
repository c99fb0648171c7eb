// Flags of `outbox-relay reconcile` and its time bounds (--since, --until). Pure but for
// --kafka-config, which reads its file.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/mapping/mapper.hpp"

namespace outbox::app {

// The environment as the flag parsers see it: a variable's value, or nullopt when unset. Empty
// reads none (the unit tests' default); main passes getenv.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;

// One end of the reconcile window: an age relative to the command's start ("2h": now minus two
// hours) or an absolute time.
struct TimeBound {
  std::optional<std::chrono::microseconds> ago;  // set for a duration
  std::int64_t epoch_us = 0;                     // the absolute time, when !ago
  std::string text;                              // as given, for messages

  // Microseconds since the Unix epoch, given the command's start time.
  std::int64_t resolve(std::int64_t now_us) const { return ago ? now_us - ago->count() : epoch_us; }
};

// "30m", "2h", "7d", "90s", "500ms" (an age), or a timestamp: "2026-11-30", "2026-11-30T10:00",
// "2026-11-30 10:00:00.25+01:00", "...Z". A timestamp without an offset is UTC. Throws
// UsageError naming `flag`.
TimeBound parse_time_bound(const std::string& flag, const std::string& text);

// Microseconds since the epoch as "2026-11-30T10:00:00.000000Z" (also valid input to PostgreSQL's
// timestamptz).
std::string format_utc(std::int64_t epoch_us);

struct ReconcileOptions {
  std::string conninfo;
  std::string brokers;
  // Table, topic template and columns, with the relay's defaults (require_json is not used).
  mapping::MapperConfig mapper;
  std::string column_time;         // the rows' time column, required
  TimeBound since;                 // inclusive
  std::optional<TimeBound> until;  // exclusive; the command's start when absent
  bool repair = false;
  // librdkafka properties (--kafka-config's, then -X's), for the consumer and, with --repair,
  // the producer.
  std::vector<std::pair<std::string, std::string>> properties;
  std::vector<std::pair<std::string, std::string>> kafka_config;  // from --kafka-config
  bool unsafe_kafka_config = false;   // --unsafe-kafka-config (see flags::check_kafka_properties)
  std::vector<std::string> warnings;  // printed on stderr before the command runs
  // Kafka is read from the first record stamped at or after since - margin (offsetsForTimes).
  std::chrono::milliseconds margin{std::chrono::hours(1)};
  // Longest wait for Kafka without progress (metadata, reading, acknowledgements).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  bool help = false;
};

// The flags of `reconcile` (argv after the command word), after their environment variables.
// Throws UsageError.
ReconcileOptions parse_reconcile(const std::vector<std::string>& args, const Environment& env = {});

// Help text of `reconcile`.
std::string reconcile_usage();

}  // namespace outbox::app
