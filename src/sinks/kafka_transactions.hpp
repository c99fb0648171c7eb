// The exactly-once Kafka transaction cycle (--delivery exactly-once; DESIGN.md "The one rule"),
// Kafka's relay::Transactions: both transactional producers initialised (fencing older ones),
// the checkpoint read once per process, then Kafka transactions that each carry whole
// PostgreSQL transactions and end with a checkpoint record, committed one after the other by the
// two producers in turn. Its phases are TxnMachine's (txn_machine.hpp), every transition checked.
// Every wait on Kafka runs on a worker thread (kafka::Producer's, or this cycle's for the
// checkpoint read), so the relay goes on answering PostgreSQL whatever the broker does. Private
// to the sinks; the io_context's thread.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "kafka_producers.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/progress_record.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/transactions.hpp"
#include "outbox/relay/txn_machine.hpp"

namespace outbox::sinks {

class KafkaTransactions : public relay::Transactions {
 public:
  using Clock = relay::Transactions::Clock;
  using Host = relay::Transactions::Host;
  // The opaque of a checkpoint record (the Pipeline never sees its report; its transaction
  // sequence numbers stay far below), and how long one transaction call may wait.
  static constexpr std::uint64_t kCheckpointOpaque = 1ULL << 61;
  static constexpr std::chrono::seconds kTxnTimeout{30};

  // `producer`: the brokers and properties the checkpoint is read with.
  KafkaTransactions(const relay::RelayConfig& config, kafka::ProducerConfig producer,
                    relay::Pipeline& pipeline, KafkaProducers& producers, relay::Metrics& metrics,
                    std::shared_ptr<spdlog::logger> log, std::string transactional_id, Host& host);
  ~KafkaTransactions() override;

  // Before streaming: ready to send (initialised, checkpoint read, a transaction open). A
  // broker that is away is waited out with backoff (Host::waiting_for_kafka). Throws
  // FatalError (a checkpoint that is not a WAL position) or BrokerUnavailable.
  boost::asio::awaitable<void> prepare() override;
  // A Kafka transaction may end: one is open, no PostgreSQL transaction is (a Kafka transaction
  // carries whole ones), something past the last commit was handled, and `now`.
  bool commit_due(bool now) const override;
  // The open transaction is older than --transaction-interval.
  bool interval_passed() const override {
    return Clock::now() - started_ >= config_.transaction_interval;
  }
  // Ends the open transaction: its checkpoint record, every report awaited, the commit (called
  // again while the broker times out). A failure aborts and rewinds to the last commit.
  boost::asio::awaitable<void> commit() override;
  // The session ended with a transaction open: commit whole PostgreSQL transactions, abort a
  // part of one (and rewind).
  boost::asio::awaitable<void> end_at_disconnect() override;
  // Aborts the open transaction; a producer fenced meanwhile stops the relay.
  boost::asio::awaitable<void> abort() override;

  // Before each record of the Pipeline: the first of a transaction brings a copy of the last
  // committed checkpoint along, so that the checkpoint's partition joins the transaction in the
  // same round trip as the events'.
  void before_record() override;
  bool take(const sink::Delivery& d) override;

  relay::TxnPhase phase() const override { return txn_.phase(); }
  bool committing() const override { return txn_.committing(); }
  std::size_t records() const override { return records_; }
  bool fenced() const override { return producers_.fenced(); }
  void on_fenced(const std::string& error) override;
  // New producers after a rewind: initialised again (the checkpoint is not read again).
  void producers_renewed() override { txn_.reset(); }

 private:
  boost::asio::awaitable<std::string> try_prepare();
  boost::asio::awaitable<relay::ProgressRead> read_checkpoint();
  // A successor fenced the producers: the cycle ends here.
  void mark_fenced();
  void begin();
  kafka::Record checkpoint_record(const std::string& key, const std::string& value) const;
  // "LSN timeline=N": a checkpoint names its timeline, so that a relay started after a promotion
  // knows whether it lies before the switch point (else: ghosts, and it resumes there). Plain
  // "LSN" while decoding on a standby: the timeline is not known there (see Host).
  std::string checkpoint_value(pgoutput::Lsn lsn) const;

  const relay::RelayConfig& config_;
  kafka::ProducerConfig producer_;
  relay::Pipeline& pipeline_;
  KafkaProducers& producers_;
  relay::Metrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  std::string transactional_id_;
  Host& host_;
  relay::TxnMachine txn_;
  Clock::time_point started_;  // of the open Kafka transaction
  std::size_t records_ = 0;    // in the open Kafka transaction
  std::optional<std::string> checkpoint_error_;
  std::unique_ptr<boost::asio::thread_pool> worker_;  // the checkpoint topic is read on it
};

}  // namespace outbox::sinks
