#include "outbox/relay/relay.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <deque>
#include <exception>
#include <optional>
#include <random>
#include <unordered_set>
#include <variant>

#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pg/slot_rules.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/progress_record.hpp"
#include "outbox/relay/progress_store.hpp"
#include "outbox/relay/read_pacer.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/sink_factory.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/transactions.hpp"
#include "outbox/relay/txn_machine.hpp"
#include "progress_recorder.hpp"
#include "publication_checker.hpp"
#include "server_history.hpp"
#include "slot_refusal.hpp"

namespace outbox::relay {
using common::now_unix_ms;
using common::quoted;
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;
using pgoutput::Lsn;

namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::get("relay");
  return l ? l : spdlog::default_logger()->clone("relay");
}

// Errors after which reconnecting can help (pg::classify): connection trouble, server shutting
// down or starting, too many connections, slot held by another relay (standby).
bool retryable(const pg::Error& e) { return pg::retryable(pg::classify(e)); }

// The slot is told what Kafka acknowledged this long after the confirmable position advanced
// (coalesced: one status update for every report meanwhile), so a crash re-sends little.
constexpr std::chrono::milliseconds kConfirmDelay{100};

// Longest wait, before a reconnected stream starts, for the deliveries still in flight.
constexpr std::chrono::seconds kSettleTimeout{5};

// Frames handled between two turns of the io_context.
constexpr std::size_t kYieldFrames = 256;

}  // namespace

// The broker's settings decide whether --max-topics applies (SinkFactory::bounds_topics()).
RelayConfig bounded(RelayConfig config, const SinkFactory& sinks) {
  config.bound_topics = sinks.bounds_topics();
  return config;
}

class Relay::Impl : private Pipeline::Sink, private Transactions::Host {
 public:
  Impl(asio::io_context& io, RelayConfig config, std::unique_ptr<SinkFactory> sinks)
      : io_(io),
        sinks_(std::move(sinks)),
        config_(bounded(std::move(config), *sinks_)),
        log_(make_logger()),
        wake_(io),
        pace_timer_(io),
        status_(
            io.get_executor(), config_.status_interval, kConfirmDelay,
            [this] {
              const Lsn flush = slot_confirm_lsn();
              return StatusReporter::Positions{std::max(flush, pipeline_.acknowledged()), flush};
            },
            [this](const StatusReporter::Positions& p) { return send_status(p); }),
        backoff_timer_(io),
        delivery_watch_(io),
        rng_(std::random_device{}()),
        progress_wait_(io),
        recorder_(io.get_executor(), config_.slot, log_,
                  {[this] { return records_progress() && record_verified_; },
                   [this] { return confirm_lsn(); }, [this] { return checkpoint_key(); },
                   [this] { return server_.on_standby() ? std::nullopt : server_.last_timeline(); },
                   [this] {
                     status_.confirm_soon();
                     if (wait_ == Wait::kChange) wake_.cancel();
                     progress_wait_.cancel();
                   },
                   [this] {
                     if (wait_ == Wait::kChange) wake_.cancel();  // flush_progress() waits
                   }}),
        pipeline_(config_, *this, metrics_, log_),
        checker_(io.get_executor(), config_, pipeline_, metrics_, log_,
                 {[this] { return conn_ && !leaving(); }, [this] { return leaving(); },
                  [this] { wake_stream(); }, [this] { confirm_soon(); }}) {
    // Made here so that a bad setting of the broker's fails before anything runs.
    make_sink();
    if (exactly_once()) {
      transactions_ = sinks_->transactions(config_, pipeline_, metrics_, log_, *this);
      if (!transactions_) {
        // The flags refuse it first (--nats with --delivery exactly-once): a caller's bug.
        throw std::logic_error("--delivery exactly-once needs a broker with transactions");
      }
    }
  }

  awaitable<int> run() {
    int attempt = 0;
    bool standby_logged = false;
    while (!run_.ending()) {
      bool streamed = false;
      std::string reason;
      if (!standby_logged) set_state(State::kConnecting, "connecting to PostgreSQL");
      try {
        co_await session(streamed);
      } catch (const FatalError& f) {
        fail(f.fatal);
      } catch (const pg::Error& e) {
        if (!retryable(e)) {
          fail({kExitError, e.what()});
        } else if (pg::classify(e) == pg::ErrorKind::kSlotInUse) {
          reason = "slot in use by another connection";
          set_state(State::kStandby, "standby: " + std::string(e.what()));
          if (!standby_logged) {
            log_->info("event=standby slot={} reason={}: waiting to take over", config_.slot,
                       quoted(e.what()));
            standby_logged = true;
          }
        } else {
          reason = e.what();
        }
      } catch (const BrokerUnavailable& e) {
        reason = e.what();
      } catch (const boost::system::system_error& e) {
        if (e.code() != asio::error::operation_aborted) {
          if (!run_.ending()) fail({kExitError, std::string("I/O error: ") + e.what()});
        } else if (!leaving()) {
          // Every cancel has an owner that expects it: a stop, a failure or a rewind (all three
          // end the session: leaving()), a due publication check (handled in stream()). One
          // that reaches here had none: a bug, said by name and counted; the session ends and
          // starts again from the confirmed position, so nothing is lost.
          reason = "an operation was cancelled with no owner";
          log_->error(
              "event=unowned_cancel slot={} confirmed={} error={}: an operation of the session "
              "was cancelled by no stop, failure or rewind (a bug; please report it with this "
              "log); reconnecting",
              config_.slot, confirm_lsn().to_string(), quoted(e.what()));
        }
      } catch (const std::exception& e) {
        fail({kExitError, std::string("unexpected error: ") + e.what()});
      }
      status_.stop();
      delivery_watch_.cancel();
      checker_.cancel_timer();
      if (exactly_once() && transactions_->phase() == TxnPhase::kOpen && !run_.ending() &&
          !pipeline_.rewinding()) {
        co_await transactions_->end_at_disconnect();
      }
      co_await checker_.await_background(true);
      pipeline_.on_disconnect();
      conn_.reset();
      checker_.disconnect();
      if (run_.ending()) break;
      bool rewind_without_progress = false;
      if (pipeline_.rewinding()) {
        rewind();
        reason = "rewinding after the producer stopped";
        // Rewinds that make no progress back off like failed connections.
        rewind_without_progress = confirm_lsn() <= last_rewind_at_;
        last_rewind_at_ = confirm_lsn();
      }
      run_.to(RunPhase::kConnecting);  // the next session
      ++metrics_.reconnects;
      if (metrics_.state != State::kStandby) set_state(State::kConnecting, reason);
      if (streamed && !rewind_without_progress) {
        attempt = 0;
        standby_logged = false;
      }
      // A standby retries at a steady short pace so that it takes over soon after the active
      // relay lets go; other failures back off exponentially.
      auto delay = metrics_.state == State::kStandby ? jittered(1000) : backoff(attempt++);
      if (metrics_.state != State::kStandby) {
        log_->warn("event=reconnect slot={} attempt={} in_ms={} reason={}", config_.slot, attempt,
                   delay.count(), quoted(reason));
      }
      backoff_timer_.expires_after(delay);
      boost::system::error_code ec;
      co_await backoff_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    status_.stop();
    if (pipeline_.tracker().inflight_events() > 0) {
      log_->warn(
          "event=stopped_with_unacknowledged slot={} events={} confirmed={}: they will be sent "
          "again on the next start",
          config_.slot, pipeline_.tracker().inflight_events(), confirm_lsn().to_string());
    }
    // Nothing may make a producer again (ProgressRecorder's writes): a client made now would
    // keep the io_context, and the process, running.
    recorder_.close();
    producers_->reset();
    if (const std::optional<Fatal>& fatal = run_.fatal()) {
      log_->error("event=fatal slot={} exit_code={} confirmed={} error={}", config_.slot,
                  fatal->code, confirm_lsn().to_string(), quoted(fatal->message));
      co_return fatal->code;
    }
    log_->info("event=stopped slot={} confirmed={}", config_.slot, confirm_lsn().to_string());
    co_return kExitOk;
  }

  const Metrics& metrics() {
    metrics_.confirmed_lsn = confirm_lsn();
    const AckTracker& tracker = pipeline_.tracker();
    metrics_.publication_verified_lsn = pipeline_.verified();
    metrics_.received_lsn = pipeline_.received();
    metrics_.server_wal_end = pipeline_.server_wal_end();
    metrics_.events_in_flight = tracker.inflight_events();
    metrics_.bytes_in_flight = tracker.inflight_bytes();
    metrics_.transactions_confirmed = tracker.confirmed_transactions();
    auto oldest = tracker.oldest_unacked_commit_time_ms();
    metrics_.oldest_unacked_age_seconds =
        oldest ? std::max<double>(0, static_cast<double>(now_unix_ms() - *oldest) / 1000.0) : 0;
    metrics_.producer_healthy = !run_.failed();
    return metrics_;
  }

  const RelayConfig& config() const { return config_; }

  void request_stop() {
    if (!run_.request_stop()) return;
    set_state(State::kStopping, "stopping");
    log_->info("event=stopping slot={}", config_.slot);
    // Half the shutdown timeout for reading to the end of the transaction at hand, the rest for
    // its deliveries (see finishing_transaction() and finish()).
    stop_read_deadline_ = Clock::now() + config_.shutdown_timeout / 2;
    stop_deadline_ = Clock::now() + config_.shutdown_timeout;
    wake_all();
  }

 private:
  // The sink and its progress store, from the factory the relay was given.
  void make_sink() {
    RecordSink::Handlers handlers{[this](const sink::Delivery& d) { on_delivery(d); },
                                  [this](const std::string& m) { on_producer_fatal(m); },
                                  [this](const std::string& m) { on_sink_refused(m); }};
    ProgressStore::Written written = [this](std::uint64_t seq, const std::string& error) {
      recorder_.on_written(seq, error);
    };
    SinkFactory::Parts parts =
        sinks_->make(io_.get_executor(), config_, std::move(handlers), std::move(written));
    progress_ = std::move(parts.progress);
    recorder_.attach(progress_.get());
    producers_ = std::move(parts.sink);
  }

  std::chrono::milliseconds backoff(int attempt) override {
    // Capped exponential backoff with jitter, so several relays do not retry in lockstep.
    return jittered(std::min<std::int64_t>(30'000, 200LL << std::min(attempt, 8)));
  }

  std::chrono::milliseconds jittered(std::int64_t base_ms) {
    std::uniform_int_distribution<std::int64_t> jitter(base_ms / 2, base_ms);
    return std::chrono::milliseconds(jitter(rng_));
  }

  void set_state(State s, std::string reason) {
    metrics_.state = s;
    metrics_.state_reason = std::move(reason);
  }

  // The first failure is the relay's (RunMachine); every one wakes every wait.
  void fail(Fatal f) override {
    run_.fail(std::move(f));
    wake_all();
  }
  // The broker refused the relay's credentials or certificate: nothing more can be acknowledged.
  void fail_refused(Fatal f) {
    run_.fail(std::move(f), true);
    wake_all();
  }

  // The session ends: stop, failure, or a rewind after a refused batch (the Pipeline's, answered
  // or not yet).
  bool leaving() const override { return run_.ending() || pipeline_.rewinding(); }

  // A graceful stop (SIGTERM) reads on to the end of the PostgreSQL transaction at hand, within
  // --shutdown-timeout, so that what it delivered can be confirmed whole and a restarted relay
  // sends none of it again.
  bool finishing_transaction() const {
    return run_.stopping() && !pipeline_.rewinding() && pipeline_.in_transaction() &&
           Clock::now() < stop_read_deadline_;
  }
  // The stream loop ends: leaving, unless a stop lets the transaction at hand finish.
  bool stream_ends() const { return leaving() && !finishing_transaction(); }

  void wake_all() {
    if (conn_) conn_->cancel();
    checker_.cancel();
    wake_.cancel();
    pace_timer_.cancel();
    backoff_timer_.cancel();
    delivery_watch_.cancel();
    progress_wait_.cancel();
  }

  // A publication check is due or ended: the stream loop looks (a read wait is cut short only
  // for a check due or failed; see stream()).
  void wake_stream() {
    if (wait_ == Wait::kReadable && conn_ && (checker_.due() || checker_.failed())) {
      conn_->cancel();
    }
    if (wait_ == Wait::kChange) wake_.cancel();
  }

  // Waits until notified (a delivery, a stop) or `until`.
  awaitable<void> wait_for_change(Clock::time_point until) override {
    wait_ = Wait::kChange;
    wake_.expires_at(until);
    boost::system::error_code ec;
    co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
    wait_ = Wait::kNone;
  }

  awaitable<void> session(bool& streamed) {
    checker_.clear_error();
    conn_ = std::make_unique<pg::ReplicationConnection>(io_.get_executor());
    co_await conn_->connect(config_.conninfo, config_.connect_timeout);
    checker_.set_server(conn_->same_server_conninfo(config_.conninfo));
    pg::SystemInfo sys = co_await conn_->identify_system(config_.connect_timeout);
    server_.identify(sys);
    const pg::ServerState server = co_await pg::inspect_server(*conn_, config_.connect_timeout);
    server_.check_standby(server);
    pg::TimelineHistory history;
    if (sys.timeline > 1) {
      history = co_await conn_->timeline_history(sys.timeline, config_.connect_timeout);
    }
    const bool history_continues = server_.follow_timeline(
        sys, server, std::move(history), [this](Lsn at) { return pipeline_.timeline_switched(at); },
        [this](Lsn from, Lsn to, std::uint32_t old) { ghosts(from, to, old); });
    const std::optional<pg::SlotState> found_slot = co_await ensure_publication_and_slot();
    // Before the stream starts, on every connect: refuse a publication that hides outbox inserts.
    co_await checker_.check();
    // No re-send of what Kafka acknowledged (Pipeline::resume): let what is in flight be
    // acknowledged first, then start at the acknowledged prefix; the server starts at the
    // greater of it and the slot's confirmed_flush_lsn, which after a crash is the last one
    // written at a checkpoint, often far behind.
    co_await settle_deliveries();
    if (leaving()) co_return;
    pipeline_.resume(history_continues);
    const Lsn acked = pipeline_.acknowledged();
    const Lsn start = history_continues && acked <= sys.xlogpos ? acked : Lsn{};
    const std::string command = pg::start_replication_command(
        config_.slot, config_.publication, start,
        [&](const std::string& v) { return conn_->quote_literal(v); },
        [&](const std::string& v) { return conn_->quote_identifier(v); },
        !config_.mapper.message_prefix.empty());
    co_await conn_->start_replication(command, config_.connect_timeout);
    server_.held_slot();
    streamed = true;
    // A stop or failure that came meanwhile keeps its phase; the stream loop ends at once.
    if (run_.phase() == RunPhase::kConnecting) run_.to(RunPhase::kStreaming);
    // Status updates from now on, also while Kafka is waited for below.
    status_.start();
    watch_deliveries();
    // A slot that existed is compared with the progress record (verify_record()).
    ++session_gen_;
    record_verified_ = !found_slot || progress_ == nullptr;
    session_from_ = found_slot ? found_slot->confirmed_flush_lsn.value_or(Lsn{}) : Lsn{};
    if (!record_verified_) {
      if (exactly_once()) {
        co_await verify_record(*found_slot, sys, session_gen_);
      } else {
        asio::co_spawn(io_, verify_record(*found_slot, sys, session_gen_), asio::detached);
      }
    }
    // Exactly-once: only the slot's holder initialises the transactional.id (fencing any older
    // producer of it) and reads the checkpoint; what the server sends before it is skipped.
    if (exactly_once()) co_await transactions_->prepare();
    set_state(State::kStreaming, "");
    log_->info("event=streaming slot={} publication={} server_wal={} timeline={} start={}",
               config_.slot, config_.publication, sys.xlogpos.to_string(), sys.timeline,
               start.to_string());
    checker_.schedule();
    try {
      co_await stream();
    } catch (const FatalError& f) {
      fail(f.fatal);
    } catch (const std::logic_error& e) {
      fail({kExitError, std::string("broken invariant: ") + e.what()});
    }
    // Only stop or failure leave the loop normally: run the shutdown sequence.
    co_await finish();
  }

  // ---- exactly-once (--delivery exactly-once) ----------------------------------------------

  bool exactly_once() const { return config_.delivery == DeliveryMode::kExactlyOnce; }

  // The checkpoint's key: the database system and the slot (a slot name is only unique there).
  std::string checkpoint_key() const override {
    return progress_key(server_.system_id().value_or("?"), config_.slot);
  }

  // Transactions::Host.
  bool decoding_on_standby() const override { return server_.on_standby(); }
  bool stopping() const override { return run_.stop_requested(); }
  bool holds_slot() const override { return !run_.ending() && conn_ && conn_->alive(); }
  std::uint32_t timeline() const override { return server_.timeline(); }
  std::optional<Lsn> switch_point(std::uint32_t old_timeline) const override {
    return server_.switch_point(old_timeline);
  }
  // Kafka holds events of transactions the promoted server does not have: the old timeline's
  // between where the new one left it and what was acknowledged (or checkpointed). Said loudly,
  // never silently: consumers may have acted on them.
  void ghosts(Lsn from, Lsn to, std::uint32_t old_timeline) override {
    ++metrics_.timeline_ghosts;
    log_->error(
        "event=ghosts_published slot={} timeline={} from={} to={}: the broker holds events of "
        "timeline {} committed after the point where the promoted server's timeline left it; "
        "those transactions do not exist on the promoted server (a failover without "
        "synchronized_standby_slots on the primary: docs/failover.md). The relay resumes at {}. "
        "Find the events with outbox-relay reconcile and compensate",
        config_.slot, old_timeline, from.to_string(), to.to_string(), old_timeline,
        from.to_string());
  }
  Clock::time_point stop_deadline() const override { return stop_deadline_; }
  bool failed() const override { return run_.failed(); }
  void waiting_for_broker(const std::string& reason) override {
    set_state(State::kConnecting, reason);
  }
  void committed() override { confirm_soon(); }
  void aborted() override { after_delivery(); }

  // Waits (at most kSettleTimeout) until Kafka acknowledged every record in flight, so that the
  // transactions they belong to are not sent again after a reconnect.
  awaitable<void> settle_deliveries() {
    const auto deadline = Clock::now() + kSettleTimeout;
    while (pipeline_.tracker().inflight_events() > 0 && !leaving() && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
  }

  // The publication and the slot (pg::SlotBootstrap, as the setup command): created when missing
  // unless --no-create; a slot that vanished after the relay had it, or was invalidated, is a
  // loss (kExitSlotLost). The publication first, logged before the slot is looked at.
  // Returns the slot when it existed (not created now): it is checked against the progress
  // record once streaming holds it (verify_record()).
  awaitable<std::optional<pg::SlotState>> ensure_publication_and_slot() {
    std::optional<pg::SlotState> found_slot;
    const auto& m = config_.mapper;
    pg::BootstrapOptions options{publication_target(config_), config_.slot, config_.create,
                                 server_.had_slot()};
    const std::array<pg::BootstrapPart, 2> parts{pg::BootstrapPart::kPublication,
                                                 pg::BootstrapPart::kSlot};
    for (const pg::BootstrapPart part : parts) {
      options.part = part;
      // A standby is read-only: only the slot may be made there.
      options.create =
          config_.create && !(server_.on_standby() && part == pg::BootstrapPart::kPublication);
      // A slot about to be created: first whether a slot of this name delivered before and is
      // gone (check_progress_record()). Once per process: a slot the relay had and lost while
      // running is kSlotVanished (exit 4) below.
      const bool look_first = part == pg::BootstrapPart::kSlot && options.create &&
                              !server_.had_slot() && progress_ != nullptr;
      if (look_first) options.create = false;
      pg::BootstrapResult r =
          co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
      std::optional<Lsn> accepted;  // a loss accepted: the record moves to the new slot
      if (look_first && r.refusal == pg::BootstrapRefusal::kSlotMissing) {
        accepted = co_await check_missing_slot();
        options.create = true;
        r = co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
        if (accepted && r.created_slot) accepted = r.created_slot;
      } else if (part == pg::BootstrapPart::kSlot && r.ok() && !r.created_slot) {
        found_slot = r.slot;
      }
      if (r.created_publication) {
        log_->info(
            "event=created_publication publication={} table={}", config_.publication,
            quoted(m.table.empty() ? "none" : common::QualifiedName{m.schema, m.table}.text()));
      }
      if (r.created_slot) log_->info("event=created_slot slot={}", config_.slot);
      if (r.refusal) {
        throw FatalError(
            slot_refusal(*r.refusal, r.slot, config_, server_.on_standby(), confirm_lsn()));
      }
      if (accepted) co_await record_accepted(*accepted);
    }
    co_return found_slot;
  }

  // The progress record of this system and slot (progress_record.hpp), read on a thread of its
  // own. The broker refusing the relay: exit 1; unreachable: retried with backoff (nothing is
  // created or streamed meanwhile).
  awaitable<ProgressRead> read_record(const std::string& before) {
    std::string key = checkpoint_key();
    ProgressRead read = co_await progress_->read(std::move(key), config_.connect_timeout);
    if (read.refused) {
      const Fatal refused{kExitError, read.error + "; " + producers_->refusal_advice() + "; " +
                                          before + " did not go on"};
      fail_refused(refused);
      throw FatalError(refused);
    }
    if (!read.error.empty()) {
      throw BrokerUnavailable("reading the progress record of slot " + config_.slot + " in " +
                              progress_->where() + " before " + before + ": " + read.error);
    }
    if (read.last) recorder_.read(*read.last);
    co_return read;
  }

  std::string record_words() const {
    return "its progress record (" + progress_->where() + ", key " + checkpoint_key() + ")";
  }

  // A loss found on start: with --accept-slot-loss said as an error and counted, the stream goes
  // on; without, the relay stops (exit 4) before anything is created or streamed.
  void loss_found(const std::string& event, const std::string& what, const std::string& from,
                  const std::string& held, bool repairable = true) {
    if (repairable && gap_repair_unused_) {
      gap_repair_unused_ = false;
      ++metrics_.slot_gaps_repaired;
      log_->warn(
          "event=slot_gap_repaired slot={} store={} key={}: {}; the outbox rows of the gap "
          "that the broker lacked were published before streaming: {}",
          config_.slot, quoted(progress_->where()), quoted(checkpoint_key()), what,
          config_.gap_repaired);
      return;
    }
    if (config_.accept_slot_loss) {
      ++metrics_.slot_losses_accepted;
      log_->error(
          "event={} slot={} store={} key={}: {}; --accept-slot-loss goes on, and events "
          "committed after {} may be missing (outbox-relay reconcile finds and repairs them)",
          event, config_.slot, quoted(progress_->where()), quoted(checkpoint_key()), what, from);
      return;
    }
    throw FatalError({kExitSlotLost, what + ". " + held +
                                         ". Find and repair those events (outbox-relay reconcile "
                                         "--since the time of " +
                                         from +
                                         " --repair), then start the relay once with "
                                         "--accept-slot-loss"});
  }

  // The slot is missing and about to be created. The progress record says whether a slot of
  // that name delivered before: dropped or invalidated while the relay was down
  // (max_slot_wal_keep_size, idle_replication_slot_timeout, a failover to a server without it, a
  // restore, an operator), it takes with it the events committed after its last confirmed
  // position, which a new slot starts past. No record: a first start. Returns the recorded
  // position when the loss is accepted.
  awaitable<std::optional<Lsn>> check_missing_slot() {
    const ProgressRead read = co_await read_record("creating slot " + config_.slot);
    if (!read.last && read.bad.empty()) co_return std::nullopt;
    const std::string last = read.last ? read.last->to_string() : "'" + read.bad + "'";
    loss_found("slot_loss_accepted",
               "replication slot " + config_.slot + " does not exist, but " + record_words() +
                   " shows that the relay delivered through " + last +
                   " from a slot of that name: it was dropped or invalidated while the relay was "
                   "down, and a new slot starts past the events committed since then",
               last, "Nothing was created or streamed");
    co_return read.last.value_or(Lsn{});
  }

  // The slot exists: it must not be ahead of what the relay recorded, and the server's WAL must
  // reach the recorded position. The relay confirms the slot only through positions its record
  // holds (at-least-once: slot_confirm_lsn(); exactly-once: the committed checkpoint), so a slot
  // ahead of the record was moved by another client (pg_replication_slot_advance, a consumer of
  // pg_logical_slot_get_changes, a relay with other flags) or made anew after the record: the
  // events between were never delivered. A server whose WAL ends before the record on the
  // record's timeline is not the one the relay delivered from (restored from a backup, another
  // cluster at the same address). Returns the position the record moves to when accepted.
  awaitable<std::optional<Lsn>> check_slot_against_record(const pg::SlotState& slot,
                                                          const pg::SystemInfo& sys) {
    const ProgressRead read = co_await read_record("streaming from slot " + config_.slot);
    if (!read.last) co_return std::nullopt;  // a first start (a bad value waits for creation)
    const Lsn recorded = *read.last;
    const Lsn confirmed = slot.confirmed_flush_lsn.value_or(Lsn{});
    if (!server_.on_standby() && read.timeline && *read.timeline == sys.timeline &&
        recorded > sys.xlogpos) {
      loss_found(
          "server_behind_record_accepted",
          "the server's WAL ends at " + sys.xlogpos.to_string() + " on timeline " +
              std::to_string(sys.timeline) + ", before " + recorded.to_string() +
              ", through which " + record_words() +
              " shows the relay delivered on that timeline: the server was restored from "
              "a backup or is not the one the relay delivered from. The broker holds events of "
              "transactions this server does not have, and events it commits at positions "
              "up to " +
              recorded.to_string() + " may be taken for delivered",
          confirmed.to_string(), held_words(), false);
      co_return confirmed;
    }
    if (confirmed > recorded) {
      loss_found("slot_ahead_accepted",
                 "replication slot " + config_.slot + " is confirmed through " +
                     confirmed.to_string() + ", past " + recorded.to_string() + ", through which " +
                     record_words() +
                     " shows the relay delivered: another client moved the slot, or it was "
                     "dropped and made anew since; the events committed between " +
                     recorded.to_string() + " and " + confirmed.to_string() +
                     " were never delivered and the slot would skip them",
                 recorded.to_string(), held_words());
      co_return confirmed;
    }
    co_return std::nullopt;
  }

  // What a start stopped by check_slot_against_record() left as it was: exactly-once checks
  // before anything is streamed; at-least-once beside the stream, confirming nothing meanwhile.
  std::string held_words() const {
    return exactly_once() ? "Nothing was streamed"
                          : "Neither the slot nor the progress record moved (events read "
                            "meanwhile were sent and will be sent again)";
  }

  // check_slot_against_record() while the stream holds the slot (status updates go on); Kafka
  // away is waited out here with backoff, on the same connection. Exactly-once awaits it before
  // KafkaTransactions::prepare(): nothing is committed, so the checkpoint cannot move past a gap
  // unseen. At-least-once runs it beside the stream: events are produced meanwhile, but neither
  // the slot nor the record moves until it passed (slot_confirm_lsn(), ProgressRecorder). Ends
  // with its session (`gen`), a stop or a failure; a loss found is the relay's failure.
  awaitable<void> verify_record(pg::SlotState slot, pg::SystemInfo sys, std::uint64_t gen) {
    // A stop or a failure lets a comparison under way finish (flush_progress() waits for it,
    // to record what was delivered), but nothing is tried again and no loss is recorded.
    auto current = [&] { return gen == session_gen_ && !run_.ending(); };
    verifying_ = true;
    struct Done {
      Impl& self;
      ~Done() {
        self.verifying_ = false;
        if (self.wait_ == Wait::kChange) self.wake_.cancel();
      }
    } done{*this};
    int attempt = 0;
    while (current()) {
      std::string error;
      try {
        const std::optional<Lsn> accepted = co_await check_slot_against_record(slot, sys);
        if (gen != session_gen_ || (accepted && !current())) co_return;
        if (accepted) co_await record_accepted(*accepted);
        if (gen != session_gen_) co_return;
        record_verified_ = true;
        gap_repair_unused_ = false;  // the start's comparison is done
        log_->info("event=progress_verified slot={} store={} slot_confirmed={}", config_.slot,
                   quoted(progress_->where()),
                   slot.confirmed_flush_lsn.value_or(Lsn{}).to_string());
        recorder_.write();
        co_return;
      } catch (const BrokerUnavailable& e) {
        error = e.what();
      } catch (const FatalError& f) {
        if (!current()) co_return;
        if (exactly_once()) throw;
        fail(f.fatal);
        co_return;
      }
      if (!current()) co_return;
      const auto delay = backoff(attempt++);
      if (exactly_once()) waiting_for_broker("waiting for the broker: " + error);
      log_->warn("event=kafka_unavailable slot={} attempt={} in_ms={} reason={}", config_.slot,
                 attempt, delay.count(), quoted(error));
      co_await wait_progress(Clock::now() + delay);
    }
  }

  // Waits on the progress timer until `until`, a progress record's report, or a stop.
  awaitable<void> wait_progress(Clock::time_point until) {
    progress_wait_.expires_at(until);
    boost::system::error_code ec;
    co_await progress_wait_.async_wait(asio::redirect_error(use_awaitable, ec));
  }

  // A loss accepted: the record moves to the slot's position at once, so that the next start
  // does not stop on the same loss again.
  awaitable<void> record_accepted(Lsn lsn) {
    co_await recorder_.ensure();
    if (!recorder_.ready()) {
      throw BrokerUnavailable("making " + progress_->where() + " for the progress record of slot " +
                              config_.slot);
    }
    recorder_.due_now();
    recorder_.write(lsn);
    const auto deadline = Clock::now() + config_.connect_timeout;
    while (recorder_.acked() < lsn && !run_.ending() && Clock::now() < deadline) {
      co_await wait_progress(deadline);
    }
    if (recorder_.acked() < lsn && !run_.ending()) {
      throw BrokerUnavailable("writing the progress record of slot " + config_.slot + " to " +
                              progress_->where() + ": " +
                              recorder_.error().value_or("no acknowledgement"));
    }
    log_->info("event=progress_recorded slot={} lsn={}", config_.slot, lsn.to_string());
  }

  // At-least-once with Kafka: the slot is confirmed only through a position the progress record
  // holds (so that a slot ahead of the record was moved by another client, or made anew:
  // check_slot_against_record()).
  bool records_progress() const { return !exactly_once() && progress_ != nullptr; }

  // The position the slot is told: the confirmable one, and, when the relay records its
  // progress, not past the last record Kafka acknowledged.
  Lsn slot_confirm_lsn() const {
    const Lsn c = confirm_lsn();
    if (!records_progress()) return c;
    // Until the slot was compared with the record (verify_record()), it stays where the session
    // found it: a record ahead of the server's WAL (a restore) bounds nothing, and a keepalive or
    // the stop would confirm the slot past the loss the comparison is about to name.
    if (!record_verified_) return std::min(c, session_from_);
    return std::min(c, recorder_.acked());
  }

  // At a stop: the last confirmable position is recorded before the final confirmation, so that
  // the next start sends nothing delivered again. Bounded: `deadline`, at least a second.
  awaitable<void> flush_progress(Clock::time_point deadline) {
    // Only the relay's end: a rewind's session confirms again soon after.
    if (!records_progress() || run_.broker_refused() || !run_.ending()) co_return;
    const Lsn target = confirm_lsn();
    if (target <= recorder_.acked()) co_return;
    const auto until = std::max(deadline, Clock::now() + std::chrono::seconds(1));
    // A stop soon after a start or a rewind, while verify_record() is under way: its comparison
    // ends first (nothing is recorded before it), when something was delivered since the start.
    if (!record_verified_ && target > session_from_) {
      while (verifying_ && !record_verified_ && Clock::now() < until) {
        co_await wait_for_change(until);
      }
    }
    if (!record_verified_) co_return;
    recorder_.cancel_timer();
    recorder_.due_now();
    recorder_.write();
    if (recorder_.written() < target && !recorder_.making()) co_return;  // nothing under way
    // Also while the store is being made: its call holds the progress producer, which the stop
    // is about to end.
    while ((recorder_.acked() < target || recorder_.making()) && Clock::now() < until) {
      co_await wait_for_change(until);
    }
  }

  // The slot is confirmed up to what Kafka acknowledged, and never past the WAL position of the
  // last publication check that passed: inserts hidden by a publication altered since are
  // then at least never confirmed.
  Lsn confirm_lsn() const { return pipeline_.confirmable(); }

  awaitable<void> stream() {
    std::size_t handled = 0;  // frames handled since the last yield to the io_context
    ReadPacer pacer(config_.read_pause);
    for (;;) {
      if (stream_ends()) co_return;
      checker_.on_stream_turn();  // a check due starts beside the stream; a failed one throws
      if (exactly_once() &&
          transactions_->commit_due(transactions_->interval_passed() || pipeline_.paused())) {
        co_await transactions_->commit();
        continue;
      }
      if (pipeline_.backpressured()) {
        // Stop reading the socket until acknowledgements free room; status updates go on.
        set_state(State::kBackpressured, "in-flight bound reached");
        auto t0 = Clock::now();
        co_await wait_for_change(t0 + config_.status_interval);
        metrics_.backpressure_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        if (!pipeline_.backpressured() && !run_.stop_requested()) {
          set_state(State::kStreaming, "");
        }
        continue;
      }
      std::optional<std::span<const std::byte>> frame = conn_->try_read();
      if (!frame) {
        if (pacer.busy(Clock::now())) {
          // Its own timer: delivery reports, which wake wait_for_change(), must not cut it short.
          auto read_now = [&] {
            const pg::ReplicationConnection::Backlog b = conn_->backlog();
            return pacer.read_now(b.queued, b.capacity);
          };
          if (!read_now()) {
            pace_timer_.expires_after(pacer.pause());
            boost::system::error_code ec;
            co_await pace_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
            read_now();
          }
          if (stream_ends()) co_return;
          conn_->read_available();
          continue;
        }
        // Nothing to read: a Kafka transaction with records commits now.
        if (exactly_once() && transactions_->commit_due(true)) {
          co_await transactions_->commit();
          continue;
        }
        try {
          // Reset on every way out: left true after a lost connection (pg::Error), it made the
          // next check due cancel the next session's connect (event=unowned_cancel; before,
          // "I/O error: Operation canceled", exit 1, after a PostgreSQL crash).
          struct ReadingWait {
            Wait& wait;
            explicit ReadingWait(Wait& w) : wait(w) { wait = Wait::kReadable; }
            ~ReadingWait() { wait = Wait::kNone; }
          } reading(wait_);
          co_await conn_->wait_readable();
        } catch (const boost::system::system_error& e) {
          if (e.code() != asio::error::operation_aborted ||
              !(leaving() || checker_.due() || checker_.failed())) {
            throw;
          }
        }
        continue;
      }
      pacer.on_frame(frame->size());
      if (++handled % kYieldFrames == 0) {
        // A stream that never runs dry must not starve delivery reports and status updates.
        // The frame stays valid: nothing reads the connection meanwhile.
        co_await asio::post(io_.get_executor(), use_awaitable);
      }
      for (;;) {
        const Pipeline::Step step = pipeline_.on_frame(*frame);
        if (step == Pipeline::Step::kDone) break;
        if (step == Pipeline::Step::kKeepalive) {
          on_keepalive();
          break;
        }
        if (stream_ends()) co_return;  // e.g. the producer stopped at a refused batch
        if (step == Pipeline::Step::kResolveRelation) {
          try {
            co_await checker_.resolve_relation(pipeline_.resolving_relid());
          } catch (const boost::system::system_error& e) {
            if (e.code() != asio::error::operation_aborted || !leaving()) throw;
          }
        } else {
          // Wait for delivery reports (room in librdkafka's queue, or the record sent alone).
          co_await wait_for_change(Clock::now() + std::chrono::milliseconds(100));
        }
        if (stream_ends()) co_return;
      }
    }
  }

  void on_keepalive() {
    const Pipeline::Keepalive k = pipeline_.keepalive();
    if (k.idle_advanced) checker_.schedule();
    // The server sends an unrequested keepalive when our reported position lags its own while it
    // waits for WAL (e.g. busy unpublished tables): answer soon so the slot does not hold WAL.
    if (k.reply_requested ||
        (k.idle_advanced && Clock::now() - status_.last_sent() >= std::chrono::seconds(1))) {
      send_status_now();
    }
  }

  // After each delivery report: a failure may end the relay or the session; a waiting reader
  // may go on.
  void after_delivery() {
    confirm_soon();
    if (pipeline_.fatal() && !run_.failed()) fail(*pipeline_.fatal());
    // Once per rewind (RunMachine::answer_rewind()): the stop sequence's own waits must not be
    // cut short again.
    if (pipeline_.rewinding() && run_.answer_rewind()) {
      // A sink that goes on (a delivery timed out; not a refused batch, which stops it) would
      // send the records queued behind the failed one when the broker answers again, ahead of
      // it. Exactly-once aborts the Kafka transaction instead: nothing of it becomes visible.
      if (!exactly_once() && !producers_->stopped()) producers_->halt();
      wake_all();
    }
    if (wait_ == Wait::kChange &&
        ((transactions_ && transactions_->committing()) || !pipeline_.paused() || leaving() ||
         pipeline_.below_low_watermark())) {
      wake_.cancel();
    }
  }

  // Pipeline::Sink over the broker's RecordSink.
  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              Pipeline::Route route) override {
    if (exactly_once()) transactions_->before_record();
    if (producers_->queued() == 0) last_report_ = Clock::now();  // the deadline starts now
    // Exactly-once: every record goes in the transaction (nothing else is in flight anyway).
    return producers_->produce(record, opaque, route == Pipeline::Route::kAlone);
  }
  bool stopped() const override { return producers_->stopped(); }

  // Every delivery report, of any producer: a checkpoint record's is the commit's
  // (Transactions::take); the others are the Pipeline's.
  void on_delivery(const sink::Delivery& d) {
    // A progress record's report is not the events' (its own producer): counted, a progress
    // record timing out every message.timeout.ms kept the events' deadline from ever passing
    // while the broker was frozen (no rewind, the events waited for the thaw).
    if (progress_ && progress_->take(d)) return;
    last_report_ = Clock::now();
    if (!(transactions_ && transactions_->take(d))) pipeline_.on_delivery(d);
    after_delivery();
  }

  // A fatal producer error (a refused batch under the gapless guarantee, an idempotent sequence
  // lost after a broker restart): what was not acknowledged is sent again from the confirmed
  // position by a new producer; nothing is lost, nothing passes an earlier record.
  void on_producer_fatal(const std::string& message) {
    if (transactions_ && transactions_->fenced()) {
      transactions_->on_fenced(message);
      return;
    }
    if (run_.stop_requested()) {
      fail({kExitError, producers_->client() + " fatal error while stopping: " + message});
      return;
    }
    if (exactly_once()) {
      pipeline_.abort_kafka_transaction(producers_->client() + " fatal error: " + message);
    } else {
      pipeline_.begin_rewind(message);
    }
    after_delivery();
  }

  // A broker refused the relay's credentials or certificate. librdkafka would reconnect and be
  // refused for ever while the relay held the slot, looked alive and delivered nothing, and a
  // standby with good credentials could not take over. Credentials are read at start, so only a
  // restart (by the supervisor, exit code 1) picks up a fixed --kafka-config or certificate.
  void on_sink_refused(const std::string& what) {
    if (run_.failed()) return;
    fail_refused({kExitError, what + "; " + producers_->refusal_advice() + "; slot " +
                                  config_.slot + " is not confirmed past " +
                                  confirm_lsn().to_string()});
  }

  void rewind() {
    producers_->renew();  // reports still due are dropped: those records are sent again
    if (transactions_) transactions_->producers_renewed();
    pipeline_.rewound();
  }

  // -X message.timeout.ms, at-least-once: the relay's deadline, not librdkafka's (which fails the
  // oldest queued records while later ones of their partition still go: out of order). Records
  // in flight and no report for that long: the broker did not answer; the producers are halted
  // (every queued record fails at once) and the relay rewinds.
  void watch_deliveries() {
    const std::optional<std::chrono::milliseconds> timeout = producers_->delivery_timeout();
    if (!timeout) return;
    delivery_watch_.expires_after(std::min<std::chrono::milliseconds>(
        std::chrono::seconds(1),
        std::max<std::chrono::milliseconds>(*timeout / 5, std::chrono::milliseconds(10))));
    delivery_watch_.async_wait([this, timeout](const boost::system::error_code& ec) {
      if (ec || !conn_ || leaving()) return;
      if (producers_->queued() > 0 && Clock::now() - last_report_ >= *timeout) {
        pipeline_.begin_rewind("no delivery report within message.timeout.ms (" +
                               std::to_string(timeout->count()) +
                               " ms): the broker did not answer");
        after_delivery();
        return;
      }
      watch_deliveries();
    });
  }

  // A status update soon when the confirmable position passed what the slot was last told
  // (StatusReporter); a check soon when the acknowledged prefix passed the verified position.
  void confirm_soon() {
    if (!conn_ || leaving()) return;
    if (pipeline_.waiting_for_check()) checker_.schedule();
    recorder_.write();
    status_.confirm_soon();
  }

  void send_status_now() {
    if (!conn_ || !conn_->connected()) return;
    status_.send_now();
  }

  // StatusReporter's send: write is what the relay has handled (pg_stat_replication.write_lsn);
  // only flush, the verified position, moves the slot.
  bool send_status(const StatusReporter::Positions& p) {
    if (!conn_ || !conn_->connected()) return false;
    checker_.schedule();
    try {
      conn_->send_status(p.write, p.flush, false);
    } catch (const pg::Error& e) {
      // The read loop sees the broken connection and reconnects.
      log_->debug("event=status_failed slot={} error={}", config_.slot, quoted(e.what()));
      return false;
    }
    if (p.flush != status_.last_reported()) {
      log_->debug("event=confirmed slot={} lsn={} received={}", config_.slot, p.flush.to_string(),
                  pipeline_.received().to_string());
    }
    recorder_.write();
    return true;
  }

  // A stop with acknowledged transactions past the last passing publication check checks once
  // more, so that the final confirmation covers them and the next start sends none of them
  // again. On a connection of its own (a check cut short by the stop may have left the catalog
  // connection mid-query). A check that fails here is the same exit 5 as while streaming; one
  // that cannot run leaves the position where it was (those transactions are sent again).
  awaitable<void> final_check() {
    // A stop, or a poison event (exit 3): what was delivered before it is confirmed. Not after a
    // publication problem (exit 5) or any other failure.
    const bool poison = run_.failed() && run_.fatal()->code == kExitPoisonEvent;
    if (!run_.stopping() && !poison) co_return;
    if (pipeline_.rewinding() || !pipeline_.waiting_for_check()) co_return;
    co_await checker_.await_background(true);
    checker_.disconnect();
    try {
      co_await checker_.check();
    } catch (const FatalError& f) {
      fail(f.fatal);
    } catch (const std::exception& e) {
      log_->warn("event=publication_check_failed slot={} confirmed={} error={}", config_.slot,
                 confirm_lsn().to_string(), quoted(e.what()));
    }
  }

  // Stop sequence: reading has stopped; flush deliveries with a deadline, confirm what was
  // acknowledged, end the copy, close.
  awaitable<void> finish() {
    const auto deadline =
        run_.stop_requested() ? stop_deadline_ : Clock::now() + config_.shutdown_timeout;
    // Nothing more can be acknowledged when the broker refuses the relay's credentials.
    while (!run_.broker_refused() && producers_->queued() > 0 && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
    if (exactly_once() && transactions_->phase() == TxnPhase::kOpen) {
      // Whole PostgreSQL transactions commit; a part of one is aborted and sent again next time.
      if (!run_.failed() && !pipeline_.rewinding() && transactions_->commit_due(true)) {
        co_await transactions_->commit();
      } else if (transactions_->records() > 0 || pipeline_.in_transaction()) {
        co_await transactions_->abort();
      }
    }
    co_await final_check();
    co_await flush_progress(deadline);
    send_status_now();
    status_.stop();
    recorder_.cancel_timer();
    log_->info("event=final_confirm slot={} lsn={} unacknowledged={}", config_.slot,
               slot_confirm_lsn().to_string(), pipeline_.tracker().inflight_events());
    try {
      co_await conn_->end_copy(std::chrono::seconds(5));
    } catch (const std::exception& e) {
      log_->warn("event=end_copy_failed slot={} error={}", config_.slot, quoted(e.what()));
    }
  }

  asio::io_context& io_;
  std::unique_ptr<SinkFactory> sinks_;  // the broker's (sink_factory.hpp)
  RelayConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  // Where the progress record lives (progress_store.hpp); made with the sink (make_sink()), so
  // declared before it.
  std::unique_ptr<ProgressStore> progress_;
  std::unique_ptr<RecordSink> producers_;  // the broker's clients
  std::unique_ptr<pg::ReplicationConnection> conn_;
  asio::steady_timer wake_;
  asio::steady_timer pace_timer_;  // the read pause of stream()
  StatusReporter status_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer delivery_watch_;  // watch_deliveries()
  // RelayConfig::gap_repaired, for the first loss found only.
  bool gap_repair_unused_ = !config_.gap_repaired.empty();
  Clock::time_point last_report_;  // the last delivery report, or the first record since
  std::mt19937_64 rng_;
  // The life-cycle: connecting, streaming, rewinding, stopping, failed (run_machine.hpp).
  RunMachine run_;
  // What the session's coroutine awaits, for whoever would cut the wait short: the replication
  // socket (stream(); wake_stream() cancels it for a publication check) or a change
  // (wait_for_change(); a delivery, a stop, a progress record).
  enum class Wait { kNone, kReadable, kChange };
  Wait wait_ = Wait::kNone;
  // The server across sessions: system, timeline and history, standby, the slot held.
  ServerHistory server_{config_.slot, log_};
  Clock::time_point stop_read_deadline_;  // see finishing_transaction()
  Clock::time_point stop_deadline_;       // a stop's end (--shutdown-timeout after it began)
  bool record_verified_ = false;          // the slot was compared with the record this session
  bool verifying_ = false;                // verify_record() runs
  Lsn session_from_;                      // the slot's confirmed position when the session began
  std::uint64_t session_gen_ = 0;
  asio::steady_timer progress_wait_;  // wait_progress()
  // At-least-once: the progress record written as the slot is confirmed (progress_recorder.hpp).
  ProgressRecorder recorder_;
  Lsn last_rewind_at_;  // confirmed position at the last rewind
  Metrics metrics_;
  Pipeline pipeline_;           // it refers to config_, metrics_ and the producers (as its Sink)
  PublicationChecker checker_;  // it refers to the pipeline
  // Exactly-once's cycle (null otherwise); last: it refers to the pipeline and the producers.
  std::unique_ptr<Transactions> transactions_;
};

Relay::Relay(asio::io_context& io, RelayConfig config, std::unique_ptr<SinkFactory> sinks)
    : impl_(std::make_unique<Impl>(io, std::move(config), std::move(sinks))) {}
Relay::~Relay() = default;
awaitable<int> Relay::run() { return impl_->run(); }
void Relay::request_stop() { impl_->request_stop(); }
const Metrics& Relay::metrics() { return impl_->metrics(); }
const RelayConfig& Relay::config() const { return impl_->config(); }

}  // namespace outbox::relay
