#include "kafka_transactions.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <string_view>

#include "kafka_progress.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/kafka/consumer.hpp"

namespace outbox::sinks {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using common::quoted;
using pgoutput::Lsn;
using relay::BrokerUnavailable;
using relay::FatalError;
using relay::kExitError;
using relay::ProgressRead;
using relay::TxnMachine;
using relay::TxnPhase;

KafkaTransactions::KafkaTransactions(const relay::RelayConfig& config,
                                     kafka::ProducerConfig producer, relay::Pipeline& pipeline,
                                     KafkaProducers& producers, relay::Metrics& metrics,
                                     std::shared_ptr<spdlog::logger> log,
                                     std::string transactional_id, Host& host)
    : config_(config),
      producer_(std::move(producer)),
      pipeline_(pipeline),
      producers_(producers),
      metrics_(metrics),
      log_(std::move(log)),
      transactional_id_(std::move(transactional_id)),
      host_(host) {}

KafkaTransactions::~KafkaTransactions() = default;

void KafkaTransactions::mark_fenced() {
  if (txn_.phase() != TxnPhase::kFenced && TxnMachine::allowed(txn_.phase(), TxnPhase::kFenced)) {
    txn_.to(TxnPhase::kFenced);
  }
}

void KafkaTransactions::before_record() {
  if (records_ == 0) {
    // The record repeats the last committed checkpoint; the commit's own record, later in the
    // partition, supersedes it. A failure makes the transaction abortable; a full queue only
    // loses the head start.
    const kafka::ProduceResult pr = producers_.current().produce(
        checkpoint_record(host_.checkpoint_key(), checkpoint_value(pipeline_.kafka_committed())),
        kCheckpointOpaque);
    if (pr.status == kafka::ProduceStatus::kFailed) checkpoint_error_ = pr.error;
  }
  ++records_;
}

bool KafkaTransactions::take(const sink::Delivery& d) {
  if (d.opaque != kCheckpointOpaque) return false;
  if (!d.ok) checkpoint_error_ = d.error;
  return true;
}

// A newer producer of the transactional.id (a relay that took the slot over) fenced this one.
// Or the transaction coordinator did: it aborts a transaction open longer than
// transaction.timeout.ms (a broker away that long) and bumps the producer's epoch, which
// fences the producer too. Only a relay holding the slot initialises the transactional.id,
// and the slot is this relay's while its replication connection lives: then the coordinator
// ended the transaction, and the relay resumes at the last commit with new producers, as
// after any abort. A connection the server closed (the slot taken over) stops the relay.
void KafkaTransactions::on_fenced(const std::string& error) {
  if (host_.holds_slot()) {
    log_->warn(
        "event=kafka_transaction_expired slot={} error={}: fenced while the slot is still this "
        "relay's: the coordinator ended the open transaction (open longer than "
        "transaction.timeout.ms, e.g. a broker away that long); resuming at the last commit",
        config_.slot, quoted(error));
    pipeline_.abort_kafka_transaction("the transaction coordinator ended it: " + error);
    host_.aborted();
    return;
  }
  mark_fenced();
  host_.fail({kExitError, "fenced: another producer initialised transactional.id " +
                              transactional_id_ + " or " + transactional_id_ +
                              KafkaProducers::kSpareSuffix +
                              " (a relay that took over this slot); this one stops without "
                              "committing: " +
                              error});
}

// Before streaming: both producers' transactions initialised (which fences an older producer
// of the same transactional.id and ends its open transaction), then, once per process, the
// last committed checkpoint read with read_committed: the stream starts after it. Every Kafka
// wait runs on a worker thread: the replication connection goes on answering the server
// (status updates), and a broker that is away is waited out here, on the same connection,
// with backoff, instead of by reconnecting (which made the server decode again). Throws
// FatalError.
awaitable<void> KafkaTransactions::prepare() {
  int attempt = 0;
  while (!host_.leaving()) {
    const std::string error = co_await try_prepare();
    if (error.empty()) co_return;
    const auto delay = host_.backoff(attempt++);
    host_.waiting_for_broker("waiting for Kafka: " + error);
    log_->warn("event=kafka_unavailable slot={} attempt={} in_ms={} reason={}", config_.slot,
               attempt, delay.count(), quoted(error));
    const auto until = Clock::now() + delay;
    while (!host_.leaving() && Clock::now() < until) co_await host_.wait_for_change(until);
  }
}

// One try of prepare_transactions(): empty when ready, else why not (retried).
awaitable<std::string> KafkaTransactions::try_prepare() {
  if (txn_.phase() == TxnPhase::kUninitialised) txn_.to(TxnPhase::kInitialising);
  if (txn_.phase() == TxnPhase::kInitialising) {
    // In order, each once (librdkafka refuses a second init_transactions): a retry after the
    // first succeeded goes on with the second. No swap happens before both are ready.
    while (txn_.initialised() < 2) {
      const bool first = txn_.initialised() == 0;
      kafka::Producer& p = first ? producers_.current() : producers_.spare();
      const std::string id = transactional_id_ + (first ? "" : KafkaProducers::kSpareSuffix);
      const kafka::TxnResult r = co_await p.init_transactions(kTxnTimeout);
      if (r.outcome == kafka::TxnOutcome::kFenced) {
        on_fenced(r.error);
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
               transactional_id_, transactional_id_, KafkaProducers::kSpareSuffix);
  }
  if (txn_.phase() == TxnPhase::kCheckpoint) {
    if (!txn_.checkpoint_read()) {
      const std::string error = co_await producers_.current().create_compacted_topic(
          config_.checkpoint_topic, kTxnTimeout);
      if (!error.empty()) co_return error;
      const ProgressRead read = co_await read_checkpoint();
      if (!read.error.empty()) co_return read.error;
      if (!read.bad.empty()) {
        throw FatalError({kExitError, "checkpoint of " + host_.checkpoint_key() + " in topic " +
                                          config_.checkpoint_topic + " is not a WAL position: '" +
                                          read.bad + "'"});
      }
      std::optional<Lsn> from = read.last;
      if (from && read.timeline && *read.timeline != host_.timeline()) {
        // Written before a promotion: valid up to where the new timeline left the old one.
        const std::optional<Lsn> at = host_.switch_point(*read.timeline);
        if (!at) {
          log_->warn(
              "event=checkpoint_not_used slot={} checkpoint={} timeline={} server_timeline={}: "
              "its timeline is not in the server's history; the stream starts at the slot's "
              "position (events may be sent again)",
              config_.slot, from->to_string(), *read.timeline, host_.timeline());
          from.reset();
        } else if (*from > *at) {
          host_.ghosts(*at, *from, *read.timeline);
          from = at;
        }
      }
      if (from) pipeline_.start_from_checkpoint(*from);
      txn_.set_checkpoint_read();
      log_->info("event=checkpoint_read slot={} topic={} key={} lsn={}", config_.slot,
                 config_.checkpoint_topic, quoted(host_.checkpoint_key()),
                 read.last ? read.last->to_string() : "none");
    }
    txn_.to(TxnPhase::kReady);
  }
  if (txn_.phase() == TxnPhase::kReady) begin();
  co_return std::string();
}

// Reads the checkpoint topic to its end (read_committed) on the Kafka worker thread.
awaitable<ProgressRead> KafkaTransactions::read_checkpoint() {
  if (!worker_) worker_ = std::make_unique<asio::thread_pool>(1);
  // Named, then moved: GCC 12 destroys temporaries of a coroutine call in a co_await twice.
  kafka::ConsumerConfig consumer{producer_.brokers, producer_.properties};
  std::string topic = config_.checkpoint_topic;
  std::string key = host_.checkpoint_key();
  ProgressRead read = co_await read_progress(*worker_, std::move(consumer), std::move(topic),
                                             std::move(key), kTxnTimeout);
  if (!read.error.empty()) {
    read.error = "reading checkpoint topic " + config_.checkpoint_topic + ": " + read.error;
  }
  co_return read;
}

void KafkaTransactions::begin() {
  const kafka::TxnResult r = producers_.current().begin_transaction();
  if (!r.ok()) throw BrokerUnavailable("beginning a Kafka transaction: " + r.error);
  txn_.to(TxnPhase::kOpen);
  records_ = 0;
  started_ = Clock::now();
  checkpoint_error_.reset();
}

// The checkpoint record, key and value.
std::string KafkaTransactions::checkpoint_value(Lsn lsn) const {
  return relay::progress_value(lsn, host_.decoding_on_standby()
                                        ? std::nullopt
                                        : std::optional<std::uint32_t>(host_.timeline()));
}

kafka::Record KafkaTransactions::checkpoint_record(const std::string& key,
                                                   const std::string& value) const {
  return kafka::Record{config_.checkpoint_topic, key, value, {}, 0};
}

// A Kafka transaction may end here: one is open, no PostgreSQL transaction is (a Kafka
// transaction carries whole ones), something past the last commit was handled, and `now`.
bool KafkaTransactions::commit_due(bool now) const {
  return now && txn_.phase() == TxnPhase::kOpen && !pipeline_.in_transaction() &&
         pipeline_.produced_through() > pipeline_.kafka_committed();
}

// Ends the open Kafka transaction: the checkpoint record (end of the last PostgreSQL
// transaction in it) goes in, every report is awaited, then the commit; the slot may then be
// confirmed through the checkpoint. A failure aborts and rewinds to the last commit.
awaitable<void> KafkaTransactions::commit() {
  const Lsn through = std::max(pipeline_.produced_through(), pipeline_.kafka_committed());
  const std::string key = host_.checkpoint_key();
  const std::string value = checkpoint_value(through);
  const kafka::Record rec = checkpoint_record(key, value);
  txn_.to(TxnPhase::kCommitting);
  for (;;) {
    const kafka::ProduceResult pr = producers_.current().produce(rec, kCheckpointOpaque);
    if (pr.status == kafka::ProduceStatus::kQueued) break;
    if (pr.status == kafka::ProduceStatus::kFailed) {
      checkpoint_error_ = pr.error;
      break;
    }
    co_await host_.wait_for_change(Clock::now() + std::chrono::milliseconds(100));
    if (host_.leaving()) break;
  }
  while (!checkpoint_error_ && producers_.current().queued() > 0 && !host_.leaving()) {
    co_await host_.wait_for_change(Clock::now() + std::chrono::milliseconds(100));
  }
  if (host_.failed()) co_return;
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
      if (r.outcome != kafka::TxnOutcome::kRetriable || host_.failed() ||
          (host_.stopping() && Clock::now() >= host_.stop_deadline())) {
        break;
      }
      log_->warn("event=kafka_commit_retry slot={} attempt={} error={}", config_.slot, attempt,
                 quoted(r.error));
    }
    metrics_.kafka_commit_seconds.observe(std::chrono::duration<double>(Clock::now() - t0).count());
    if (host_.failed() && txn_.phase() == TxnPhase::kFenced) co_return;
  }
  switch (r.outcome) {
    case kafka::TxnOutcome::kOk:
      txn_.to(TxnPhase::kReady);
      ++metrics_.kafka_transactions_committed;
      pipeline_.kafka_committed(through);
      host_.committed();
      producers_.take_turns();
      begin();
      co_return;
    case kafka::TxnOutcome::kFenced:
      on_fenced(r.error);
      co_return;
    case kafka::TxnOutcome::kAbortable:
    case kafka::TxnOutcome::kRetriable:
    case kafka::TxnOutcome::kFatal:
      ++metrics_.kafka_transactions_aborted;
      pipeline_.abort_kafka_transaction("Kafka transaction not committed: " + r.error);
      if (r.outcome != kafka::TxnOutcome::kFatal) {
        co_await abort();
      } else {
        txn_.to(TxnPhase::kAborting);
        txn_.to(TxnPhase::kReady);
      }
      host_.aborted();
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
awaitable<void> KafkaTransactions::end_at_disconnect() {
  if (!pipeline_.in_transaction()) {
    co_await commit();
    co_return;
  }
  ++metrics_.kafka_transactions_aborted;
  pipeline_.abort_kafka_transaction(
      "the connection ended inside a PostgreSQL transaction: its Kafka transaction is aborted");
  co_await abort();
}

// Aborts the open Kafka transaction (on the producer's worker thread); a producer fenced
// meanwhile stops the relay. A rewind to the last commit follows (new producers).
awaitable<void> KafkaTransactions::abort() {
  txn_.to(TxnPhase::kAborting);
  if (host_.stopping() && Clock::now() >= host_.stop_deadline()) {
    // Out of time to stop: the next start's init_transactions aborts it on the coordinator.
    txn_.to(TxnPhase::kReady);
    co_return;
  }
  const kafka::TxnResult r = co_await producers_.current().abort_transaction(kTxnTimeout);
  if (r.outcome == kafka::TxnOutcome::kFenced) {
    on_fenced(r.error);
    co_return;
  }
  if (!r.ok()) {
    // New producers initialise the transactional.id again, which aborts it on the coordinator.
    log_->warn("event=kafka_abort_failed slot={} error={}", config_.slot, quoted(r.error));
  }
  txn_.to(TxnPhase::kReady);
}

}  // namespace outbox::sinks
