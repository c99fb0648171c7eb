// Where the relay's progress record lives (progress_record.hpp), as the relay sees it: a sink's
// store (src/sinks: the compacted checkpoint topic with Kafka, a key-value bucket with
// JetStream), made with the sink by the SinkFactory (sink_factory.hpp). Read before a slot is
// compared or made, written as the slot is confirmed. Every call that may wait on the network
// runs off the io thread; a write's outcome comes back on it. Not thread-safe: the io thread
// only.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "outbox/relay/progress_record.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::relay {

class ProgressStore {
 public:
  // A write's outcome, on the io thread: its sequence number, and the error (empty: stored).
  using Written = std::function<void(std::uint64_t seq, const std::string& error)>;

  virtual ~ProgressStore() = default;
  // The key's last value (ProgressRead says why not).
  virtual boost::asio::awaitable<ProgressRead> read(std::string key,
                                                    std::chrono::milliseconds timeout) = 0;
  // The topic or bucket exists (made when missing): empty, or why not.
  virtual boost::asio::awaitable<std::string> ensure(std::chrono::milliseconds timeout) = 0;
  // Queues a write of `value` under `key`; its outcome goes to Written with `seq`. False: not
  // queued (tried again later).
  virtual bool write(const std::string& key, const std::string& value, std::uint64_t seq) = 0;
  // A delivery report of the sink's that is a progress record's (Kafka): taken, true.
  virtual bool take(const sink::Delivery&) { return false; }
  // "topic T" or "JetStream key-value bucket B", for messages.
  virtual std::string where() const = 0;
};

}  // namespace outbox::relay
