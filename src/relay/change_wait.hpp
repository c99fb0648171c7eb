// What the session's coroutine awaits, for whoever would cut the wait short: a change (a
// delivery report, a stop, a progress record; wait()) or the replication socket (the stream
// loop, marked with Reading). One wait at a time: the session is one coroutine. Private to the
// relay; the io thread only.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>

namespace outbox::relay {

class ChangeWait {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ChangeWait(boost::asio::any_io_executor io) : timer_(std::move(io)) {}

  // Until notified (notify(), cancel()) or `until`.
  boost::asio::awaitable<void> wait(Clock::time_point until);
  // Cuts a wait for a change short (nothing when the session awaits something else).
  void notify() {
    if (what_ == What::kChange) timer_.cancel();
  }
  // Cuts any wait for a change short (a stop, a failure, a rewind: wake every wait).
  void cancel() { timer_.cancel(); }

  // The stream loop awaits the socket while one lives: reset on every way out (left set after a
  // lost connection, it made the next check due cancel the next session's connect).
  class Reading {
   public:
    explicit Reading(ChangeWait& w) : w_(w) { w_.what_ = What::kReadable; }
    ~Reading() { w_.what_ = What::kNone; }
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;

   private:
    ChangeWait& w_;
  };
  bool reading() const { return what_ == What::kReadable; }
  bool waiting() const { return what_ == What::kChange; }

 private:
  enum class What { kNone, kReadable, kChange };
  boost::asio::steady_timer timer_;
  What what_ = What::kNone;
};

}  // namespace outbox::relay
