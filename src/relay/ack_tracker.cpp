#include "outbox/relay/ack_tracker.hpp"

#include <stdexcept>
#include <string>

namespace outbox::relay {

AckTracker::TxnSeq AckTracker::begin(Lsn commit_lsn, std::int64_t commit_time_ms) {
  if (open_) {
    throw std::logic_error("AckTracker: Begin at " + commit_lsn.to_string() +
                           " while a transaction is still open");
  }
  if (entries_.empty()) front_seq_ = next_seq_;
  entries_.push_back(Entry{commit_lsn, Lsn{}, commit_time_ms, 0, false});
  open_ = next_seq_;
  return next_seq_++;
}

AckTracker::Entry& AckTracker::entry(TxnSeq txn) {
  if (txn < front_seq_ || txn - front_seq_ >= entries_.size()) {
    throw std::logic_error("AckTracker: unknown transaction sequence " + std::to_string(txn));
  }
  return entries_[txn - front_seq_];
}

void AckTracker::add_event(TxnSeq txn, std::size_t bytes) {
  Entry& e = entry(txn);
  if (e.closed) throw std::logic_error("AckTracker: event added to a closed transaction");
  ++e.pending;
  ++inflight_events_;
  inflight_bytes_ += bytes;
}

void AckTracker::commit(TxnSeq txn, Lsn end_lsn) {
  if (open_ != txn) throw std::logic_error("AckTracker: Commit for a transaction that is not open");
  Entry& e = entry(txn);
  e.end_lsn = end_lsn;
  e.closed = true;
  open_.reset();
  pop_completed();
}

void AckTracker::abandon_open() {
  if (!open_) return;
  Entry& e = entry(*open_);
  e.end_lsn = Lsn{};
  e.closed = true;
  open_.reset();
  pop_completed();
}

void AckTracker::forget_unacknowledged() {
  entries_.clear();
  front_seq_ = next_seq_;
  open_.reset();
  inflight_events_ = 0;
  inflight_bytes_ = 0;
}

void AckTracker::ack(TxnSeq txn, std::size_t bytes) {
  Entry& e = entry(txn);
  if (e.pending == 0) {
    throw std::logic_error("AckTracker: acknowledgement for transaction " + std::to_string(txn) +
                           " with no outstanding event");
  }
  --e.pending;
  --inflight_events_;
  inflight_bytes_ -= bytes;
  if (e.pending == 0 && e.closed && txn == front_seq_) pop_completed();
}

void AckTracker::resize_event(TxnSeq txn, std::size_t old_bytes, std::size_t new_bytes) {
  if (entry(txn).pending == 0) {
    throw std::logic_error("AckTracker: resize of an event of transaction " + std::to_string(txn) +
                           " with no outstanding event");
  }
  inflight_bytes_ = inflight_bytes_ - old_bytes + new_bytes;
}

bool AckTracker::advance_idle(Lsn lsn) {
  if (!entries_.empty() || lsn <= confirmable_) return false;
  confirmable_ = lsn;
  return true;
}

bool AckTracker::all_acknowledged(TxnSeq txn) const {
  if (txn < front_seq_ || txn - front_seq_ >= entries_.size()) return true;
  return entries_[txn - front_seq_].pending == 0;
}

std::optional<Lsn> AckTracker::oldest_pending_commit() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.front().commit_lsn;
}

std::optional<Lsn> AckTracker::commit_lsn_of(TxnSeq txn) const {
  if (txn < front_seq_ || txn - front_seq_ >= entries_.size()) return std::nullopt;
  return entries_[txn - front_seq_].commit_lsn;
}

std::int64_t AckTracker::commit_time_ms_of(TxnSeq txn) const {
  if (txn < front_seq_ || txn - front_seq_ >= entries_.size()) return 0;
  return entries_[txn - front_seq_].commit_time_ms;
}

std::optional<std::int64_t> AckTracker::oldest_unacked_commit_time_ms() const {
  for (const Entry& e : entries_) {
    if (e.pending > 0) return e.commit_time_ms;
  }
  return std::nullopt;
}

void AckTracker::pop_completed() {
  while (!entries_.empty() && entries_.front().closed && entries_.front().pending == 0) {
    // Abandoned transactions carry no end LSN: they never move the watermark.
    if (entries_.front().end_lsn > confirmable_) {
      confirmable_ = entries_.front().end_lsn;
      ++confirmed_transactions_;
    }
    entries_.pop_front();
    ++front_seq_;
  }
}

}  // namespace outbox::relay
