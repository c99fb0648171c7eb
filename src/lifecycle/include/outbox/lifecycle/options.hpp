// The options of the life-cycle commands (status, prune, reconcile), as app's command tables fill
// them (src/app/command_tables.hpp); `help`, `warnings` and the Kafka properties' sources are the
// flag engine's, kept here so that one struct carries a command's whole command line. Plain data.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/aws/sqs_publisher.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/sinks/progress_reader.hpp"

namespace outbox::lifecycle {

// Where a command reads the relay's progress record (prune, status): --brokers or --nats, with
// the relay's --checkpoint-topic or --nats-progress-bucket and its Kafka or NATS settings.
struct ProgressRecordFlags {
  sinks::ProgressLocation where;
  std::vector<std::pair<std::string, std::string>> kafka_config;  // from --kafka-config
  bool unsafe_kafka_config = false;   // --unsafe-kafka-config (see flags::check_kafka_properties)
  std::vector<std::string> warnings;  // printed on stderr before the command runs
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // reading the record
};

// `where` with the command's connection, and the outbox table's schema when --progress-table
// named none.
inline sinks::ProgressLocation located(sinks::ProgressLocation where, const std::string& conninfo,
                                       const std::string& outbox_schema) {
  if (where.pg_table) {
    where.pg_conninfo = conninfo;
    if (where.pg_table->schema.empty()) where.pg_table->schema = outbox_schema;
  }
  return where;
}

// Flags of `outbox-relay status`.
struct StatusOptions {
  std::string conninfo;
  std::string slot = "outbox_relay";
  bool json = false;
  std::uint64_t max_retained_bytes = 1ULL << 30;
  // The backlog: outbox inserts the slot has not confirmed, counted from a copy of the slot.
  std::string publication = "outbox_relay";
  std::string schema = "public";
  std::string table = "outbox";
  std::uint64_t scan_limit = 100'000;  // pgoutput messages read at most
  std::optional<std::uint64_t> max_pending;
  std::optional<std::chrono::milliseconds> max_age;
  // --standby: a standby whose synced copy of the (failover) slot is checked.
  std::string standby;
  // Given (--brokers or --nats): the slot is compared with the relay's progress record.
  ProgressRecordFlags progress;
  bool help = false;
};

// Flags of `outbox-relay prune`.
struct PruneOptions {
  std::string conninfo;
  std::string slot = "outbox_relay";
  std::string schema = "public";
  std::string table = "outbox";
  std::string column_time = "created_at";   // timestamp column the retention is measured on
  std::chrono::milliseconds older_than{0};  // required (--older-than)
  std::uint64_t batch = 1000;               // rows per DELETE transaction
  std::chrono::milliseconds pause{100};     // between two batches
  bool dry_run = false;
  // The relay's progress record: the slot is trusted only when it is not ahead of it.
  ProgressRecordFlags progress;
  bool without_progress_record = false;  // --without-progress-record: the slot alone is trusted
  bool help = false;
};

// One end of the reconcile window: an age relative to the command's start ("2h": now minus two
// hours) or an absolute time.
struct TimeBound {
  std::optional<std::chrono::microseconds> ago;  // set for a duration
  std::int64_t epoch_us = 0;                     // the absolute time, when !ago
  std::string text;                              // as given, for messages

  // Microseconds since the Unix epoch, given the command's start time.
  std::int64_t resolve(std::int64_t now_us) const { return ago ? now_us - ago->count() : epoch_us; }
};

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
  // JetStream instead of Kafka when `nats.urls` is set (run --nats's gap repair): the ids are read
  // from the streams capturing the rows' subjects, from messages stored at or after since -
  // margin (JetStream's storage time), and the repair is published with the relay's JetStream
  // publisher (Nats-Msg-Id = the id: one the stream already holds within its duplicate window
  // is dropped by the server). `brokers` and `properties` are then unused.
  nats::PublisherConfig nats;
  // Amazon SQS (`sqs.queue_url` set) or EventBridge (`eventbridge.bus` set) instead of Kafka:
  // they cannot be read back, so nothing is compared and the whole window is sent again
  // (at-least-once; a FIFO queue drops an id it took within five minutes) with the relay's own
  // publisher, in commit order (needs `repair`). `brokers`, `properties` and `margin` are unused.
  aws::SqsSinkOptions sqs;
  aws::EventBridgeSinkOptions eventbridge;
  bool resend() const { return !sqs.queue_url.empty() || !eventbridge.bus.empty(); }
  bool help = false;
};

}  // namespace outbox::lifecycle
