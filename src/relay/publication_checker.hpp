// The publication check while the relay streams (DESIGN.md "The one rule"): its catalog
// connection, its cadence (every --publication-check-interval, every 0.5 s while the confirmed
// position waits on a check), the check that runs in the background beside the stream, the
// fingerprint it compares, and the relations a partitioned outbox may gain. Private to the relay.
// Not thread-safe: the io_context's thread only.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::relay {

// When the next check is due: soon (kMinCheckGap after the last) while the confirmed position
// waits on a check, else the check interval after the last.
std::chrono::steady_clock::time_point next_check_due(std::chrono::steady_clock::time_point last,
                                                     bool waiting_for_check,
                                                     std::chrono::milliseconds interval);
inline constexpr std::chrono::milliseconds kMinCheckGap{500};

// What the relay's publication must publish (and, with --messages, that PUBLIC may not emit):
// the one description the bootstrap and every check use.
pg::PublicationTarget publication_target(const RelayConfig& config);

class PublicationChecker {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    std::function<bool()> may_schedule;    // a session streams and is not ending
    std::function<bool()> leaving;         // the session ends: a cancelled check is no error
    std::function<void()> wake_stream;     // a check is due, or a background check ended
    std::function<void()> verified_moved;  // a periodic check moved the verified position
  };

  PublicationChecker(boost::asio::any_io_executor executor, const RelayConfig& config,
                     Pipeline& pipeline, Metrics& metrics, std::shared_ptr<spdlog::logger> log,
                     Hooks hooks);

  // One check now on the catalog connection (connected if needed): the publication must publish
  // every insert into the tables and must not have been written since the previous check.
  // Throws FatalError (kExitConfig) otherwise, pg::Error when the catalog cannot be read.
  boost::asio::awaitable<void> check();

  // The catalog connection goes to this conninfo (the stream's server: see
  // pg::ReplicationConnection::same_server_conninfo), not to any host of a multi-host --pg.
  void set_server(std::string conninfo) { server_conninfo_ = std::move(conninfo); }

  // Arms the next check (see next_check_due()); no-op while one runs (it arms the next itself).
  void schedule();
  void cancel_timer();
  // The stream loop's turn: rethrows how a background check failed; starts a due one.
  void on_stream_turn();
  bool due() const { return due_; }
  bool failed() const { return static_cast<bool>(error_); }
  void clear_error() { error_ = nullptr; }

  // Waits for the background check under way (cancelling its statement when `cancel`), before
  // the catalog connection goes or is used by something else.
  boost::asio::awaitable<void> await_background(bool cancel);

  // A relation the last check did not know while the outbox is partitioned: reads the catalog
  // again (it may be a partition created since), and whether the relation still exists.
  boost::asio::awaitable<void> resolve_relation(std::uint32_t relid);

  // Cancels what the catalog connection waits on (a stop, a failure, a rewind).
  void cancel();
  // Closes the catalog connection (the session ended; the next check connects again).
  void disconnect();

 private:
  boost::asio::awaitable<void> background();
  boost::asio::awaitable<void> periodic();

  boost::asio::any_io_executor executor_;
  const RelayConfig& config_;
  Pipeline& pipeline_;
  Metrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  Hooks hooks_;
  std::unique_ptr<pg::ReplicationConnection> catalog_;
  std::string server_conninfo_;             // set_server(); empty: config's conninfo
  std::optional<std::string> fingerprint_;  // what the last check saw
  Clock::time_point last_check_;
  boost::asio::steady_timer timer_;  // the next check
  boost::asio::steady_timer idle_;   // await_background() waits on it
  bool armed_ = false;
  bool due_ = false;
  bool running_ = false;      // a check runs beside the stream
  std::exception_ptr error_;  // how it failed: on_stream_turn() rethrows it
};

}  // namespace outbox::relay
