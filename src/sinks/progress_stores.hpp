// The ProgressStores (outbox/relay/progress_store.hpp) of the sinks: Kafka's compacted
// checkpoint topic, JetStream's key-value bucket, and a table of the database itself for the
// sinks that cannot be read back (SQS, EventBridge). Private to the sinks.
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
#include "outbox/sinks/sinks.hpp"

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

// SQS and EventBridge: pg::ProgressTable (a table of the database the relay reads) on a worker
// thread. `table` with an empty schema: the outbox table's. `sink` names the broker in the advice
// of a loss ("SQS", "EventBridge").
std::unique_ptr<relay::ProgressStore> pg_progress_store(boost::asio::any_io_executor io,
                                                        const relay::RelayConfig& config,
                                                        const ProgressTableName& table,
                                                        std::string sink,
                                                        relay::ProgressStore::Written written);

}  // namespace outbox::sinks
