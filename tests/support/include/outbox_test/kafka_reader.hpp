// Reads whole topics from their beginning with a librdkafka consumer, without a consumer group:
// every partition of every requested topic is assigned at the earliest offset as soon as the topic
// exists (topics auto-created by the relay appear while the test runs).
// Thread-safety: one thread uses a KafkaReader.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

struct rd_kafka_s;

namespace outbox_test {

struct Record {
  std::string topic;
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::optional<std::string> key;  // nullopt for a null key
  std::string value;
  bool null_value = false;                     // a tombstone: value is empty
  std::map<std::string, std::string> headers;  // last value of each header name
  std::set<std::string> null_headers;          // names whose last header has no value
  // Every header in the record's order (a header without value: nullopt).
  std::vector<std::pair<std::string, std::optional<std::string>>> header_list;
  std::int64_t timestamp_ms = -1;
  bool create_time = false;  // timestamp type is CreateTime (set by the producer)
};

class KafkaReader {
 public:
  KafkaReader(const std::string& brokers, std::vector<std::string> topics);
  ~KafkaReader();
  KafkaReader(const KafkaReader&) = delete;
  KafkaReader& operator=(const KafkaReader&) = delete;

  // Consumes until `done(records())` holds or `timeout` elapsed; returns whether `done` held.
  bool read_until(const std::function<bool(const std::vector<Record>&)>& done,
                  std::chrono::milliseconds timeout);
  // Consumes whatever arrives within `duration`.
  void read_for(std::chrono::milliseconds duration);
  // Consumes every partition of the requested topics up to its high watermark as queried now
  // (topics that do not exist yet count as empty): what a consumer sees of everything the broker
  // has acknowledged so far. For "nothing more than this" checks, after the relay confirmed (so
  // Kafka acknowledged) all it produced. Returns false (and records an error) when the end is not
  // reached within `timeout`.
  bool read_to_end(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Everything read so far, in arrival order (which is offset order within a partition).
  const std::vector<Record>& records() const { return records_; }
  // Partition count of a topic once it has been seen, else nullopt.
  std::optional<std::int32_t> partition_count(const std::string& topic) const;
  // Consumer errors other than "topic not there yet", for failure messages.
  const std::vector<std::string>& errors() const { return errors_; }
  // With false, records keep everything but their value (empty): for reading a million records
  // whose values the test does not look at.
  void set_keep_values(bool keep) { keep_values_ = keep; }
  // Records keep transform(value) instead of the value (not called for a null value): for
  // checking the content of a million records without keeping them.
  void set_value_transform(std::function<std::string(std::string_view)> transform) {
    transform_ = std::move(transform);
  }

 private:
  struct Deleter {
    void operator()(rd_kafka_s* rk) const noexcept;
  };
  void assign_new_topics();
  void poll_once(std::chrono::milliseconds timeout);

  std::unique_ptr<rd_kafka_s, Deleter> rk_;
  std::vector<std::string> topics_;
  std::map<std::string, std::int32_t> partitions_;  // assigned topics
  std::chrono::steady_clock::time_point next_metadata_;
  std::vector<Record> records_;
  std::vector<std::string> errors_;
  bool keep_values_ = true;
  std::function<std::string(std::string_view)> transform_;
};

}  // namespace outbox_test
