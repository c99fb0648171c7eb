// Private to src/kafka: the topics a producer holds handles for, and the partitioner that counts
// their partitions for the stall guard.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "outbox/common/c_handle.hpp"

namespace outbox::kafka {

using TopicHandle = common::CHandle<rd_kafka_topic_t, rd_kafka_topic_destroy>;

using Partitioner = int32_t (*)(const rd_kafka_topic_t*, const void*, size_t, int32_t, void*,
                                void*);

// librdkafka's built-in partitioner of that name (the "partitioner" property), or nullptr.
Partitioner builtin_partitioner(std::string_view name);

// One topic the producer holds a handle for: the handle, what the stall guard needs (the
// partition count, which librdkafka tells only its partitioner) and the records in flight.
struct TopicEntry {
  std::string name;
  TopicHandle handle;
  int32_t partitions = 0;
  std::uint64_t in_flight = 0;  // produced, delivery report not yet served
};

// The topics the producer holds handles for, bounded: past kMaxTopicHandles the least recently
// used topic with no record in flight is closed (and opened again when an event needs it). Every
// topic's opaque is this registry, never a per-topic record: librdkafka keeps its own topic object
// after rd_kafka_topic_destroy() and hands it back, with the opaque of its first creation, when the
// name is opened again; a per-topic record freed on eviction would then be read after its free.
// The partitioner looks its topic up by name instead. Guarded by `mu`: the partitioner runs on
// librdkafka's threads too, delivery reports on the transaction worker. No librdkafka call is
// made while `mu` is held (librdkafka holds its own locks around the partitioner).
struct TopicRegistry {
  static constexpr std::size_t kMaxTopicHandles = 1000;

  Partitioner partitioner = nullptr;  // the configured built-in one, which does the choosing
  std::mutex mu;
  std::list<TopicEntry> lru;  // front: most recently used
  std::unordered_map<std::string_view, std::list<TopicEntry>::iterator> index;  // keys: names

  TopicEntry* find(std::string_view name) {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &*it->second;
  }
};
int32_t counting_partitioner(const rd_kafka_topic_t* rkt, const void* key, size_t keylen,
                             int32_t partition_cnt, void* rkt_opaque, void* msg_opaque);

}  // namespace outbox::kafka
