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
#include <exception>
#include <optional>
#include <random>
#include <unordered_set>
#include <variant>

#include "kafka_producers.hpp"
#include "kafka_transactions.hpp"
#include "nats_publishers.hpp"
#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/kafka/consumer.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pg/slot_rules.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/read_pacer.hpp"
#include "outbox/relay/status_reporter.hpp"
#include "outbox/relay/txn_machine.hpp"
#include "progress_record.hpp"
#include "publication_checker.hpp"

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

constexpr std::uint64_t kCheckpointOpaque = KafkaTransactions::kCheckpointOpaque;
constexpr const char* kSpareSuffix = KafkaProducers::kSpareSuffix;

// Frames handled between two turns of the io_context.
constexpr std::size_t kYieldFrames = 256;

}  // namespace

class Relay::Impl : private Pipeline::Sink, private KafkaTransactions::Host {
 public:
  Impl(asio::io_context& io, RelayConfig config)
      : io_(io),
        config_(std::move(config)),
        log_(make_logger()),
        // Made here so that a bad -X property or NATS setting fails before anything runs.
        producers_(make_sink()),
        wake_(io),
        pace_timer_(io),
        status_(
            io.get_executor(), config_.status_interval, kConfirmDelay,
            [this] {
              const Lsn flush = confirm_lsn();
              return StatusReporter::Positions{std::max(flush, pipeline_.acknowledged()), flush};
            },
            [this](const StatusReporter::Positions& p) { return send_status(p); }),
        backoff_timer_(io),
        delivery_watch_(io),
        rng_(std::random_device{}()),
        pipeline_(config_, *this, metrics_, log_),
        checker_(io.get_executor(), config_, pipeline_, metrics_, log_,
                 {[this] { return conn_ && !leaving(); }, [this] { return leaving(); },
                  [this] { wake_stream(); }, [this] { confirm_soon(); }}),
        transactions_(config_, pipeline_, kafka_, metrics_, log_, transactional_id(), *this) {}

  awaitable<int> run() {
    int attempt = 0;
    bool standby_logged = false;
    while (!stopping_ && !fatal_) {
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
      } catch (const KafkaUnavailable& e) {
        reason = e.what();
      } catch (const boost::system::system_error& e) {
        if (e.code() != asio::error::operation_aborted) {
          if (!stopping_ && !fatal_) fail({kExitError, std::string("I/O error: ") + e.what()});
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
      if (exactly_once() && transactions_.phase() == TxnPhase::kOpen && !stopping_ && !fatal_ &&
          !pipeline_.rewinding()) {
        co_await transactions_.end_at_disconnect();
      }
      co_await checker_.await_background(true);
      pipeline_.on_disconnect();
      conn_.reset();
      checker_.disconnect();
      if (stopping_ || fatal_) break;
      bool rewind_without_progress = false;
      if (pipeline_.rewinding()) {
        rewind();
        reason = "rewinding after the producer stopped";
        // Rewinds that make no progress back off like failed connections.
        rewind_without_progress = confirm_lsn() <= last_rewind_at_;
        last_rewind_at_ = confirm_lsn();
      }
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
    producers_->reset();
    if (fatal_) {
      log_->error("event=fatal slot={} exit_code={} confirmed={} error={}", config_.slot,
                  fatal_->code, confirm_lsn().to_string(), quoted(fatal_->message));
      co_return fatal_->code;
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
    metrics_.producer_healthy = !fatal_;
    return metrics_;
  }

  const RelayConfig& config() const { return config_; }

  void request_stop() {
    if (stopping_) return;
    set_state(State::kStopping, "stopping");
    log_->info("event=stopping slot={}", config_.slot);
    stopping_ = true;
    // Half the shutdown timeout for reading to the end of the transaction at hand, the rest for
    // its deliveries (see finishing_transaction() and finish()).
    stop_read_deadline_ = Clock::now() + config_.shutdown_timeout / 2;
    stop_deadline_ = Clock::now() + config_.shutdown_timeout;
    wake_all();
  }

 private:
  // The sink: NATS JetStream with --nats, else Kafka (kafka_ then points at it).
  std::unique_ptr<RecordSink> make_sink() {
    RecordSink::Handlers handlers{[this](const sink::Delivery& d) { on_delivery(d); },
                                  [this](const std::string& m) { on_producer_fatal(m); },
                                  [this](const std::string& m) { on_sink_refused(m); }};
    if (!config_.nats.urls.empty()) {
      return std::make_unique<NatsPublishers>(io_.get_executor(), config_, std::move(handlers));
    }
    auto kafka = std::make_unique<KafkaProducers>(io_.get_executor(), config_, transactional_id(),
                                                  std::move(handlers));
    kafka_ = kafka.get();
    return kafka;
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

  void fail(Fatal f) {
    if (!fatal_) fatal_ = std::move(f);
    wake_all();
  }

  // The session ends: stop, failure, or a rewind after a refused batch.
  bool leaving() const override { return stopping_ || fatal_ || pipeline_.rewinding(); }

  // A graceful stop (SIGTERM) reads on to the end of the PostgreSQL transaction at hand, within
  // --shutdown-timeout, so that what it delivered can be confirmed whole and a restarted relay
  // sends none of it again.
  bool finishing_transaction() const {
    return stopping_ && !fatal_ && !pipeline_.rewinding() && pipeline_.in_transaction() &&
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
  }

  // A publication check is due or ended: the stream loop looks (a read wait is cut short only
  // for a check due or failed; see stream()).
  void wake_stream() {
    if (reading_wait_ && conn_ && (checker_.due() || checker_.failed())) conn_->cancel();
    if (waiting_) wake_.cancel();
  }

  // Waits until notified (a delivery, a stop) or `until`.
  awaitable<void> wait_for_change(Clock::time_point until) override {
    waiting_ = true;
    wake_.expires_at(until);
    boost::system::error_code ec;
    co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
    waiting_ = false;
  }

  awaitable<void> session(bool& streamed) {
    checker_.clear_error();
    conn_ = std::make_unique<pg::ReplicationConnection>(io_.get_executor());
    co_await conn_->connect(config_.conninfo, config_.connect_timeout);
    checker_.set_server(conn_->same_server_conninfo(config_.conninfo));
    pg::SystemInfo sys = co_await conn_->identify_system(config_.connect_timeout);
    if (system_id_ && *system_id_ != sys.system_id) {
      throw FatalError({kExitSlotLost, "connected to a different PostgreSQL system (id " +
                                           sys.system_id + ", was " + *system_id_ +
                                           "): the slot's history does not carry over"});
    }
    system_id_ = sys.system_id;
    const pg::ServerState server = co_await pg::inspect_server(*conn_, config_.connect_timeout);
    check_standby(server);
    // The timeline's ancestors and where each ended: WAL before that point is the same on both.
    history_.clear();
    if (sys.timeline > 1) {
      history_ = co_await conn_->timeline_history(sys.timeline, config_.connect_timeout);
    }
    // What Kafka acknowledged is in this server's WAL, unchanged, on the same timeline, and on a
    // later one (a promotion) up to the point where it left the old one.
    // The same running server as before (a standby the relay decoded on, promoted since) holds
    // what it sent in its WAL, whatever its timeline now.
    const bool same_server = server_start_ == server.postmaster_start;
    server_start_ = server.postmaster_start;
    bool history_continues = !timeline_ || *timeline_ == sys.timeline || same_server;
    if (timeline_ && *timeline_ != sys.timeline && same_server) {
      log_->warn(
          "event=timeline_changed slot={} timeline={} was={} same_server=true: the server the "
          "relay decodes on was promoted; what Kafka acknowledged is in its WAL and is not sent "
          "again",
          config_.slot, sys.timeline, *timeline_);
    } else if (!history_continues) {
      if (const std::optional<Lsn> at = switch_point(*timeline_)) {
        history_continues = true;
        const Lsn past = pipeline_.timeline_switched(*at);
        if (past > *at) ghosts(*at, past, *timeline_);
        log_->warn(
            "event=timeline_changed slot={} timeline={} was={} switch_point={}: resuming at what "
            "Kafka acknowledged before it; nothing acknowledged is sent again",
            config_.slot, sys.timeline, *timeline_, at->to_string());
      } else {
        log_->warn(
            "event=timeline_changed slot={} timeline={} was={}: timeline {} is not in the new "
            "one's history; events Kafka acknowledged after the slot's position may be sent again",
            config_.slot, sys.timeline, *timeline_, *timeline_);
      }
    }
    timeline_ = sys.timeline;
    co_await ensure_publication_and_slot();
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
    had_slot_ = true;
    streamed = true;
    // Status updates from now on, also while Kafka is waited for below.
    status_.start();
    watch_deliveries();
    // Exactly-once: only the slot's holder initialises the transactional.id (fencing any older
    // producer of it) and reads the checkpoint; what the server sends before it is skipped.
    if (exactly_once()) co_await transactions_.prepare();
    co_await ensure_progress_topic();
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

  std::string transactional_id() const {
    return config_.producer.transactional_id.empty() ? "outbox-relay." + config_.slot
                                                     : config_.producer.transactional_id;
  }

  // A newer producer of the transactional.id (a relay that took the slot over) fenced this one.
  // Or the transaction coordinator did: it aborts a transaction open longer than
  // transaction.timeout.ms (a broker away that long) and bumps the producer's epoch, which
  // fences the producer too. Only a relay holding the slot initialises the transactional.id,
  // and the slot is this relay's while its replication connection lives: then the coordinator
  // ended the transaction, and the relay resumes at the last commit with new producers, as
  // after any abort. A connection the server closed (the slot taken over) stops the relay.
  void fail_fenced(const std::string& error) {
    if (!stopping_ && !fatal_ && conn_ && conn_->alive()) {
      log_->warn(
          "event=kafka_transaction_expired slot={} error={}: fenced while the slot is still this "
          "relay's: the coordinator ended the open transaction (open longer than "
          "transaction.timeout.ms, e.g. a broker away that long); resuming at the last commit",
          config_.slot, quoted(error));
      pipeline_.abort_kafka_transaction("the transaction coordinator ended it: " + error);
      after_delivery();
      return;
    }
    transactions_.mark_fenced();
    fail({kExitError, "fenced: another producer initialised transactional.id " +
                          transactional_id() + " or " + transactional_id() + kSpareSuffix +
                          " (a relay that took over this slot); this one stops without "
                          "committing: " +
                          error});
  }

  // The checkpoint's key: the database system and the slot (a slot name is only unique there).
  std::string checkpoint_key() const override {
    return system_id_.value_or("?") + "/" + config_.slot;
  }

  // Decoding on a hot standby (PostgreSQL 16+): refused before 16, warned without
  // hot_standby_feedback (the primary may vacuum catalog rows the slot needs: invalidated).
  void check_standby(const pg::ServerState& server) {
    on_standby_ = server.in_recovery;
    if (!on_standby_) return;
    if (server.version_num < 160000) {
      throw FatalError({kExitError,
                        "the server of --pg is a standby, and logical decoding on a standby needs "
                        "PostgreSQL 16 or later: point --pg at the primary"});
    }
    if (server.hot_standby_feedback != "on" && !feedback_warned_) {
      feedback_warned_ = true;
      log_->warn(
          "event=standby_without_feedback slot={}: decoding on a standby with "
          "hot_standby_feedback = {}; the primary may remove catalog rows the slot needs and the "
          "slot is then invalidated (exit code 4). Set hot_standby_feedback = on on the standby "
          "(and primary_slot_name)",
          config_.slot, server.hot_standby_feedback);
    }
  }

  // KafkaTransactions::Host.
  bool decoding_on_standby() const override { return on_standby_; }
  bool stopping() const override { return stopping_; }
  std::uint32_t timeline() const override { return timeline_.value_or(0); }
  std::optional<Lsn> switch_point(std::uint32_t old_timeline) const override {
    const auto it = history_.find(old_timeline);
    return it == history_.end() ? std::nullopt : std::optional<Lsn>(it->second);
  }
  // Kafka holds events of transactions the promoted server does not have: the old timeline's
  // between where the new one left it and what was acknowledged (or checkpointed). Said loudly,
  // never silently: consumers may have acted on them.
  void ghosts(Lsn from, Lsn to, std::uint32_t old_timeline) override {
    ++metrics_.timeline_ghosts;
    log_->error(
        "event=ghosts_published slot={} timeline={} from={} to={}: Kafka holds events of "
        "timeline {} committed after the point where the promoted server's timeline left it; "
        "those transactions do not exist on the promoted server (a failover without "
        "synchronized_standby_slots on the primary: docs/failover.md). The relay resumes at {}. "
        "Find the events with outbox-relay reconcile and compensate",
        config_.slot, old_timeline, from.to_string(), to.to_string(), old_timeline,
        from.to_string());
  }
  Clock::time_point stop_deadline() const override { return stop_deadline_; }
  bool failed() const override { return fatal_.has_value(); }
  void waiting_for_kafka(const std::string& reason) override {
    set_state(State::kConnecting, reason);
  }
  void fenced(const std::string& error) override { fail_fenced(error); }
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
  awaitable<void> ensure_publication_and_slot() {
    const auto& m = config_.mapper;
    auto refused = [&](pg::BootstrapRefusal r, const std::optional<pg::SlotState>& slot) -> Fatal {
      switch (r) {
        case pg::BootstrapRefusal::kPublicationMissing:
          if (on_standby_ && config_.create) {
            return {kExitError, "publication " + config_.publication +
                                    " does not exist, and the server of --pg is a standby "
                                    "(read-only): create it on the primary (outbox-relay setup "
                                    "--pg PRIMARY ...); it reaches the standby by replication"};
          }
          return {kExitError, "publication " + config_.publication +
                                  " does not exist and --no-create was given"};
        case pg::BootstrapRefusal::kSlotMissing:
          return {kExitError, "replication slot " + config_.slot + " " + pg::slot_missing_words() +
                                  " and --no-create was given"};
        case pg::BootstrapRefusal::kSlotVanished:
          return {kExitSlotLost,
                  "replication slot " + config_.slot +
                      " disappeared while the relay was using it; events committed after its last "
                      "confirmed position " +
                      confirm_lsn().to_string() +
                      " may never reach Kafka. Reconcile the outbox rows committed since then "
                      "(outbox-relay reconcile --repair), then start the relay once with "
                      "--accept-slot-loss, which creates the slot anew."};
        case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
          return {kExitError, "replication slot " + config_.slot +
                                  " was created by another connection while the relay created "
                                  "it, and dropped again"};
        case pg::BootstrapRefusal::kSlotNotPgoutput:
          return {kExitError,
                  "replication slot " + config_.slot + " " +
                      pg::slot_not_pgoutput_words(slot ? slot->slot_type : "?",
                                                  slot ? slot->plugin.value_or("") : "?")};
        case pg::BootstrapRefusal::kSlotLost:
          return {
              kExitSlotLost,
              "replication slot " + config_.slot + " " + pg::slot_lost_words() + ": " +
                  pg::slot_lost_consequence() + " (confirmed_flush_lsn " +
                  (slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string()
                                                     : "?") +
                  "; max_slot_wal_keep_size). Drop the slot, reconcile the outbox rows committed "
                  "after that position (outbox-relay reconcile --repair), then start the relay "
                  "once with --accept-slot-loss to create a new one."};
      }
      return {kExitError, "replication slot " + config_.slot + " cannot be used"};
    };
    pg::BootstrapOptions options{publication_target(config_), config_.slot, config_.create,
                                 had_slot_};
    const std::array<pg::BootstrapPart, 2> parts{pg::BootstrapPart::kPublication,
                                                 pg::BootstrapPart::kSlot};
    for (const pg::BootstrapPart part : parts) {
      options.part = part;
      // A standby is read-only: only the slot may be made there.
      options.create = config_.create && !(on_standby_ && part == pg::BootstrapPart::kPublication);
      // A slot about to be created: first whether a slot of this name delivered before and is
      // gone (check_progress_record()). Once per process: a slot the relay had and lost while
      // running is kSlotVanished (exit 4) below.
      const bool look_first =
          part == pg::BootstrapPart::kSlot && options.create && !had_slot_ && kafka_ != nullptr;
      if (look_first) options.create = false;
      pg::BootstrapResult r =
          co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
      if (look_first && r.refusal == pg::BootstrapRefusal::kSlotMissing) {
        co_await check_progress_record();
        options.create = true;
        r = co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
      }
      if (r.created_publication) {
        log_->info(
            "event=created_publication publication={} table={}", config_.publication,
            quoted(m.table.empty() ? "none" : common::QualifiedName{m.schema, m.table}.text()));
      }
      if (r.created_slot) log_->info("event=created_slot slot={}", config_.slot);
      if (r.refusal) throw FatalError(refused(*r.refusal, r.slot));
    }
  }

  // The slot is missing and about to be created. The progress record of this system and slot
  // (progress_record.hpp) says whether a slot of that name delivered before: dropped or
  // invalidated while the relay was down (max_slot_wal_keep_size, idle_replication_slot_timeout,
  // a failover to a server without it, a restore, an operator), it takes with it the events
  // committed after its last confirmed position, which a new slot starts past. That is said,
  // with the positions, and the relay stops (exit 4) unless --accept-slot-loss. No record: a
  // first start. Kafka unreachable: retried with backoff (nothing is created meanwhile).
  awaitable<void> check_progress_record() {
    if (!progress_worker_) progress_worker_ = std::make_unique<asio::thread_pool>(1);
    // Named, then moved: GCC 12 destroys temporaries of a coroutine call in a co_await twice.
    kafka::ConsumerConfig consumer{config_.producer.brokers, config_.producer.properties};
    std::string topic = config_.checkpoint_topic;
    std::string key = checkpoint_key();
    const ProgressRead read =
        co_await read_progress(*progress_worker_, std::move(consumer), std::move(topic),
                               std::move(key), config_.connect_timeout);
    if (read.refused) {
      kafka_refused_ = true;
      throw FatalError({kExitError, read.error + "; " + producers_->refusal_advice() + "; slot " +
                                        config_.slot + " was not created"});
    }
    if (!read.error.empty()) {
      throw KafkaUnavailable("reading the progress record of slot " + config_.slot + " in topic " +
                             config_.checkpoint_topic + " before creating the slot: " + read.error);
    }
    if (!read.last && read.bad.empty()) co_return;
    const std::string last = read.last ? read.last->to_string() : "'" + read.bad + "'";
    if (config_.accept_slot_loss) {
      ++metrics_.slot_losses_accepted;
      log_->error(
          "event=slot_loss_accepted slot={} delivered_through={} topic={} key={}: the slot was "
          "dropped or invalidated after the relay delivered through {}; --accept-slot-loss "
          "creates it anew, and events committed after {} and before the new slot may be missing "
          "(outbox-relay reconcile finds and repairs them)",
          config_.slot, last, config_.checkpoint_topic, quoted(checkpoint_key()), last, last);
      co_return;
    }
    throw FatalError(
        {kExitSlotLost,
         "replication slot " + config_.slot + " does not exist, but its progress record (topic " +
             config_.checkpoint_topic + ", key " + checkpoint_key() +
             ") shows that the relay delivered through " + last +
             " from a slot of that name: it was dropped or invalidated while the relay was down, "
             "and a new slot would start past the events committed since then. Nothing was "
             "created. Find and repair those events (outbox-relay reconcile --since the time of "
             "that position --repair), then start the relay once with --accept-slot-loss"});
  }

  // At-least-once with Kafka: the checkpoint topic, compacted, made once per process (exactly-
  // once makes it in KafkaTransactions::prepare()). Kafka away: progress records wait for the
  // next session.
  awaitable<void> ensure_progress_topic() {
    if (exactly_once() || kafka_ == nullptr || progress_topic_ready_) co_return;
    const std::string error = co_await kafka_->progress().create_compacted_topic(
        config_.checkpoint_topic, std::chrono::seconds(10));
    if (error.empty()) {
      progress_topic_ready_ = true;
    } else {
      log_->warn("event=progress_record_failed slot={} topic={} error={}: retried next session",
                 config_.slot, config_.checkpoint_topic, quoted(error));
    }
  }

  // At-least-once: the progress record follows the confirmed position, at most every
  // kProgressInterval (exactly-once writes one in every Kafka transaction).
  void write_progress(Lsn confirmed) {
    if (!progress_topic_ready_ || confirmed <= progress_written_ ||
        Clock::now() - progress_at_ < kProgressInterval) {
      return;
    }
    const std::string key = checkpoint_key();
    const std::string value = progress_value(confirmed, on_standby_ ? std::nullopt : timeline_);
    const kafka::ProduceResult r = kafka_->progress().produce(
        kafka::Record{config_.checkpoint_topic, key, value, {}, 0}, kCheckpointOpaque);
    if (r.status != kafka::ProduceStatus::kQueued) return;  // the next confirmation tries again
    progress_written_ = confirmed;
    progress_at_ = Clock::now();
  }

  void on_progress_delivery(const sink::Delivery& d) {
    if (d.ok || d.error == progress_error_) return;
    progress_error_ = d.error;  // said once per distinct error
    log_->warn("event=progress_record_failed slot={} topic={} error={}", config_.slot,
               config_.checkpoint_topic, quoted(d.error));
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
          transactions_.commit_due(transactions_.interval_passed() || pipeline_.paused())) {
        co_await transactions_.commit();
        continue;
      }
      if (pipeline_.backpressured()) {
        // Stop reading the socket until acknowledgements free room; status updates go on.
        set_state(State::kBackpressured, "in-flight bound reached");
        auto t0 = Clock::now();
        co_await wait_for_change(t0 + config_.status_interval);
        metrics_.backpressure_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        if (!pipeline_.backpressured() && !stopping_) set_state(State::kStreaming, "");
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
        if (exactly_once() && transactions_.commit_due(true)) {
          co_await transactions_.commit();
          continue;
        }
        try {
          // Reset on every way out: left true after a lost connection (pg::Error), it made the
          // next check due cancel the next session's connect (event=unowned_cancel; before,
          // "I/O error: Operation canceled", exit 1, after a PostgreSQL crash).
          struct ReadingWait {
            bool& flag;
            explicit ReadingWait(bool& f) : flag(f) { flag = true; }
            ~ReadingWait() { flag = false; }
          } reading(reading_wait_);
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
    if (pipeline_.fatal() && !fatal_) fail(*pipeline_.fatal());
    if (pipeline_.rewinding() && !rewind_signalled_) {
      rewind_signalled_ = true;  // once: the stop sequence's own waits must not be cut short
      // A sink that goes on (a delivery timed out; not a refused batch, which stops it) would
      // send the records queued behind the failed one when the broker answers again, ahead of
      // it. Exactly-once aborts the Kafka transaction instead: nothing of it becomes visible.
      if (!exactly_once() && !producers_->stopped()) producers_->halt();
      wake_all();
    }
    if (waiting_ && (transactions_.committing() || !pipeline_.paused() || leaving() ||
                     pipeline_.below_low_watermark())) {
      wake_.cancel();
    }
  }

  // Pipeline::Sink over the two producers.
  kafka::ProduceResult produce(const kafka::Record& record, std::uint64_t opaque,
                               Pipeline::Route route) override {
    if (exactly_once()) transactions_.before_record();
    if (producers_->queued() == 0) last_report_ = Clock::now();  // the deadline starts now
    // Exactly-once: every record goes in the transaction (nothing else is in flight anyway).
    return producers_->produce(record, opaque, route == Pipeline::Route::kAlone);
  }
  bool stopped() const override { return producers_->stopped(); }

  // Every delivery report, of any producer: a checkpoint record's is the commit's; the
  // others are the Pipeline's.
  void on_delivery(const sink::Delivery& d) {
    last_report_ = Clock::now();
    if (d.opaque == kCheckpointOpaque) {
      if (!exactly_once()) {
        on_progress_delivery(d);
        return;
      }
      transactions_.on_checkpoint_delivery(d);
    } else {
      pipeline_.on_delivery(d);
    }
    after_delivery();
  }

  // A fatal producer error (a refused batch under the gapless guarantee, an idempotent sequence
  // lost after a broker restart): what was not acknowledged is sent again from the confirmed
  // position by a new producer; nothing is lost, nothing passes an earlier record.
  void on_producer_fatal(const std::string& message) {
    if (exactly_once() && kafka_ != nullptr && kafka_->fenced()) {
      fail_fenced(message);
      return;
    }
    if (stopping_) {
      fail({kExitError, std::string(kafka_ != nullptr ? "Kafka producer" : "NATS publisher") +
                            " fatal error while stopping: " + message});
      return;
    }
    if (exactly_once()) {
      pipeline_.abort_kafka_transaction("Kafka producer fatal error: " + message);
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
    if (fatal_) return;
    kafka_refused_ = true;
    fail({kExitError, (kafka_ != nullptr ? "Kafka broker " : "") + what + "; " +
                          producers_->refusal_advice() + "; slot " + config_.slot +
                          " is not confirmed past " + confirm_lsn().to_string()});
  }

  void rewind() {
    producers_->renew();  // reports still due are dropped: those records are sent again
    transactions_.producers_renewed();
    pipeline_.rewound();
    rewind_signalled_ = false;
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
    if (!exactly_once() && kafka_ != nullptr) write_progress(p.flush);
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
    const bool poison = fatal_ && fatal_->code == kExitPoisonEvent;
    if (!(stopping_ && !fatal_) && !poison) co_return;
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
    const auto deadline = stopping_ ? stop_deadline_ : Clock::now() + config_.shutdown_timeout;
    // Nothing more can be acknowledged when the broker refuses the relay's credentials.
    while (!kafka_refused_ && producers_->queued() > 0 && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
    if (exactly_once() && transactions_.phase() == TxnPhase::kOpen) {
      // Whole PostgreSQL transactions commit; a part of one is aborted and sent again next time.
      if (!fatal_ && !pipeline_.rewinding() && transactions_.commit_due(true)) {
        co_await transactions_.commit();
      } else if (transactions_.records() > 0 || pipeline_.in_transaction()) {
        co_await transactions_.abort();
      }
    }
    co_await final_check();
    send_status_now();
    status_.stop();
    log_->info("event=final_confirm slot={} lsn={} unacknowledged={}", config_.slot,
               confirm_lsn().to_string(), pipeline_.tracker().inflight_events());
    try {
      co_await conn_->end_copy(std::chrono::seconds(5));
    } catch (const std::exception& e) {
      log_->warn("event=end_copy_failed slot={} error={}", config_.slot, quoted(e.what()));
    }
  }

  asio::io_context& io_;
  RelayConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  KafkaProducers* kafka_ = nullptr;        // the sink when it is Kafka (set by make_sink())
  std::unique_ptr<RecordSink> producers_;  // Kafka's producers or NATS's publisher
  std::unique_ptr<pg::ReplicationConnection> conn_;
  asio::steady_timer wake_;
  asio::steady_timer pace_timer_;  // the read pause of stream()
  StatusReporter status_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer delivery_watch_;  // watch_deliveries()
  Clock::time_point last_report_;      // the last delivery report, or the first record since
  std::mt19937_64 rng_;
  bool reading_wait_ = false;  // stream() waits on the replication socket
  bool waiting_ = false;
  bool stopping_ = false;
  bool had_slot_ = false;
  std::optional<Fatal> fatal_;
  std::optional<std::string> system_id_;
  std::optional<std::uint32_t> timeline_;  // of the last session
  std::string server_start_;               // its server's pg_postmaster_start_time()
  bool on_standby_ = false;                // its server is a hot standby
  bool feedback_warned_ = false;
  pg::TimelineHistory history_;           // of timeline_ (empty on timeline 1)
  Clock::time_point stop_read_deadline_;  // see finishing_transaction()
  Clock::time_point stop_deadline_;       // a stop's end (--shutdown-timeout after it began)
  bool rewind_signalled_ = false;
  bool kafka_refused_ = false;  // a broker refused the credentials or certificate: exiting
  // The progress record (progress_record.hpp): read on its own thread before a slot is created;
  // at-least-once writes it (write_progress()).
  std::unique_ptr<asio::thread_pool> progress_worker_;
  bool progress_topic_ready_ = false;
  Lsn progress_written_;
  Clock::time_point progress_at_;
  std::string progress_error_;
  Lsn last_rewind_at_;  // confirmed position at the last rewind  // wake_all() ran for the rewind
                        // under way
  Metrics metrics_;
  Pipeline pipeline_;           // it refers to config_, metrics_ and the producers (as its Sink)
  PublicationChecker checker_;  // it refers to the pipeline
  KafkaTransactions transactions_;  // last: it refers to the pipeline and the producers
};

Relay::Relay(asio::io_context& io, RelayConfig config)
    : impl_(std::make_unique<Impl>(io, std::move(config))) {}
Relay::~Relay() = default;
awaitable<int> Relay::run() { return impl_->run(); }
void Relay::request_stop() { impl_->request_stop(); }
const Metrics& Relay::metrics() { return impl_->metrics(); }
const RelayConfig& Relay::config() const { return impl_->config(); }

}  // namespace outbox::relay
