// The exactly-once Kafka transaction cycle (--delivery exactly-once; DESIGN.md "The one rule"):
// both transactional producers initialised (fencing older ones), the checkpoint read once per
// process, then Kafka transactions that each carry whole PostgreSQL transactions and end with a
// checkpoint record, committed one after the other by the two producers in turn. Its phases are
// TxnMachine's (txn_machine.hpp), every transition checked. Every wait on Kafka runs on a worker
// thread (kafka::Producer's, or this cycle's for the checkpoint read), so the relay goes on
// answering PostgreSQL whatever the broker does. Private to the relay; the io_context's thread.
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
#include "outbox/relay/relay.hpp"
#include "outbox/relay/txn_machine.hpp"
#include "progress_record.hpp"

namespace outbox::relay {

// Kafka cannot be used for now: the session ends and is retried.
struct KafkaUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class KafkaTransactions {
 public:
  using Clock = std::chrono::steady_clock;
  // The opaque of a checkpoint record (the Pipeline never sees its report; its transaction
  // sequence numbers stay far below), and how long one transaction call may wait.
  static constexpr std::uint64_t kCheckpointOpaque = 1ULL << 61;
  static constexpr std::chrono::seconds kTxnTimeout{30};

  // What the relay lends the cycle.
  class Host {
   public:
    virtual ~Host() = default;
    virtual bool leaving() const = 0;  // the session ends (stop, failure, rewind)
    virtual bool stopping() const = 0;
    virtual Clock::time_point stop_deadline() const = 0;
    virtual bool failed() const = 0;
    // Until a delivery report, a stop, or `until`.
    virtual boost::asio::awaitable<void> wait_for_change(Clock::time_point until) = 0;
    virtual std::chrono::milliseconds backoff(int attempt) = 0;
    virtual std::string checkpoint_key() const = 0;
    // The server's timeline now; where an ancestor timeline ended in its history.
    virtual std::uint32_t timeline() const = 0;
    virtual std::optional<pgoutput::Lsn> switch_point(std::uint32_t old_timeline) const = 0;
    // The session decodes on a hot standby: its WAL may go on on a new timeline (a promotion)
    // without the stream ending, so timeline() may be an ancestor of what is decoded.
    virtual bool decoding_on_standby() const = 0;
    // Kafka holds events of `old_timeline` past its switch point `from`, up to `to`.
    virtual void ghosts(pgoutput::Lsn from, pgoutput::Lsn to, std::uint32_t old_timeline) = 0;
    virtual void waiting_for_kafka(const std::string& reason) = 0;
    virtual void fenced(const std::string& error) = 0;  // a successor fenced the producers
    virtual void committed() = 0;                       // a commit moved the confirmable position
    virtual void aborted() = 0;                         // an abort began a rewind
  };

  // `producers`: null with a sink other than Kafka (no exactly-once: nothing here is called).
  KafkaTransactions(const RelayConfig& config, Pipeline& pipeline, KafkaProducers* producers,
                    Metrics& metrics, std::shared_ptr<spdlog::logger> log,
                    std::string transactional_id, Host& host);
  ~KafkaTransactions();

  // Before streaming: ready to send (initialised, checkpoint read, a transaction open). A
  // broker that is away is waited out with backoff (Host::waiting_for_kafka). Throws
  // FatalError (a checkpoint that is not a WAL position) or KafkaUnavailable.
  boost::asio::awaitable<void> prepare();
  // A Kafka transaction may end: one is open, no PostgreSQL transaction is (a Kafka transaction
  // carries whole ones), something past the last commit was handled, and `now`.
  bool commit_due(bool now) const;
  // The open transaction is older than --transaction-interval.
  bool interval_passed() const { return Clock::now() - started_ >= config_.transaction_interval; }
  // Ends the open transaction: its checkpoint record, every report awaited, the commit (called
  // again while the broker times out). A failure aborts and rewinds to the last commit.
  boost::asio::awaitable<void> commit();
  // The session ended with a transaction open: commit whole PostgreSQL transactions, abort a
  // part of one (and rewind).
  boost::asio::awaitable<void> end_at_disconnect();
  // Aborts the open transaction; a producer fenced meanwhile stops the relay.
  boost::asio::awaitable<void> abort();

  // Before each record of the Pipeline: the first of a transaction brings a copy of the last
  // committed checkpoint along, so that the checkpoint's partition joins the transaction in the
  // same round trip as the events'.
  void before_record();
  void on_checkpoint_delivery(const kafka::Delivery& d);

  TxnPhase phase() const { return txn_.phase(); }
  bool committing() const { return txn_.committing(); }
  std::size_t records() const { return records_; }
  // A successor fenced the producers: the cycle ends here.
  void mark_fenced();
  // New producers after a rewind: initialised again (the checkpoint is not read again).
  void producers_renewed() { txn_.reset(); }

 private:
  boost::asio::awaitable<std::string> try_prepare();
  boost::asio::awaitable<ProgressRead> read_checkpoint();
  void begin();
  kafka::Record checkpoint_record(const std::string& key, const std::string& value) const;
  // "LSN timeline=N": a checkpoint names its timeline, so that a relay started after a promotion
  // knows whether it lies before the switch point (else: ghosts, and it resumes there). Plain
  // "LSN" while decoding on a standby: the timeline is not known there (see Host).
  std::string checkpoint_value(pgoutput::Lsn lsn) const;

  const RelayConfig& config_;
  Pipeline& pipeline_;
  KafkaProducers* producers_;  // null without Kafka
  Metrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  std::string transactional_id_;
  Host& host_;
  TxnMachine txn_;
  Clock::time_point started_;  // of the open Kafka transaction
  std::size_t records_ = 0;    // in the open Kafka transaction
  std::optional<std::string> checkpoint_error_;
  std::unique_ptr<boost::asio::thread_pool> worker_;  // the checkpoint topic is read on it
};

}  // namespace outbox::relay
