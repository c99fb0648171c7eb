// Blocking Kafka reader for the one-shot commands (reconcile): reads chosen partitions from a
// start offset up to the high watermark they had when the read was planned, without joining a
// consumer group (assign, never commit). Never use it on the relay's io_context thread: every
// call blocks. Not thread-safe: one thread uses a Consumer. librdkafka handles never leave this
// module.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/kafka/producer.hpp"  // ConfigError

namespace outbox::kafka {

struct ConsumerConfig {
  std::string brokers;
  // librdkafka properties applied after the defaults (from -X); a bad one throws ConfigError.
  // Producer-only properties are accepted and ignored by librdkafka.
  std::vector<std::pair<std::string, std::string>> properties;
  // read_committed (the default) skips records of aborted transactions, but stops every read at
  // the partition's last stable offset: behind a transaction left open (a producer killed in
  // one), for up to its transaction.timeout.ms, records committed after it are out of sight.
  // False: read_uncommitted, for topics whose records of interest are never transactional.
  bool read_committed = true;
};

// Offsets [start, end) of one partition to read.
struct PartitionRange {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t start = 0;
  std::int64_t end = 0;  // high watermark when planned
};

struct TopicPlan {
  std::string topic;
  bool exists = false;  // false: the broker does not know the topic (nothing to read)
  std::vector<PartitionRange> partitions;
};

// A record as read. Views into librdkafka's message: valid only during the callback.
struct ConsumedRecord {
  std::string_view topic;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::int64_t timestamp_ms = -1;
  std::optional<std::string_view> key;
  std::optional<std::string_view> value;
  std::optional<std::string_view> id_header;  // last "id" header, nullopt when absent
};

// A broker refused the consumer's login or certificate (librdkafka would retry it for ever);
// the message names the broker and the reason, never a secret.
class RefusedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Consumer {
 public:
  // Throws ConfigError for a bad property (the message names it).
  explicit Consumer(const ConsumerConfig& config);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The partitions of `topic` and what to read of each: from the first record whose timestamp
  // is at least `from_ms` (the broker's offsetsForTimes; nullopt: from the log start) to the high
  // watermark now. Throws std::runtime_error naming the topic when the broker does not answer
  // within `timeout`.
  TopicPlan plan(const std::string& topic, std::optional<std::int64_t> from_ms,
                 std::chrono::milliseconds timeout);

  // At most this many partitions are read at once, each with at most this much prefetched by
  // librdkafka: memory stays under kMaxAssigned * kQueuedKiBPerPartition KiB (plus one fetch
  // response) whatever the number of partitions and records.
  static constexpr std::size_t kMaxAssigned = 8;
  static constexpr std::size_t kQueuedKiBPerPartition = 8192;

  // Reads every range to its end, kMaxAssigned partitions at a time (a partition also ends at its
  // end-of-partition event, e.g. when transaction markers close it) and calls `on_record` for each
  // record; returns how many were read. Throws std::runtime_error naming the partition on a
  // consumer error, or when nothing arrived for `idle_timeout`.
  std::uint64_t read(const std::vector<PartitionRange>& ranges,
                     const std::function<void(const ConsumedRecord&)>& on_record,
                     std::chrono::milliseconds idle_timeout);

 private:
  std::uint64_t read_group(std::span<const PartitionRange> ranges,
                           const std::function<void(const ConsumedRecord&)>& on_record,
                           std::chrono::milliseconds idle_timeout);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::kafka
