#include "outbox/relay/relay.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <optional>
#include <random>

#include "change_wait.hpp"
#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/pg/error.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/progress_record.hpp"
#include "outbox/relay/progress_store.hpp"
#include "outbox/relay/reconnect.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/sink_factory.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/transactions.hpp"
#include "progress_check.hpp"
#include "progress_recorder.hpp"
#include "publication_checker.hpp"
#include "server_history.hpp"
#include "session.hpp"
#include "sink_reports.hpp"
#include "stop_sequence.hpp"
#include "stream_loop.hpp"

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

}  // namespace

// The broker's settings decide whether --max-topics applies (SinkFactory::bounds_topics()).
RelayConfig bounded(RelayConfig config, const SinkFactory& sinks) {
  config.bound_topics = sinks.bounds_topics();
  return config;
}

class Relay::Impl : private Transactions::Host {
 public:
  Impl(asio::io_context& io, RelayConfig config, std::unique_ptr<SinkFactory> sinks)
      : io_(io),
        sinks_(std::move(sinks)),
        config_(bounded(std::move(config), *sinks_)),
        log_(make_logger()),
        change_(io.get_executor()),
        status_(
            io.get_executor(), config_.status_interval, kConfirmDelay,
            [this] {
              const Lsn flush = slot_confirm_lsn();
              return StatusReporter::Positions{std::max(flush, pipeline_.acknowledged()), flush};
            },
            [this](const StatusReporter::Positions& p) { return send_status(p); }),
        backoff_timer_(io),
        reconnect_(std::random_device{}()),
        recorder_(
            io.get_executor(), config_.slot, log_,
            {[this] { return progress_check_.records_progress() && progress_check_.verified(); },
             [this] { return confirm_lsn(); }, [this] { return checkpoint_key(); },
             [this] { return server_.on_standby() ? std::nullopt : server_.last_timeline(); },
             [this] {
               status_.confirm_soon();
               change_.notify();
               progress_check_.wake();
             },
             [this] { change_.notify(); },  // the stop sequence waits
             [this] { return pipeline_.tracker().confirmed_transactions(); }}),
        reports_(io.get_executor(), config_, pipeline_, run_, change_,
                 {[this](Fatal f) { fail(std::move(f)); },
                  [this](Fatal f) { fail_refused(std::move(f)); }, [this] { return leaving(); },
                  [this] { return conn() != nullptr; }, [this] { confirm_soon(); },
                  [this] { wake_all(); }}),
        pipeline_(config_, reports_, metrics_, log_),
        checker_(io.get_executor(), config_, pipeline_, metrics_, log_,
                 {[this] { return conn() && !leaving(); }, [this] { return leaving(); },
                  [this] { wake_stream(); }, [this] { confirm_soon(); }}),
        progress_check_(
            io.get_executor(), config_, log_, metrics_, run_, server_, recorder_, change_,
            {[this] { return checkpoint_key(); }, [this](Fatal f) { fail(f); },
             [this](Fatal f) { fail_refused(f); }, [this] { return producers_->refusal_advice(); },
             [this](int attempt) { return backoff(attempt); },
             [this](const std::string& r) { waiting_for_broker(r); }}),
        stream_(io.get_executor(), config_, pipeline_, checker_, status_, metrics_, run_, change_,
                {[this] { return stream_ends(); }, [this] { return leaving(); }}),
        stop_(config_, log_, run_, pipeline_, checker_, recorder_, progress_check_, status_,
              change_, [this](Fatal f) { fail(std::move(f)); }),
        session_(io.get_executor(), config_, log_,
                 {run_, server_, pipeline_, checker_, progress_check_, status_, change_, reports_,
                  stream_, stop_, metrics_},
                 {[this] { return leaving(); }, [this](Fatal f) { fail(std::move(f)); },
                  [this](Lsn from, Lsn to, std::uint32_t old) { ghosts(from, to, old); }}) {
    // Made here so that a bad setting of the broker's fails before anything runs.
    make_sink();
    if (exactly_once()) {
      transactions_ = sinks_->transactions(config_, pipeline_, metrics_, log_, *this);
      if (!transactions_) {
        // The flags refuse it first (--nats with --delivery exactly-once): a caller's bug.
        throw std::logic_error("--delivery exactly-once needs a broker with transactions");
      }
    }
    reports_.attach(transactions_.get());
    stream_.attach(transactions_.get());
    session_.attach(transactions_.get());
    stop_.attach(producers_.get(), transactions_.get());
  }

  awaitable<int> run() {
    while (!run_.ending()) {
      bool streamed = false;
      std::string reason;
      if (!reconnect_.standby_logged()) set_state(State::kConnecting, "connecting to PostgreSQL");
      try {
        co_await session_.run(streamed);
      } catch (const FatalError& f) {
        fail(f.fatal);
      } catch (const pg::Error& e) {
        if (!retryable(e)) {
          fail({kExitError, e.what()});
        } else if (pg::classify(e) == pg::ErrorKind::kSlotInUse) {
          reason = "slot in use by another connection";
          set_state(State::kStandby, "standby: " + std::string(e.what()));
          if (reconnect_.standby_first()) {
            log_->info("event=standby slot={} reason={}: waiting to take over", config_.slot,
                       quoted(e.what()));
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
          // end the session: leaving()), a due publication check (handled in StreamLoop). One
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
      co_await session_.end();
      if (run_.ending()) break;
      bool rewind_without_progress = false;
      if (pipeline_.rewinding()) {
        const std::size_t window = pipeline_.suspect_window();
        reports_.rewind();
        reason = "rewinding after the producer stopped";
        // Rewinds that make no progress back off like failed connections. A refused window of
        // suspects halved (Pipeline::produce_event()) is progress, at most log2 of its size
        // times in a row: the slot stays where it is while the bad record is searched for.
        const bool narrowed = pipeline_.suspect_window() < window;
        rewind_without_progress = reconnect_.rewound_without_progress(confirm_lsn()) && !narrowed;
      }
      run_.to(RunPhase::kConnecting);  // the next session
      ++metrics_.reconnects;
      if (metrics_.state != State::kStandby) set_state(State::kConnecting, reason);
      // A standby retries at a steady short pace so that it takes over soon after the active
      // relay lets go; other failures back off exponentially.
      const bool standby = metrics_.state == State::kStandby;
      const Reconnect::Next next =
          reconnect_.after_session(streamed, rewind_without_progress, standby);
      if (!standby) {
        log_->warn("event=reconnect slot={} attempt={} in_ms={} reason={}", config_.slot,
                   next.attempt, next.delay.count(), quoted(reason));
      }
      backoff_timer_.expires_after(next.delay);
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
    // Half the shutdown timeout for reading to the end of the transaction at hand, the rest for
    // its deliveries (see finishing_transaction() and StopSequence).
    if (!run_.request_stop(Clock::now(), config_.shutdown_timeout)) return;
    set_state(State::kStopping, "stopping");
    log_->info("event=stopping slot={}", config_.slot);
    wake_all();
  }

 private:
  // The sink and its progress store, from the factory the relay was given.
  void make_sink() {
    ProgressStore::Written written = [this](std::uint64_t seq, const std::string& error) {
      recorder_.on_written(seq, error);
    };
    SinkFactory::Parts parts =
        sinks_->make(io_.get_executor(), config_, reports_.handlers(), std::move(written));
    progress_ = std::move(parts.progress);
    recorder_.attach(progress_.get());
    progress_check_.attach(progress_.get());
    producers_ = std::move(parts.sink);
    reports_.attach(producers_.get(), progress_.get());
  }

  // Capped exponential backoff with jitter, so several relays do not retry in lockstep.
  std::chrono::milliseconds backoff(int attempt) override { return reconnect_.backoff(attempt); }

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
           Clock::now() < run_.stop_read_until();
  }
  // The stream loop ends: leaving, unless a stop lets the transaction at hand finish.
  bool stream_ends() const { return leaving() && !finishing_transaction(); }

  void wake_all() {
    if (conn()) conn()->cancel();
    checker_.cancel();
    change_.cancel();
    stream_.cancel();
    backoff_timer_.cancel();
    reports_.cancel();
    progress_check_.wake();
  }

  // A publication check is due or ended: the stream loop looks (a read wait is cut short only
  // for a check due or failed; see StreamLoop).
  void wake_stream() {
    if (change_.reading() && conn() && (checker_.due() || checker_.failed())) {
      conn()->cancel();
    }
    change_.notify();
  }

  // The session's replication connection; null between sessions.
  pg::ReplicationConnection* conn() const { return session_.connection(); }

  // Waits until notified (a delivery, a stop) or `until`.
  awaitable<void> wait_for_change(Clock::time_point until) override {
    co_await change_.wait(until);
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
  bool holds_slot() const override { return !run_.ending() && conn() && conn()->alive(); }
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
  Clock::time_point stop_deadline() const override { return run_.stop_deadline(); }
  bool failed() const override { return run_.failed(); }
  void waiting_for_broker(const std::string& reason) override {
    set_state(State::kConnecting, reason);
  }
  void committed() override { confirm_soon(); }
  void aborted() override { reports_.after_delivery(); }

  // The slot is confirmed up to what Kafka acknowledged, and never past the WAL position of the
  // last publication check that passed: inserts hidden by a publication altered since are
  // then at least never confirmed.
  Lsn confirm_lsn() const { return pipeline_.confirmable(); }

  // The position the slot is told: the confirmable one, and, when the relay records its
  // progress, not past the last record stored nor, until the comparison with the record passed,
  // where the session found the slot (ProgressCheck::bound()).
  Lsn slot_confirm_lsn() const { return progress_check_.bound(confirm_lsn()); }

  // A status update soon when the confirmable position passed what the slot was last told
  // (StatusReporter); a check soon when the acknowledged prefix passed the verified position.
  void confirm_soon() {
    if (!conn() || leaving()) return;
    if (pipeline_.waiting_for_check()) checker_.schedule();
    recorder_.write();
    status_.confirm_soon();
  }

  // StatusReporter's send: write is what the relay has handled (pg_stat_replication.write_lsn);
  // only flush, the verified position, moves the slot.
  bool send_status(const StatusReporter::Positions& p) {
    if (!conn() || !conn()->connected()) return false;
    checker_.schedule();
    try {
      conn()->send_status(p.write, p.flush, false);
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

  asio::io_context& io_;
  std::unique_ptr<SinkFactory> sinks_;  // the broker's (sink_factory.hpp)
  RelayConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  // Where the progress record lives (progress_store.hpp); made with the sink (make_sink()), so
  // declared before it.
  std::unique_ptr<ProgressStore> progress_;
  std::unique_ptr<RecordSink> producers_;  // the broker's clients
  // What the session's coroutine awaits (a change, or the replication socket), for whoever would
  // cut the wait short.
  ChangeWait change_;
  StatusReporter status_;
  asio::steady_timer backoff_timer_;
  Reconnect reconnect_;  // the pace between sessions (reconnect.hpp)
  // The life-cycle: connecting, streaming, rewinding, stopping, failed (run_machine.hpp).
  RunMachine run_;
  // The server across sessions: system, timeline and history, standby, the slot held.
  ServerHistory server_{config_.slot, log_};
  // At-least-once: the progress record written as the slot is confirmed (progress_recorder.hpp).
  ProgressRecorder recorder_;
  Metrics metrics_;
  // The Pipeline's sink over the broker's, and the broker's reports answered (sink_reports.hpp).
  SinkReports reports_;
  Pipeline pipeline_;           // it refers to config_, metrics_ and reports_ (as its Sink)
  PublicationChecker checker_;  // it refers to the pipeline
  // The slot compared with the progress record at every start and reconnect.
  ProgressCheck progress_check_;
  StreamLoop stream_;  // a session's stream loop
  StopSequence stop_;  // a session's end at a stop or failure
  Session session_;    // one connection's life (session.hpp)
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