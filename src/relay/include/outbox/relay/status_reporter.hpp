// The standby status updates that confirm the slot (DESIGN.md "Confirm promptly"): one soon
// (kConfirmDelay, coalesced) after the confirmable position passed what the server was last
// told, and one every --status-interval whatever happens (which also answers the walsender's
// wal_sender_timeout while the relay waits on anything else). No I/O of its own: it calls
// `send`; unit-tested in tests/unit/relay/status_reporter_test.cpp.
// Not thread-safe: the io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

class StatusReporter {
 public:
  using Clock = std::chrono::steady_clock;
  using Lsn = pgoutput::Lsn;
  struct Positions {
    Lsn write;  // what the relay handled (pg_stat_replication.write_lsn): informational
    Lsn flush;  // the confirmable position: the one that moves the slot
  };
  // Sends one status update; false when it could not (no connection: the stream reconnects).
  using Send = std::function<bool(const Positions&)>;

  StatusReporter(boost::asio::any_io_executor executor, std::chrono::milliseconds interval,
                 std::chrono::milliseconds confirm_delay, std::function<Positions()> positions,
                 Send send);

  // The idle cadence: a status update every `interval` from now on, until stop().
  void start();
  // A status update `confirm_delay` from now when the confirmable position passed what was last
  // reported; one for every call meanwhile. Nothing is armed while nothing advances.
  void confirm_soon();
  // A status update now.
  void send_now();
  // No more updates (the session ends); start() arms the cadence again.
  void stop();

  Lsn last_reported() const { return last_reported_; }
  Clock::time_point last_sent() const { return last_sent_; }

 private:
  void arm_cadence();

  std::chrono::milliseconds interval_;
  std::chrono::milliseconds confirm_delay_;
  std::function<Positions()> positions_;
  Send send_;
  boost::asio::steady_timer cadence_;
  boost::asio::steady_timer confirm_;
  bool confirm_armed_ = false;
  // Bumped by start() and stop(): a timer's handler of an earlier generation does nothing. A
  // cancel() does not reach a wait that already expired and whose handler is queued: that
  // handler runs with success after stop(), and a cadence it re-armed kept the io_context, and
  // the process, alive after the relay's end (found as a relay that logged event=fatal and
  // never exited, 1 run in 8 under load).
  std::uint64_t generation_ = 0;
  Lsn last_reported_;
  Clock::time_point last_sent_;
};

}  // namespace outbox::relay
