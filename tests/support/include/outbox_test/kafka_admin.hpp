// Kafka admin operations the tests need beyond what the relay does by itself (it relies on topic
// auto-creation): creating a topic with chosen partitions and configs, e.g. a compacted topic,
// and reading a topic's offsets without consuming it.
// Thread-safety: free functions; each call uses its own short-lived librdkafka handle.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace outbox_test {

// Creates `topic` with rd_kafka_CreateTopics. Throws std::runtime_error naming the topic and the
// broker's error (including TOPIC_ALREADY_EXISTS: every test names its own topics).
void create_topic(const std::string& brokers, const std::string& topic, int partitions,
                  int replication_factor, const std::map<std::string, std::string>& configs = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Sum over the topic's partitions of the high watermark (records ever appended, when the log
// starts at offset 0). Throws when the metadata or an offset query fails within `timeout`.
std::int64_t topic_end_offset_sum(const std::string& brokers, const std::string& topic,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Produces one record (key, value) to `topic` and waits for its acknowledgement (acks=all). Throws
// std::runtime_error naming the topic and the error when it is not acknowledged within `timeout`.
void produce_record(const std::string& brokers, const std::string& topic, const std::string& key,
                    const std::string& value,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A transaction left open on `topic`, as a producer killed inside one leaves it: one record
// (key, value) produced and acknowledged in a transaction that is neither committed nor aborted
// until this object goes (its destructor aborts it). Meanwhile read_committed readers of the
// topic's partitions stop at its first offset (the last stable offset). The transaction's
// timeout is `transaction_timeout` (the broker aborts it after that). Throws std::runtime_error
// when the transaction cannot be opened.
class OpenTransaction {
 public:
  OpenTransaction(const std::string& brokers, const std::string& topic, const std::string& key,
                  const std::string& value,
                  std::chrono::milliseconds transaction_timeout = std::chrono::minutes(5));
  ~OpenTransaction();
  OpenTransaction(const OpenTransaction&) = delete;
  OpenTransaction& operator=(const OpenTransaction&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The librdkafka this process (and the relay, linked to the same library) runs with:
// rd_kafka_version() (0xMMmmrrxx) and rd_kafka_version_str().
int librdkafka_version();
std::string librdkafka_version_text();

}  // namespace outbox_test
