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
#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/kafka/consumer.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/read_pacer.hpp"
#include "outbox/relay/txn_machine.hpp"
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

// Exactly-once: the opaque of a checkpoint record (the Pipeline never sees its report; its
// transaction sequence numbers stay far below), and how long a transaction call may block.
constexpr std::uint64_t kCheckpointOpaque = 1ULL << 61;
constexpr std::chrono::seconds kTxnTimeout{30};
constexpr const char* kSpareSuffix = KafkaProducers::kSpareSuffix;

// Kafka cannot be used for now (exactly-once set-up): the session ends and is retried.
struct KafkaUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Frames handled between two turns of the io_context.
constexpr std::size_t kYieldFrames = 256;

}  // namespace

class Relay::Impl : private Pipeline::Sink {
 public:
  Impl(asio::io_context& io, RelayConfig config)
      : io_(io),
        config_(std::move(config)),
        log_(make_logger()),
        // Made here so that a bad -X property fails before anything runs.
        producers_(io.get_executor(), config_, transactional_id(),
                   {[this](const kafka::Delivery& d) { on_delivery(d); },
                    [this](const std::string& m) { on_producer_fatal(m); },
                    [this](const std::string& m) { on_kafka_refused(m); }}),
        wake_(io),
        pace_timer_(io),
        status_timer_(io),
        confirm_timer_(io),
        backoff_timer_(io),
        rng_(std::random_device{}()),
        pipeline_(config_, *this, metrics_, log_),
        checker_(io.get_executor(), config_, pipeline_, metrics_, log_,
                 {[this] { return conn_ && !leaving(); }, [this] { return leaving(); },
                  [this] { wake_stream(); }, [this] { confirm_soon(); }}) {}

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
        if (!stopping_ && !fatal_) fail({kExitError, std::string("I/O error: ") + e.what()});
      } catch (const std::exception& e) {
        fail({kExitError, std::string("unexpected error: ") + e.what()});
      }
      status_timer_.cancel();
      confirm_timer_.cancel();
      checker_.cancel_timer();
      if (exactly_once() && txn_.phase() == TxnPhase::kOpen && !stopping_ && !fatal_ &&
          !pipeline_.rewinding()) {
        co_await end_transaction_at_disconnect();
      }
      co_await checker_.await_background(true);
      pipeline_.on_disconnect();
      conn_.reset();
      checker_.disconnect();
      if (stopping_ || fatal_) break;
      bool rewind_without_progress = false;
      if (pipeline_.rewinding()) {
        rewind();
        reason = "rewinding after the Kafka producer stopped";
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
    status_timer_.cancel();
    if (pipeline_.tracker().inflight_events() > 0) {
      log_->warn(
          "event=stopped_with_unacknowledged slot={} events={} confirmed={}: they will be sent "
          "again on the next start",
          config_.slot, pipeline_.tracker().inflight_events(), confirm_lsn().to_string());
    }
    producers_.reset();
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
  std::chrono::milliseconds backoff(int attempt) {
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
  bool leaving() const { return stopping_ || fatal_ || pipeline_.rewinding(); }

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
  }

  // A publication check is due or ended: the stream loop looks (a read wait is cut short only
  // for a check due or failed; see stream()).
  void wake_stream() {
    if (reading_wait_ && conn_ && (checker_.due() || checker_.failed())) conn_->cancel();
    if (waiting_) wake_.cancel();
  }

  // Waits until notified (a delivery, a stop) or `until`.
  awaitable<void> wait_for_change(Clock::time_point until) {
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
    pg::SystemInfo sys = co_await conn_->identify_system(config_.connect_timeout);
    if (system_id_ && *system_id_ != sys.system_id) {
      throw FatalError({kExitSlotLost, "connected to a different PostgreSQL system (id " +
                                           sys.system_id + ", was " + *system_id_ +
                                           "): the slot's history does not carry over"});
    }
    system_id_ = sys.system_id;
    // What Kafka acknowledged is in this server's WAL, unchanged, only on the same timeline.
    const bool history_continues = !timeline_ || *timeline_ == sys.timeline;
    if (!history_continues) {
      log_->warn(
          "event=timeline_changed slot={} timeline={} was={}: events Kafka acknowledged after "
          "the slot's position may be sent again",
          config_.slot, sys.timeline, *timeline_);
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
    arm_status_timer();
    // Exactly-once: only the slot's holder initialises the transactional.id (fencing any older
    // producer of it) and reads the checkpoint; what the server sends before it is skipped.
    if (exactly_once()) co_await prepare_transactions();
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
  void fail_fenced(const std::string& error) {
    if (txn_.phase() != TxnPhase::kFenced && TxnMachine::allowed(txn_.phase(), TxnPhase::kFenced)) {
      txn_.to(TxnPhase::kFenced);
    }
    fail({kExitError, "fenced: another producer initialised transactional.id " +
                          transactional_id() + " or " + transactional_id() + kSpareSuffix +
                          " (a relay that took over this slot); this one stops without "
                          "committing: " +
                          error});
  }

  // The checkpoint's key: the database system and the slot (a slot name is only unique there).
  std::string checkpoint_key() const { return system_id_.value_or("?") + "/" + config_.slot; }

  // Before streaming: both producers' transactions initialised (which fences an older producer
  // of the same transactional.id and ends its open transaction), then, once per process, the
  // last committed checkpoint read with read_committed: the stream starts after it. Every Kafka
  // wait runs on a worker thread: the replication connection goes on answering the server
  // (status updates), and a broker that is away is waited out here, on the same connection,
  // with backoff, instead of by reconnecting (which made the server decode again). Throws
  // FatalError.
  awaitable<void> prepare_transactions() {
    int attempt = 0;
    while (!leaving()) {
      const std::string error = co_await try_prepare_transactions();
      if (error.empty()) co_return;
      const auto delay = backoff(attempt++);
      set_state(State::kConnecting, "waiting for Kafka: " + error);
      log_->warn("event=kafka_unavailable slot={} attempt={} in_ms={} reason={}", config_.slot,
                 attempt, delay.count(), quoted(error));
      const auto until = Clock::now() + delay;
      while (!leaving() && Clock::now() < until) co_await wait_for_change(until);
    }
  }

  // One try of prepare_transactions(): empty when ready, else why not (retried).
  awaitable<std::string> try_prepare_transactions() {
    if (txn_.phase() == TxnPhase::kUninitialised) txn_.to(TxnPhase::kInitialising);
    if (txn_.phase() == TxnPhase::kInitialising) {
      // In order, each once (librdkafka refuses a second init_transactions): a retry after the
      // first succeeded goes on with the second. No swap happens before both are ready.
      while (txn_.initialised() < 2) {
        const bool first = txn_.initialised() == 0;
        kafka::Producer& p = first ? producers_.current() : producers_.spare();
        const std::string id = transactional_id() + (first ? "" : kSpareSuffix);
        const kafka::TxnResult r = co_await p.init_transactions(kTxnTimeout);
        if (r.outcome == kafka::TxnOutcome::kFenced) {
          fail_fenced(r.error);
          co_return std::string();
        }
        if (!r.ok()) {
          txn_.to(TxnPhase::kUninitialised);
          co_return "initialising Kafka transactions of transactional.id " + id + ": " + r.error;
        }
        txn_.producer_initialised();
      }
      txn_.to(TxnPhase::kCheckpoint);
      log_->info("event=transactions_ready slot={} transactional_id={} spare={}{}", config_.slot,
                 transactional_id(), transactional_id(), kSpareSuffix);
    }
    if (txn_.phase() == TxnPhase::kCheckpoint) {
      if (!txn_.checkpoint_read()) {
        const std::string error = co_await producers_.current().create_compacted_topic(
            config_.checkpoint_topic, kTxnTimeout);
        if (!error.empty()) co_return error;
        const CheckpointRead read = co_await read_checkpoint();
        if (!read.error.empty()) co_return read.error;
        if (!read.bad.empty()) {
          throw FatalError({kExitError, "checkpoint of " + checkpoint_key() + " in topic " +
                                            config_.checkpoint_topic + " is not a WAL position: '" +
                                            read.bad + "'"});
        }
        if (read.last) pipeline_.start_from_checkpoint(*read.last);
        txn_.set_checkpoint_read();
        log_->info("event=checkpoint_read slot={} topic={} key={} lsn={}", config_.slot,
                   config_.checkpoint_topic, quoted(checkpoint_key()),
                   read.last ? read.last->to_string() : "none");
      }
      txn_.to(TxnPhase::kReady);
    }
    if (txn_.phase() == TxnPhase::kReady) begin_kafka_transaction();
    co_return std::string();
  }

  struct CheckpointRead {
    std::optional<Lsn> last;  // the last checkpoint of this relay's key
    std::string bad;          // a value under the key that is not a WAL position
    std::string error;        // the topic could not be read (retried)
  };

  // Reads the checkpoint topic to its end (read_committed) on the Kafka worker thread.
  awaitable<CheckpointRead> read_checkpoint() {
    if (!kafka_worker_) kafka_worker_ = std::make_unique<asio::thread_pool>(1);
    // Built as a local: GCC 12 destroys init-captures twice in a `co_return co_await` expression.
    auto task = [consumer_config =
                     kafka::ConsumerConfig{config_.producer.brokers, config_.producer.properties},
                 topic = config_.checkpoint_topic,
                 key = checkpoint_key()]() -> awaitable<CheckpointRead> {
      CheckpointRead out;
      try {
        kafka::Consumer consumer(consumer_config);
        const kafka::TopicPlan plan = consumer.plan(topic, std::nullopt, kTxnTimeout);
        consumer.read(
            plan.partitions,
            [&](const kafka::ConsumedRecord& r) {
              if (!r.key || *r.key != key || !r.value) return;
              out.last = Lsn::parse(*r.value);
              out.bad = out.last ? std::string() : std::string(*r.value);
            },
            kTxnTimeout);
      } catch (const std::runtime_error& e) {
        out.error = "reading checkpoint topic " + topic + ": " + e.what();
      }
      co_return out;
    };
    CheckpointRead read =
        co_await asio::co_spawn(kafka_worker_->get_executor(), std::move(task), use_awaitable);
    co_return read;
  }

  void begin_kafka_transaction() {
    const kafka::TxnResult r = producers_.current().begin_transaction();
    if (!r.ok()) throw KafkaUnavailable("beginning a Kafka transaction: " + r.error);
    txn_.to(TxnPhase::kOpen);
    txn_records_ = 0;
    txn_started_ = Clock::now();
    checkpoint_error_.reset();
  }

  // The checkpoint record, key and value.
  kafka::Record checkpoint_record(const std::string& key, const std::string& value) const {
    return kafka::Record{config_.checkpoint_topic, key, value, {}, 0};
  }

  // A Kafka transaction may end here: one is open, no PostgreSQL transaction is (a Kafka
  // transaction carries whole ones), something past the last commit was handled, and `now`.
  bool commit_due(bool now) const {
    return now && txn_.phase() == TxnPhase::kOpen && !pipeline_.in_transaction() &&
           pipeline_.produced_through() > pipeline_.kafka_committed();
  }

  // Ends the open Kafka transaction: the checkpoint record (end of the last PostgreSQL
  // transaction in it) goes in, every report is awaited, then the commit; the slot may then be
  // confirmed through the checkpoint. A failure aborts and rewinds to the last commit.
  awaitable<void> commit_kafka_transaction() {
    const Lsn through = std::max(pipeline_.produced_through(), pipeline_.kafka_committed());
    const std::string key = checkpoint_key();
    const std::string value = through.to_string();
    const kafka::Record rec = checkpoint_record(key, value);
    txn_.to(TxnPhase::kCommitting);
    for (;;) {
      const kafka::ProduceResult pr = producers_.current().produce(rec, kCheckpointOpaque);
      if (pr.status == kafka::ProduceStatus::kQueued) break;
      if (pr.status == kafka::ProduceStatus::kFailed) {
        checkpoint_error_ = pr.error;
        break;
      }
      co_await wait_for_change(Clock::now() + std::chrono::milliseconds(100));
      if (leaving()) break;
    }
    while (!checkpoint_error_ && producers_.current().queued() > 0 && !leaving()) {
      co_await wait_for_change(Clock::now() + std::chrono::milliseconds(100));
    }
    if (fatal_) co_return;
    kafka::TxnResult r;
    if (checkpoint_error_) {
      r = {kafka::TxnOutcome::kAbortable, "checkpoint record: " + *checkpoint_error_};
    } else if (pipeline_.rewinding()) {
      r = {kafka::TxnOutcome::kAbortable, "a record of the transaction failed"};
    } else {
      // On the producer's worker thread: the replication connection is served meanwhile. A
      // broker away (a timeout, retriable) is waited out with the same commit, called again,
      // for as long as it takes; a stop gives up at its deadline (the transaction is then
      // aborted by the coordinator and sent again on the next start: nothing is lost).
      const auto t0 = Clock::now();
      for (int attempt = 1;; ++attempt) {
        r = co_await producers_.current().commit_transaction(kTxnTimeout);
        if (r.outcome != kafka::TxnOutcome::kRetriable || fatal_ ||
            (stopping_ && Clock::now() >= stop_deadline_)) {
          break;
        }
        log_->warn("event=kafka_commit_retry slot={} attempt={} error={}", config_.slot, attempt,
                   quoted(r.error));
      }
      metrics_.kafka_commit_seconds.observe(
          std::chrono::duration<double>(Clock::now() - t0).count());
      if (fatal_ && txn_.phase() == TxnPhase::kFenced) co_return;
    }
    switch (r.outcome) {
      case kafka::TxnOutcome::kOk:
        txn_.to(TxnPhase::kReady);
        ++metrics_.kafka_transactions_committed;
        pipeline_.kafka_committed(through);
        confirm_soon();
        producers_.take_turns();
        begin_kafka_transaction();
        co_return;
      case kafka::TxnOutcome::kFenced:
        fail_fenced(r.error);
        co_return;
      case kafka::TxnOutcome::kAbortable:
      case kafka::TxnOutcome::kRetriable:
      case kafka::TxnOutcome::kFatal:
        ++metrics_.kafka_transactions_aborted;
        pipeline_.abort_kafka_transaction("Kafka transaction not committed: " + r.error);
        if (r.outcome != kafka::TxnOutcome::kFatal) {
          co_await abort_kafka_transaction();
        } else {
          txn_.to(TxnPhase::kAborting);
          txn_.to(TxnPhase::kReady);
        }
        after_delivery();
        co_return;
    }
  }

  // The session ended with a Kafka transaction open: it commits when it holds whole PostgreSQL
  // transactions, else it is aborted and the relay rewinds to the last commit. Either way a
  // relay fenced meanwhile (a successor holds the slot) learns it here and stops.
  // Between two PostgreSQL transactions it commits even with nothing new in it (then its one
  // record repeats the last checkpoint): the commit is also the probe by which a relay frozen
  // and taken over learns it was fenced, and a transaction just begun has not met the
  // coordinator yet.
  awaitable<void> end_transaction_at_disconnect() {
    if (!pipeline_.in_transaction()) {
      co_await commit_kafka_transaction();
      co_return;
    }
    ++metrics_.kafka_transactions_aborted;
    pipeline_.abort_kafka_transaction(
        "the connection ended inside a PostgreSQL transaction: its Kafka transaction is aborted");
    co_await abort_kafka_transaction();
  }

  // Aborts the open Kafka transaction (on the producer's worker thread); a producer fenced
  // meanwhile stops the relay. A rewind to the last commit follows (new producers).
  awaitable<void> abort_kafka_transaction() {
    txn_.to(TxnPhase::kAborting);
    if (stopping_ && Clock::now() >= stop_deadline_) {
      // Out of time to stop: the next start's init_transactions aborts it on the coordinator.
      txn_.to(TxnPhase::kReady);
      co_return;
    }
    const kafka::TxnResult r = co_await producers_.current().abort_transaction(kTxnTimeout);
    if (r.outcome == kafka::TxnOutcome::kFenced) {
      fail_fenced(r.error);
      co_return;
    }
    if (!r.ok()) {
      // New producers initialise the transactional.id again, which aborts it on the coordinator.
      log_->warn("event=kafka_abort_failed slot={} error={}", config_.slot, quoted(r.error));
    }
    txn_.to(TxnPhase::kReady);
  }

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
          return {kExitError, "publication " + config_.publication +
                                  " does not exist and --no-create was given"};
        case pg::BootstrapRefusal::kSlotMissing:
          return {kExitError,
                  "replication slot " + config_.slot + " does not exist and --no-create was given"};
        case pg::BootstrapRefusal::kSlotVanished:
          return {kExitSlotLost,
                  "replication slot " + config_.slot +
                      " disappeared while the relay was using it; events committed after its last "
                      "confirmed position " +
                      confirm_lsn().to_string() +
                      " may never reach Kafka. Recreate the slot (outbox-relay recreates it when "
                      "started anew) and reconcile the outbox rows committed since then."};
        case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
          return {kExitError, "replication slot " + config_.slot +
                                  " was created by another connection while the relay created "
                                  "it, and dropped again"};
        case pg::BootstrapRefusal::kSlotNotPgoutput:
          return {kExitError, "replication slot " + config_.slot + " uses plugin " +
                                  (slot ? slot->plugin.value_or("?") : "?") + ", not pgoutput"};
        case pg::BootstrapRefusal::kSlotLost:
          return {kExitSlotLost,
                  "replication slot " + config_.slot +
                      " was invalidated (wal_status lost, confirmed " +
                      (slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string()
                                                         : "?") +
                      "): the WAL it needed was removed (max_slot_wal_keep_size), so outbox rows "
                      "committed since then were never relayed. Drop the slot, start the relay to "
                      "create a new one, and reconcile the outbox rows committed after that "
                      "position."};
      }
      return {kExitError, "replication slot " + config_.slot + " cannot be used"};
    };
    pg::BootstrapOptions options{publication_target(), config_.slot, config_.create, had_slot_};
    const std::array<pg::BootstrapPart, 2> parts{pg::BootstrapPart::kPublication,
                                                 pg::BootstrapPart::kSlot};
    for (const pg::BootstrapPart part : parts) {
      options.part = part;
      const pg::BootstrapResult r =
          co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
      if (r.created_publication) {
        log_->info("event=created_publication publication={} table={}", config_.publication,
                   quoted(m.table.empty() ? "none" : m.schema + "." + m.table));
      }
      if (r.created_slot) log_->info("event=created_slot slot={}", config_.slot);
      if (r.refusal) throw FatalError(refused(*r.refusal, r.slot));
    }
  }

  pg::PublicationTarget publication_target() const {
    return {config_.publication, config_.mapper.schema, config_.mapper.table,
            config_.mapper.more_tables, !config_.mapper.message_prefix.empty()};
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
          commit_due(Clock::now() - txn_started_ >= config_.transaction_interval ||
                     pipeline_.paused())) {
        co_await commit_kafka_transaction();
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
        if (exactly_once() && commit_due(true)) {
          co_await commit_kafka_transaction();
          continue;
        }
        try {
          reading_wait_ = true;
          co_await conn_->wait_readable();
          reading_wait_ = false;
        } catch (const boost::system::system_error& e) {
          reading_wait_ = false;
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
        (k.idle_advanced && Clock::now() - last_status_sent_ >= std::chrono::seconds(1))) {
      send_status();
    }
  }

  // After each delivery report: a failure may end the relay or the session; a waiting reader
  // may go on.
  void after_delivery() {
    confirm_soon();
    if (pipeline_.fatal() && !fatal_) fail(*pipeline_.fatal());
    if (pipeline_.rewinding() && !rewind_signalled_) {
      rewind_signalled_ = true;  // once: the stop sequence's own waits must not be cut short
      wake_all();
    }
    if (waiting_ && (txn_.committing() || !pipeline_.paused() || leaving() ||
                     pipeline_.below_low_watermark())) {
      wake_.cancel();
    }
  }

  // Pipeline::Sink over the two producers.
  kafka::ProduceResult produce(const kafka::Record& record, std::uint64_t opaque,
                               Pipeline::Route route) override {
    if (exactly_once() && txn_records_ == 0) {
      // The checkpoint's partition joins the Kafka transaction with its first record, in the
      // same AddPartitionsToTxn round trip, not at the commit: the record repeats the last
      // committed checkpoint, and the commit's own record, later in the partition, supersedes it.
      // A failure makes the transaction abortable; a full queue only loses the head start.
      const kafka::ProduceResult pr = producers_.current().produce(
          checkpoint_record(checkpoint_key(), pipeline_.kafka_committed().to_string()),
          kCheckpointOpaque);
      if (pr.status == kafka::ProduceStatus::kFailed) checkpoint_error_ = pr.error;
    }
    ++txn_records_;
    // Exactly-once: every record goes in the transaction (nothing else is in flight anyway).
    return producers_.produce(record, opaque, route == Pipeline::Route::kAlone);
  }
  bool stopped() const override { return producers_.stopped(); }

  // Every delivery report, of either producer: a checkpoint record's is the commit's; the
  // others are the Pipeline's.
  void on_delivery(const kafka::Delivery& d) {
    if (d.opaque == kCheckpointOpaque) {
      if (!d.ok) checkpoint_error_ = d.error;
    } else {
      pipeline_.on_delivery(d);
    }
    after_delivery();
  }

  // A fatal producer error (a refused batch under the gapless guarantee, an idempotent sequence
  // lost after a broker restart): what was not acknowledged is sent again from the confirmed
  // position by a new producer; nothing is lost, nothing passes an earlier record.
  void on_producer_fatal(const std::string& message) {
    if (exactly_once() && producers_.fenced()) {
      fail_fenced(message);
      return;
    }
    if (stopping_) {
      fail({kExitError, "Kafka producer fatal error while stopping: " + message});
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
  void on_kafka_refused(const std::string& what) {
    if (fatal_) return;
    kafka_refused_ = true;
    fail({kExitError, "Kafka broker " + what +
                          "; check the relay's Kafka security settings (security.protocol, "
                          "sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, "
                          "ssl.certificate.location) and the broker's; slot " +
                          config_.slot + " is not confirmed past " + confirm_lsn().to_string()});
  }

  void rewind() {
    producers_.renew();  // reports still due are dropped: those records are sent again
    txn_.reset();
    pipeline_.rewound();
    rewind_signalled_ = false;
  }

  void arm_status_timer() {
    status_timer_.expires_after(config_.status_interval);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      send_status();
      arm_status_timer();
    });
  }

  // A status update kConfirmDelay from now when the confirmable position passed what the slot
  // was last told; a check soon when the acknowledged prefix passed the verified position.
  // Nothing is armed while nothing advances: no wake-ups while idle.
  void confirm_soon() {
    if (!conn_ || leaving()) return;
    if (pipeline_.waiting_for_check()) checker_.schedule();
    if (confirm_armed_ || confirm_lsn() <= last_reported_) return;
    confirm_armed_ = true;
    confirm_timer_.expires_after(kConfirmDelay);
    confirm_timer_.async_wait([this](const boost::system::error_code& ec) {
      confirm_armed_ = false;
      if (!ec) send_status();
    });
  }

  void send_status() {
    if (!conn_ || !conn_->connected()) return;
    checker_.schedule();
    Lsn flush = confirm_lsn();
    try {
      // write: what the relay has handled (pg_stat_replication.write_lsn); only flush, the
      // verified position, moves the slot.
      conn_->send_status(std::max(flush, pipeline_.acknowledged()), flush, false);
      last_status_sent_ = Clock::now();
    } catch (const pg::Error& e) {
      // The read loop sees the broken connection and reconnects.
      log_->debug("event=status_failed slot={} error={}", config_.slot, quoted(e.what()));
      return;
    }
    if (flush != last_reported_) {
      log_->debug("event=confirmed slot={} lsn={} received={}", config_.slot, flush.to_string(),
                  pipeline_.received().to_string());
      last_reported_ = flush;
    }
  }

  // A stop with acknowledged transactions past the last passing publication check checks once
  // more, so that the final confirmation covers them and the next start sends none of them
  // again. On a connection of its own (a check cut short by the stop may have left the catalog
  // connection mid-query). A check that fails here is the same exit 5 as while streaming; one
  // that cannot run leaves the position where it was (those transactions are sent again).
  awaitable<void> final_check() {
    if (!stopping_ || fatal_ || pipeline_.rewinding() || !pipeline_.waiting_for_check()) co_return;
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
    while (!kafka_refused_ && producers_.queued() > 0 && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
    if (exactly_once() && txn_.phase() == TxnPhase::kOpen) {
      // Whole PostgreSQL transactions commit; a part of one is aborted and sent again next time.
      if (!fatal_ && !pipeline_.rewinding() && commit_due(true)) {
        co_await commit_kafka_transaction();
      } else if (txn_records_ > 0 || pipeline_.in_transaction()) {
        co_await abort_kafka_transaction();
      }
    }
    co_await final_check();
    send_status();
    status_timer_.cancel();
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
  KafkaProducers producers_;
  std::unique_ptr<pg::ReplicationConnection> conn_;
  asio::steady_timer wake_;
  asio::steady_timer pace_timer_;  // the read pause of stream()
  asio::steady_timer status_timer_;
  asio::steady_timer confirm_timer_;  // see confirm_soon()
  bool confirm_armed_ = false;
  asio::steady_timer backoff_timer_;
  std::mt19937_64 rng_;
  bool reading_wait_ = false;  // stream() waits on the replication socket
  bool waiting_ = false;
  bool stopping_ = false;
  bool had_slot_ = false;
  std::optional<Fatal> fatal_;
  std::optional<std::string> system_id_;
  std::optional<std::uint32_t> timeline_;  // of the last session
  // Exactly-once: the transaction cycle (txn_machine.hpp); the open Kafka transaction's start and
  // record count; a failed checkpoint record; the thread the checkpoint topic is read on.
  TxnMachine txn_;
  Clock::time_point txn_started_;
  std::size_t txn_records_ = 0;
  std::optional<std::string> checkpoint_error_;
  std::unique_ptr<asio::thread_pool> kafka_worker_;
  Clock::time_point stop_read_deadline_;  // see finishing_transaction()
  Clock::time_point stop_deadline_;       // a stop's end (--shutdown-timeout after it began)
  Lsn last_reported_;
  Clock::time_point last_status_sent_;
  bool rewind_signalled_ = false;
  bool kafka_refused_ = false;  // a broker refused the credentials or certificate: exiting
  Lsn last_rewind_at_;  // confirmed position at the last rewind  // wake_all() ran for the rewind
                        // under way
  Metrics metrics_;
  Pipeline pipeline_;           // it refers to config_, metrics_ and the producers (as its Sink)
  PublicationChecker checker_;  // last: it refers to the pipeline
};

Relay::Relay(asio::io_context& io, RelayConfig config)
    : impl_(std::make_unique<Impl>(io, std::move(config))) {}
Relay::~Relay() = default;
awaitable<int> Relay::run() { return impl_->run(); }
void Relay::request_stop() { impl_->request_stop(); }
const Metrics& Relay::metrics() { return impl_->metrics(); }
const RelayConfig& Relay::config() const { return impl_->config(); }

}  // namespace outbox::relay
