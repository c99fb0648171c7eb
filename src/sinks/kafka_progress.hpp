// The progress record (outbox/relay/progress_record.hpp) in Kafka's compacted checkpoint topic,
// read back: the relay's start (on a worker thread, never the io thread) and the one-shot
// commands (progress_reader.hpp). Private to the sinks.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <string>

#include "outbox/kafka/consumer.hpp"
#include "outbox/relay/progress_record.hpp"

namespace outbox::sinks {

// Reads `topic` to its end (ConsumerConfig::read_committed says how) with a consumer of its own,
// blocking, and returns the last value of `key`. A topic the broker does not know holds no
// record.
relay::ProgressRead read_kafka_progress(const kafka::ConsumerConfig& config,
                                        const std::string& topic, const std::string& key,
                                        std::chrono::milliseconds timeout);

// The same on `worker`, awaited on the caller's executor.
boost::asio::awaitable<relay::ProgressRead> read_progress(boost::asio::thread_pool& worker,
                                                          kafka::ConsumerConfig config,
                                                          std::string topic, std::string key,
                                                          std::chrono::milliseconds timeout);

}  // namespace outbox::sinks
