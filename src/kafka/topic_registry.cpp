#include "topic_registry.hpp"

#include <utility>

namespace outbox::kafka {

Partitioner builtin_partitioner(std::string_view name) {
  static constexpr std::pair<std::string_view, Partitioner> kBuiltins[] = {
      {"random", &rd_kafka_msg_partitioner_random},
      {"consistent", &rd_kafka_msg_partitioner_consistent},
      {"consistent_random", &rd_kafka_msg_partitioner_consistent_random},
      {"murmur2", &rd_kafka_msg_partitioner_murmur2},
      {"murmur2_random", &rd_kafka_msg_partitioner_murmur2_random},
      {"fnv1a", &rd_kafka_msg_partitioner_fnv1a},
      {"fnv1a_random", &rd_kafka_msg_partitioner_fnv1a_random}};
  for (const auto& [n, fn] : kBuiltins) {
    if (n == name) return fn;
  }
  return nullptr;
}

int32_t counting_partitioner(const rd_kafka_topic_t* rkt, const void* key, size_t keylen,
                             int32_t partition_cnt, void* rkt_opaque, void* msg_opaque) {
  auto* registry = static_cast<TopicRegistry*>(rkt_opaque);
  {
    std::lock_guard lock(registry->mu);
    if (TopicEntry* e = registry->find(rd_kafka_topic_name(rkt))) e->partitions = partition_cnt;
  }
  return registry->partitioner(rkt, key, keylen, partition_cnt, rkt_opaque, msg_opaque);
}

}  // namespace outbox::kafka
