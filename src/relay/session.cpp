#include "session.hpp"

#include <optional>
#include <stdexcept>
#include <string>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/relay/session_rules.hpp"
#include "slot_setup.hpp"

namespace outbox::relay {
using boost::asio::awaitable;
using pgoutput::Lsn;

namespace {

// Longest wait, before a reconnected stream starts, for the deliveries still in flight.
constexpr std::chrono::seconds kSettleTimeout{5};

}  // namespace

Session::Session(boost::asio::any_io_executor io, const RelayConfig& config,
                 std::shared_ptr<spdlog::logger> log, Parts parts, Hooks hooks)
    : io_(std::move(io)),
      config_(config),
      log_(std::move(log)),
      p_(parts),
      hooks_(std::move(hooks)) {}

awaitable<void> Session::run(bool& streamed) {
  p_.checker.clear_error();
  conn_ = std::make_unique<pg::ReplicationConnection>(io_);
  co_await conn_->connect(config_.conninfo, config_.connect_timeout);
  p_.checker.set_server(conn_->same_server_conninfo(config_.conninfo));
  pg::SystemInfo sys = co_await conn_->identify_system(config_.connect_timeout);
  p_.server.identify(sys);
  const pg::ServerState server = co_await pg::inspect_server(*conn_, config_.connect_timeout);
  p_.server.check_standby(server);
  pg::TimelineHistory history;
  if (sys.timeline > 1) {
    history = co_await conn_->timeline_history(sys.timeline, config_.connect_timeout);
  }
  const bool history_continues = p_.server.follow_timeline(
      sys, server, std::move(history), [this](Lsn at) { return p_.pipeline.timeline_switched(at); },
      hooks_.ghosts);
  const std::optional<pg::SlotState> found_slot = co_await ensure_publication_and_slot(
      *conn_, config_, p_.server, p_.progress, p_.pipeline, *log_);
  // Before the stream starts, on every connect: refuse a publication that hides outbox inserts.
  co_await p_.checker.check();
  // No re-send of what Kafka acknowledged (Pipeline::resume): let what is in flight be
  // acknowledged first, then start at the acknowledged prefix; the server starts at the
  // greater of it and the slot's confirmed_flush_lsn, which after a crash is the last one
  // written at a checkpoint, often far behind.
  co_await settle_deliveries();
  if (hooks_.leaving()) co_return;
  p_.pipeline.resume(history_continues);
  const Lsn start = stream_start(history_continues, p_.pipeline.acknowledged(), sys.xlogpos);
  const std::string command = pg::start_replication_command(
      config_.slot, config_.publication, start,
      [&](const std::string& v) { return conn_->quote_literal(v); },
      [&](const std::string& v) { return conn_->quote_identifier(v); },
      !config_.mapper.message_prefix.empty());
  co_await conn_->start_replication(command, config_.connect_timeout);
  p_.server.held_slot();
  streamed = true;
  // A stop or failure that came meanwhile keeps its phase; the stream loop ends at once.
  p_.run.stream_started();
  // Status updates from now on, also while Kafka is waited for below.
  p_.status.start();
  p_.reports.watch_deliveries();
  // A slot that existed is compared with the progress record (ProgressCheck).
  co_await p_.progress.start_session(found_slot, sys);
  // Exactly-once: only the slot's holder initialises the transactional.id (fencing any older
  // producer of it) and reads the checkpoint; what the server sends before it is skipped.
  if (exactly_once()) co_await transactions_->prepare();
  p_.metrics.state = State::kStreaming;
  p_.metrics.state_reason.clear();
  log_->info("event=streaming slot={} publication={} server_wal={} timeline={} start={}",
             config_.slot, config_.publication, sys.xlogpos.to_string(), sys.timeline,
             start.to_string());
  p_.checker.schedule();
  try {
    co_await p_.stream.run(*conn_);
  } catch (const FatalError& f) {
    hooks_.fail(f.fatal);
  } catch (const std::logic_error& e) {
    hooks_.fail({kExitError, std::string("broken invariant: ") + e.what()});
  }
  // Only stop or failure leave the loop normally: run the stop sequence.
  co_await p_.stop.run(*conn_, p_.run.stop_requested() ? p_.run.stop_deadline()
                                                       : Clock::now() + config_.shutdown_timeout);
}

awaitable<void> Session::end() {
  p_.status.stop();
  p_.reports.cancel();
  p_.checker.cancel_timer();
  if (exactly_once() && transactions_->phase() == TxnPhase::kOpen && !p_.run.ending() &&
      !p_.pipeline.rewinding()) {
    co_await transactions_->end_at_disconnect();
  }
  co_await p_.checker.await_background(true);
  p_.pipeline.on_disconnect();
  conn_.reset();
  p_.checker.disconnect();
}

// Waits (at most kSettleTimeout) until Kafka acknowledged every record in flight, so that the
// transactions they belong to are not sent again after a reconnect.
awaitable<void> Session::settle_deliveries() {
  const auto deadline = Clock::now() + kSettleTimeout;
  while (p_.pipeline.tracker().inflight_events() > 0 && !hooks_.leaving() &&
         Clock::now() < deadline) {
    co_await p_.change.wait(deadline);
  }
}

}  // namespace outbox::relay
