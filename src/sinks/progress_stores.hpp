// The two ProgressStores (outbox/relay/progress_store.hpp) of the sinks: Kafka's compacted
// checkpoint topic, JetStream's key-value bucket. Private to the sinks.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "kafka_producers.hpp"
#include "outbox/nats/publisher.hpp"
#include "outbox/relay/progress_store.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::sinks {

// Marks the opaque of a Kafka progress record (its sequence number in the low bits).
inline constexpr std::uint64_t kProgressTag = 1ULL << 60;

// Kafka: records of the checkpoint topic through KafkaProducers::progress(), read with a
// consumer of their own on a worker thread.
std::unique_ptr<relay::ProgressStore> kafka_progress_store(KafkaProducers& producers,
                                                           const relay::RelayConfig& config,
                                                           kafka::ProducerConfig producer,
                                                           relay::ProgressStore::Written written);

// JetStream: nats::ProgressBucket on a worker thread.
std::unique_ptr<relay::ProgressStore> nats_progress_store(boost::asio::any_io_executor io,
                                                          const relay::RelayConfig& config,
                                                          const nats::PublisherConfig& nats,
                                                          const std::string& bucket,
                                                          relay::ProgressStore::Written written);

}  // namespace outbox::sinks
