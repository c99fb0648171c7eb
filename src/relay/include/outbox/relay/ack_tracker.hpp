// The acknowledged-prefix watermark: transactions in commit order, each with its end LSN and a
// count of events produced but not yet acknowledged. The confirmable position is the end LSN of
// the last transaction of the unbroken prefix whose events are all acknowledged (DESIGN.md, "The
// one rule"). Deliveries to different partitions complete out of order; this absorbs that.
// Pure and single-threaded: used from the relay's io_context thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

using pgoutput::Lsn;

class AckTracker {
 public:
  using TxnSeq = std::uint64_t;

  // Opens a transaction (on Begin). At most one transaction is open at a time.
  // Throws std::logic_error if one is already open.
  TxnSeq begin(Lsn commit_lsn, std::int64_t commit_time_ms = 0);

  // One event of the open transaction was handed to the producer.
  void add_event(TxnSeq txn, std::size_t bytes);

  // The open transaction's Commit arrived.
  void commit(TxnSeq txn, Lsn end_lsn);

  // The connection dropped while a transaction was open: the server will send it again in full,
  // so it must never move the watermark; its produced events still have to be acknowledged
  // before anything after it may be confirmed.
  void abandon_open();

  // Forgets every transaction not yet confirmable (their events will never be acknowledged: the
  // producer that had them is gone); the confirmable position stays. The stream then resumes at
  // the slot's confirmed position and sends them again.
  void forget_unacknowledged();

  // After forget_unacknowledged(): the confirmable position goes back to `lsn` (exactly-once:
  // what an aborted Kafka transaction held was acknowledged, but is gone).
  void rewind_to(Lsn lsn) { confirmable_ = lsn; }

  // A delivery report (success, or a failure that was handled, e.g. dead-lettered).
  // Throws std::logic_error for a transaction with nothing outstanding.
  void ack(TxnSeq txn, std::size_t bytes);

  // An outstanding event of `txn` is replaced by another record (its dead-letter copy).
  void resize_event(TxnSeq txn, std::size_t old_bytes, std::size_t new_bytes);

  // End LSN of the last fully acknowledged committed transaction of the prefix; monotonic.
  Lsn confirmable() const { return confirmable_; }

  // Raises the watermark to `lsn` when nothing is tracked at all (idle stream, keepalive walEnd).
  // Returns whether it applied.
  bool advance_idle(Lsn lsn);

  // Every event of `txn` was acknowledged (or it is no longer tracked: confirmable or forgotten).
  bool all_acknowledged(TxnSeq txn) const;

  bool idle() const { return entries_.empty(); }
  bool has_open() const { return open_.has_value(); }
  std::size_t inflight_events() const { return inflight_events_; }
  std::size_t inflight_bytes() const { return inflight_bytes_; }
  std::size_t tracked_transactions() const { return entries_.size(); }
  // Commit LSN of the oldest transaction not yet confirmable, if any.
  std::optional<Lsn> oldest_pending_commit() const;
  std::optional<Lsn> commit_lsn_of(TxnSeq txn) const;
  std::int64_t commit_time_ms_of(TxnSeq txn) const;
  // Commit time of the oldest transaction with events still unacknowledged, if any.
  std::optional<std::int64_t> oldest_unacked_commit_time_ms() const;
  // Committed transactions that became confirmable so far.
  std::uint64_t confirmed_transactions() const { return confirmed_transactions_; }

 private:
  struct Entry {
    Lsn commit_lsn;
    Lsn end_lsn;  // zero while open, and for abandoned transactions
    std::int64_t commit_time_ms = 0;
    std::size_t pending = 0;
    bool closed = false;  // committed or abandoned
  };

  Entry& entry(TxnSeq txn);
  void pop_completed();

  std::deque<Entry> entries_;
  TxnSeq front_seq_ = 0;  // sequence number of entries_.front()
  TxnSeq next_seq_ = 0;
  std::optional<TxnSeq> open_;
  Lsn confirmable_;
  std::size_t inflight_events_ = 0;
  std::size_t inflight_bytes_ = 0;
  std::uint64_t confirmed_transactions_ = 0;
};

}  // namespace outbox::relay
