// The pipeline: replication stream -> decoder -> mapper -> producer -> ack watermark -> status
// updates. Reconnects with capped, jittered backoff; stops in sequence (stop reading, flush
// deliveries with a deadline, confirm what was acknowledged, end the copy, close).
// Not thread-safe: construct, run and stop on one io_context thread.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "outbox/kafka/producer.hpp"
#include "outbox/outbox/mapper.hpp"

namespace outbox::relay {

// Process exit codes, also documented in the README.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // start-up or unexpected failure
  kExitUsage = 2,        // bad flags
  kExitPoisonEvent = 3,  // an event could not be mapped or delivered, and --on-error=fail
  kExitSlotLost = 4,     // the slot vanished or was invalidated after we had it
};

struct RelayConfig {
  std::string conninfo;
  std::string slot = "outbox_relay";
  std::string publication = "outbox_relay";
  bool create = true;  // create publication and slot when missing
  outbox::MapperConfig mapper;
  kafka::ProducerConfig producer;
  std::chrono::milliseconds status_interval{10'000};
  std::chrono::milliseconds shutdown_timeout{30'000};
  std::chrono::milliseconds connect_timeout{30'000};
  std::size_t max_inflight_events = 100'000;
  std::size_t max_inflight_bytes = 256u << 20;
};

class Relay {
 public:
  // Throws kafka::ConfigError for a bad producer property, std::invalid_argument for a bad topic
  // template.
  Relay(boost::asio::io_context& io, RelayConfig config);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs until stopped or a fatal error; returns the process exit code.
  boost::asio::awaitable<int> run();

  // Begins the shutdown sequence (signal handlers call this on the io thread).
  void request_stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::relay
