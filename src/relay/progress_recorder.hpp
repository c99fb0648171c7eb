// The progress record written as the slot is confirmed (at-least-once; DESIGN.md "The one rule"):
// the confirmable position recorded in the sink's ProgressStore at most every kProgressInterval
// (a timer writes the one due meanwhile), its store made first when missing (tried again every
// kProgressRetry), each write's outcome matched to its position; the slot is told no more than
// acked(). While nothing is delivered, at most every ProgressStore::idle_interval() (no timer:
// the next confirmation or status update writes it). Exactly-once records its checkpoint in its
// transactions instead (Transactions). Private to the relay; the io thread only.
#pragma once

#include <spdlog/logger.h>

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/progress_store.hpp"

namespace outbox::relay {

class ProgressRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  using Lsn = pgoutput::Lsn;

  // What the relay lends it.
  struct Hooks {
    // A write of the confirmable position may go out now (at-least-once, and the slot was
    // compared with the record this session: a record written before would hide a gap).
    std::function<bool()> may_write;
    std::function<Lsn()> target;                             // the confirmable position
    std::function<std::string()> key;                        // SYSTEM_ID/SLOT
    std::function<std::optional<std::uint32_t>()> timeline;  // none while decoding on a standby
    std::function<void()> stored;  // a record was stored: the slot may move
    std::function<void()> made;    // the background making of the store ended
    // How many transactions were delivered so far: a write with none since the last is an idle
    // one (ProgressStore::idle_interval()).
    std::function<std::uint64_t()> delivered;
  };

  ProgressRecorder(boost::asio::any_io_executor io, std::string slot,
                   std::shared_ptr<spdlog::logger> log, Hooks hooks);

  // The sink's store (made with the sink, after this).
  void attach(ProgressStore* store) { store_ = store; }
  // The store exists (made when missing). The broker away: said, and tried again by the next
  // write due.
  boost::asio::awaitable<void> ensure();
  // Records `lsn` now, or (none) the confirmable position when may_write() and due.
  void write(std::optional<Lsn> lsn = std::nullopt);
  // A write's outcome (ProgressStore::Written): `error` empty when stored.
  void on_written(std::uint64_t seq, const std::string& error);
  // The next write goes out at once (not kProgressInterval after the last).
  void due_now() { at_ = {}; }
  void cancel_timer();
  // The relay ended: no write makes a client again.
  void close() { closed_ = true; }
  // A record read from the store (at start): nothing before it needs writing.
  void read(Lsn last) {
    if (last > acked_) acked_ = last;
  }

  bool ready() const { return ready_; }     // the store exists
  bool making() const { return making_; }   // ensure() runs in the background
  Lsn written() const { return written_; }  // the last record queued
  Lsn acked() const { return acked_; }      // the last record stored (or read at start)
  const std::optional<std::string>& error() const { return error_; }

 private:
  boost::asio::awaitable<void> make();
  void said(const std::string& error);

  boost::asio::any_io_executor io_;
  std::string slot_;
  std::shared_ptr<spdlog::logger> log_;
  Hooks hooks_;
  ProgressStore* store_ = nullptr;
  bool ready_ = false;
  bool making_ = false;  // make() under way
  bool closed_ = false;
  Lsn written_;
  Lsn acked_;
  Clock::time_point at_;  // the last write (or try)
  std::optional<std::string> error_;
  std::uint64_t seq_ = 0;
  std::uint64_t delivered_written_ = 0;  // hooks_.delivered() at the last record queued
  std::deque<std::pair<std::uint64_t, Lsn>> pending_;  // records awaiting their outcome
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
};

}  // namespace outbox::relay
