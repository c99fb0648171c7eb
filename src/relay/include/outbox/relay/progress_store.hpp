// Where the relay's progress record lives (progress_record.hpp), as the relay sees it: a sink's
// store (src/sinks: the compacted checkpoint topic with Kafka, a key-value bucket with
// JetStream, a table of the database itself with SQS and EventBridge), made with the sink by the
// SinkFactory (sink_factory.hpp). Read before a slot is compared or made, written as the slot is
// confirmed. Every call that may wait on the network runs off the io thread; a write's outcome
// comes back on it. Not thread-safe: the io thread only.
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
  // "topic T", "JetStream key-value bucket B" or "PostgreSQL table T", for messages.
  virtual std::string where() const = 0;
  // How often a record may be written while nothing was delivered since the last one (only the
  // server's keepalives moved the confirmable position). A store in the database the relay
  // reads (PostgreSQL's) makes WAL with every write, which the server's next keepalive then
  // confirms: written at kProgressInterval, each idle write would cause the next.
  virtual std::chrono::milliseconds idle_interval() const { return kProgressInterval; }
  // How to recover the events of a gap committed after `from`, for the words of a loss (exit 4):
  // reconcile's repair by default (it reads Kafka back), then --accept-slot-loss.
  virtual std::string repair_advice(const std::string& from) const {
    return "Find and repair those events (outbox-relay reconcile --since the time of " + from +
           " --repair), then start the relay once with --accept-slot-loss";
  }
};

}  // namespace outbox::relay
