// What a consumer checks on the records that reached Kafka, shared by the integration and fault
// tests: a readable form of a record, Kafka order, counting distinct event ids, and a bounded list
// of mismatches. Thread-safety: free functions; a Problems or DistinctIds is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "outbox_test/kafka_reader.hpp"

namespace outbox_test {

// Collects mismatches instead of flooding the output with thousands of failed EXPECTs.
class Problems {
 public:
  void add(const std::string& text);
  std::size_t count() const { return count_; }
  std::string describe() const;

 private:
  std::vector<std::string> texts_;
  std::size_t count_ = 0;
};

// topic/partition@offset, key, value (first 120 characters) and headers, for failure messages.
std::string describe(const Record& record);

// Records in Kafka order: by topic, partition, offset.
std::vector<const Record*> in_kafka_order(const std::vector<Record>& records);

// A read_until predicate: true once `target` distinct `id` headers have been read. Incremental, so
// polling a million records stays cheap.
class DistinctIds {
 public:
  explicit DistinctIds(std::size_t target) : target_(target) {}
  bool operator()(const std::vector<Record>& records);
  std::size_t count() const { return ids_.size(); }

 private:
  std::size_t target_;
  std::size_t seen_records_ = 0;
  std::unordered_set<std::string> ids_;
};

}  // namespace outbox_test
