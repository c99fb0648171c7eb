// One session of the relay: one replication connection's life. Set up: connect, IDENTIFY_SYSTEM
// (another database system is exit 4), the server's state (a standby before PostgreSQL 16 is
// refused), the timeline and its history (a promotion moves the Pipeline back to the switch
// point; what lay past it is reported as ghosts), the publication and the slot (slot_setup.hpp),
// the publication check, the deliveries in flight settled; then START_REPLICATION at
// stream_start() (session_rules.hpp), the slot compared with the progress record
// (ProgressCheck), exactly-once's transactions prepared, the stream loop (StreamLoop) and, when
// it ends, the stop sequence (StopSequence). end() closes it, whatever ended it. What lasts
// across sessions is ServerHistory's; the reconnect loop, its backoff and the life-cycle's
// phases are the Relay's. Private to the relay; the io thread only.
#pragma once

#include <spdlog/logger.h>

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "change_wait.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/metrics.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/transactions.hpp"
#include "progress_check.hpp"
#include "publication_checker.hpp"
#include "server_history.hpp"
#include "sink_reports.hpp"
#include "stop_sequence.hpp"
#include "stream_loop.hpp"

namespace outbox::relay {

class Session {
 public:
  using Clock = std::chrono::steady_clock;

  // The relay's parts a session drives; they outlive it.
  struct Parts {
    RunMachine& run;
    ServerHistory& server;
    Pipeline& pipeline;
    PublicationChecker& checker;
    ProgressCheck& progress;
    StatusReporter& status;
    ChangeWait& change;
    SinkReports& reports;
    StreamLoop& stream;
    StopSequence& stop;
    Metrics& metrics;
  };
  struct Hooks {
    std::function<bool()> leaving;  // the session ends (stop, failure, rewind)
    std::function<void(Fatal)> fail;
    // The broker holds events of `old_timeline` past its switch point (ServerHistory::Ghosts).
    ServerHistory::Ghosts ghosts;
  };

  Session(boost::asio::any_io_executor io, const RelayConfig& config,
          std::shared_ptr<spdlog::logger> log, Parts parts, Hooks hooks);

  // Exactly-once's cycle (made after this); null otherwise.
  void attach(Transactions* transactions) { transactions_ = transactions; }

  // A session, to its end: set up, streamed until a stop, a failure or a rewind, then the stop
  // sequence. `streamed`: START_REPLICATION succeeded. Throws what set-up or reading throws
  // (pg::Error, FatalError, BrokerUnavailable, boost::system::system_error); a FatalError or a
  // broken invariant of the stream loop fails the relay and runs the stop sequence.
  boost::asio::awaitable<void> run(bool& streamed);
  // After run(), however it ended: status updates and timers stopped, exactly-once's open
  // transaction ended when the session was lost (not left), the background check awaited, the
  // connection closed.
  boost::asio::awaitable<void> end();

  // The session's replication connection; null between sessions.
  pg::ReplicationConnection* connection() const { return conn_.get(); }

 private:
  boost::asio::awaitable<void> settle_deliveries();
  bool exactly_once() const { return config_.delivery == DeliveryMode::kExactlyOnce; }

  boost::asio::any_io_executor io_;
  const RelayConfig& config_;
  std::shared_ptr<spdlog::logger> log_;
  Parts p_;
  Hooks hooks_;
  Transactions* transactions_ = nullptr;
  std::unique_ptr<pg::ReplicationConnection> conn_;
};

}  // namespace outbox::relay
