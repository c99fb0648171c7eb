// Exactly-once (--delivery exactly-once; DESIGN.md "The one rule") as the relay sees it: a cycle
// of the broker's transactions that each carry whole PostgreSQL transactions and end with the
// checkpoint of the last one, so that the slot is confirmed only through a committed checkpoint.
// A sink that has transactions implements it (src/sinks: Kafka's KafkaTransactions), made by the
// SinkFactory (sink_factory.hpp) over the sink it made; the relay lends it a Host. Its phases are
// TxnMachine's (txn_machine.hpp). Every wait on the broker runs off the io thread. Not
// thread-safe: the io_context's thread only.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/txn_machine.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::relay {

// The broker cannot be used for now (its progress record cannot be read or written, its
// transactions cannot be initialised): the session ends, or the step is tried again.
struct BrokerUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Transactions {
 public:
  using Clock = std::chrono::steady_clock;

  // What the relay lends the cycle.
  class Host {
   public:
    virtual ~Host() = default;
    virtual bool leaving() const = 0;  // the session ends (stop, failure, rewind)
    virtual bool stopping() const = 0;
    virtual Clock::time_point stop_deadline() const = 0;
    virtual bool failed() const = 0;
    // The relay still holds the slot: its replication connection lives, and it neither stops
    // nor failed.
    virtual bool holds_slot() const = 0;
    // Ends the relay with `fatal` (a successor fenced the producers).
    virtual void fail(Fatal fatal) = 0;
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
    // The broker holds events of `old_timeline` past its switch point `from`, up to `to`.
    virtual void ghosts(pgoutput::Lsn from, pgoutput::Lsn to, std::uint32_t old_timeline) = 0;
    // The broker is away; the state's reason.
    virtual void waiting_for_broker(const std::string& reason) = 0;
    virtual void committed() = 0;  // a commit moved the confirmable position
    virtual void aborted() = 0;    // an abort began a rewind
  };

  virtual ~Transactions() = default;

  // Before streaming: ready to send (initialised, checkpoint read, a transaction open). A
  // broker that is away is waited out with backoff (Host::waiting_for_broker). Throws
  // FatalError (a checkpoint that is not a WAL position) or BrokerUnavailable.
  virtual boost::asio::awaitable<void> prepare() = 0;
  // A transaction may end: one is open, no PostgreSQL transaction is (a broker's transaction
  // carries whole ones), something past the last commit was handled, and `now`.
  virtual bool commit_due(bool now) const = 0;
  // The open transaction is older than --transaction-interval.
  virtual bool interval_passed() const = 0;
  // Ends the open transaction: its checkpoint record, every report awaited, the commit (called
  // again while the broker times out). A failure aborts and rewinds to the last commit.
  virtual boost::asio::awaitable<void> commit() = 0;
  // The session ended with a transaction open: commit whole PostgreSQL transactions, abort a
  // part of one (and rewind).
  virtual boost::asio::awaitable<void> end_at_disconnect() = 0;
  // Aborts the open transaction; a producer fenced meanwhile stops the relay.
  virtual boost::asio::awaitable<void> abort() = 0;

  // Before each record of the Pipeline.
  virtual void before_record() = 0;
  // A delivery report of the cycle's own records (the checkpoint's): taken, true.
  virtual bool take(const sink::Delivery& d) = 0;

  virtual TxnPhase phase() const = 0;
  virtual bool committing() const = 0;
  // Records in the open transaction.
  virtual std::size_t records() const = 0;
  // The sink stopped because a newer client of its transactional identity fenced it.
  virtual bool fenced() const = 0;
  // The sink was fenced (`error`): the relay resumes at the last commit when it still holds the
  // slot (the broker ended a transaction open too long), else it stops (Host::fail).
  virtual void on_fenced(const std::string& error) = 0;
  // New clients after a rewind: initialised again (the checkpoint is not read again).
  virtual void producers_renewed() = 0;
};

}  // namespace outbox::relay
