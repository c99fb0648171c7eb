// The stream loop of a session (DESIGN.md "The one rule"): frames read from the replication
// connection, paced (ReadPacer), into the Pipeline; backpressure (no reading while too much is
// in flight; status updates go on); keepalives answered; exactly-once's transactions committed
// when due or when nothing is left to read; a due publication check started beside the stream
// (a failed one throws); a relation the outbox may have gained resolved; the io_context given a
// turn every kYieldFrames frames. It ends when the session does (Hooks::ends: a stop, which
// reads on to the end of the transaction at hand, a failure or a rewind) or throws. Private to
// the relay; the io thread only.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <functional>

#include "change_wait.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/relay/metrics.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/transactions.hpp"
#include "publication_checker.hpp"

namespace outbox::relay {

class StreamLoop {
 public:
  // Frames handled between two turns of the io_context.
  static constexpr std::size_t kYieldFrames = 256;

  struct Hooks {
    std::function<bool()> ends;     // the loop ends (leaving, unless a stop finishes a transaction)
    std::function<bool()> leaving;  // the session ends: a cancelled read is expected
  };

  StreamLoop(boost::asio::any_io_executor io, const RelayConfig& config, Pipeline& pipeline,
             PublicationChecker& checker, StatusReporter& status, Metrics& metrics,
             const RunMachine& run, ChangeWait& change, Hooks hooks);

  // Exactly-once's cycle (made after this); null otherwise.
  void attach(Transactions* transactions) { transactions_ = transactions; }

  // Streams from `conn` until Hooks::ends(); throws what reading or the Pipeline throws.
  boost::asio::awaitable<void> run(pg::ReplicationConnection& conn);
  // Cuts the read pause short (a stop, a failure, a rewind).
  void cancel() { pace_timer_.cancel(); }

 private:
  void on_keepalive(pg::ReplicationConnection& conn);
  void set_state(State s, const char* reason) {
    metrics_.state = s;
    metrics_.state_reason = reason;
  }

  boost::asio::any_io_executor io_;
  const RelayConfig& config_;
  Pipeline& pipeline_;
  PublicationChecker& checker_;
  StatusReporter& status_;
  Metrics& metrics_;
  const RunMachine& run_;
  ChangeWait& change_;
  Hooks hooks_;
  Transactions* transactions_ = nullptr;
  boost::asio::steady_timer pace_timer_;  // the read pause
};

}  // namespace outbox::relay
