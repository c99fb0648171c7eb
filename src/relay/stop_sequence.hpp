// The end of a session that stops or fails (its stream loop has ended; a rewind's session ends
// through it too): deliveries flushed within the deadline (not when the broker refused the
// relay), exactly-once's open transaction committed when it holds whole PostgreSQL transactions
// or aborted, a last publication check for what was acknowledged since the last one, the last
// confirmable position recorded (at-least-once, at the relay's end), the final status update,
// the copy ended. Its choices are session_rules.hpp's (transaction_at_end(),
// final_check_wanted(), progress_flush_wanted()). Private to the relay; the io thread only.
#pragma once

#include <spdlog/logger.h>

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "change_wait.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/transactions.hpp"
#include "progress_check.hpp"
#include "progress_recorder.hpp"
#include "publication_checker.hpp"

namespace outbox::relay {

class StopSequence {
 public:
  using Clock = std::chrono::steady_clock;

  StopSequence(const RelayConfig& config, std::shared_ptr<spdlog::logger> log,
               const RunMachine& run, Pipeline& pipeline, PublicationChecker& checker,
               ProgressRecorder& recorder, ProgressCheck& progress, StatusReporter& status,
               ChangeWait& change, std::function<void(Fatal)> fail);

  // The sink and exactly-once's cycle (null otherwise), made after this.
  void attach(RecordSink* sink, Transactions* transactions) {
    sink_ = sink;
    transactions_ = transactions;
  }

  // Runs the sequence on the session's connection. `deadline`: the stop's end when a stop was
  // asked for, else --shutdown-timeout from now.
  boost::asio::awaitable<void> run(pg::ReplicationConnection& conn, Clock::time_point deadline);

 private:
  boost::asio::awaitable<void> final_check();
  boost::asio::awaitable<void> flush_progress(Clock::time_point deadline);

  const RelayConfig& config_;
  std::shared_ptr<spdlog::logger> log_;
  const RunMachine& run_;
  Pipeline& pipeline_;
  PublicationChecker& checker_;
  ProgressRecorder& recorder_;
  ProgressCheck& progress_;
  StatusReporter& status_;
  ChangeWait& change_;
  std::function<void(Fatal)> fail_;
  RecordSink* sink_ = nullptr;
  Transactions* transactions_ = nullptr;
};

}  // namespace outbox::relay
