// The pipeline: replication stream -> decoder -> mapper -> producer -> ack watermark -> status
// updates. Reconnects with capped, jittered backoff; stops in sequence (stop reading, flush
// deliveries with a deadline, confirm what was acknowledged, end the copy, close).
// Not thread-safe: construct, run and stop on one io_context thread.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "outbox/mapping/mapper.hpp"
#include "outbox/relay/metrics.hpp"

namespace outbox::relay {

// Process exit codes, also documented in docs/failures.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // start-up or unexpected failure
  kExitUsage = 2,        // bad flags
  kExitPoisonEvent = 3,  // an event could not be mapped or delivered, and --on-error=fail
  kExitSlotLost = 4,     // the slot vanished or was invalidated after we had it
  // The publication or the table would hide outbox inserts from the stream (publication
  // missing, not publishing the table or its inserts, row filter, partitions left out), or the
  // publication was altered while streaming: nothing past the last verified position is confirmed.
  kExitConfig = 5,
};

// What to do with an event that cannot be mapped or that the broker rejects for good.
enum class OnError {
  kFail,  // stop with kExitPoisonEvent; the slot stays before the event
  kDlq,   // publish it to the dead-letter topic with the error; handled once that is acknowledged
};

// --delivery: at-least-once (the default), or exactly-once through the broker's transactions
// (Kafka's).
enum class DeliveryMode { kAtLeastOnce, kExactlyOnce };

struct RelayConfig {
  std::string conninfo;
  std::string slot = "outbox_relay";
  std::string publication = "outbox_relay";
  bool create = true;  // create publication and slot when missing
  // A missing slot whose progress record shows that it delivered before (progress_record.hpp) is
  // created anew anyway, the loss logged as an error and counted; without it the relay exits 4.
  bool accept_slot_loss = false;
  // Set by the caller once it published the outbox rows of a gap that the progress record shows
  // (a slot dropped or made anew while the relay was down) before the relay starts: what it did,
  // for the log. The first start then goes on past that loss (logged, counted in
  // slot_gaps_repaired) and moves the record to the slot; a loss found later is not covered.
  std::string gap_repaired;
  mapping::MapperConfig mapper;
  std::chrono::milliseconds status_interval{10'000};
  // While the stream is busy, the longest pause of the reader after draining what libpq
  // buffered, before it reads the socket again (0: read as soon as it is readable). The pause
  // adapts below this to how fast the server writes. See StreamLoop (stream_loop.hpp).
  std::chrono::microseconds read_pause{500};
  std::chrono::milliseconds shutdown_timeout{30'000};
  std::chrono::milliseconds connect_timeout{30'000};
  // Longest time between two checks of the publication on a plain connection while streaming.
  // The slot is never confirmed past the WAL position of the last check that passed.
  std::chrono::milliseconds publication_check_interval{30'000};
  // In flight = produced, not yet acknowledged. Bound the relay's memory whatever the broker
  // does (docs/failures.md); reading stops at either bound and resumes at half of it.
  std::size_t max_inflight_events = 20'000;
  std::size_t max_inflight_bytes = 16u << 20;
  OnError on_error = OnError::kFail;
  std::string dlq_topic = "outbox.dlq";
  // Distinct Kafka topics events may go to in this process's life: an event rendering another one
  // is poison. librdkafka keeps state for every topic produced to until the process ends
  // (docs/security.md, bounds).
  std::size_t max_topics = 10'000;
  // max_topics applies: set by the Relay from its SinkFactory::bounds_topics() (Kafka: yes).
  bool bound_topics = true;
  // Exactly-once: each Kafka transaction carries whole PostgreSQL transactions and, in the same
  // transaction, the end position of the last one as a record of checkpoint_topic (compacted;
  // key: system identifier/slot). The slot is confirmed only after the Kafka commit. The
  // transactional.id is the sink's (src/sinks), "outbox-relay." + slot when not given.
  DeliveryMode delivery = DeliveryMode::kAtLeastOnce;
  // The progress record's topic with Kafka (--checkpoint-topic); no event may render it.
  std::string checkpoint_topic = "outbox-relay.checkpoints";
  // Longest time a Kafka transaction stays open while events flow; an idle stream commits at once.
  std::chrono::milliseconds transaction_interval{100};
};

class SinkFactory;

class Relay {
 public:
  // `sinks` makes the broker's parts (sink_factory.hpp) here: whatever it throws for a bad
  // setting (the broker's ConfigError) comes out of the constructor; std::invalid_argument for
  // a bad topic template; std::logic_error for exactly-once with a broker without transactions.
  Relay(boost::asio::io_context& io, RelayConfig config, std::unique_ptr<SinkFactory> sinks);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs until stopped or a fatal error; returns the process exit code.
  boost::asio::awaitable<int> run();

  // Begins the shutdown sequence (signal handlers call this on the io thread).
  void request_stop();

  // Counters and gauges, refreshed on every call (gauges are computed then). Same thread only.
  const Metrics& metrics();

  const RelayConfig& config() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::relay
