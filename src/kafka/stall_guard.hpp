// The producer's stall guard, as pure decisions: time points and counts in, what to do out. The
// timer and the librdkafka calls (pause, resume, flush) stay in producer.cpp. Internal to the
// kafka module. Not thread-safe: the producer calls it on the io_context's thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace outbox::kafka {

// librdkafka busy-polls its broker thread while a partition has the idempotent producer's five
// requests in flight and a batch past linger.ms: a stalled or stopped broker makes the relay burn
// a core beside the database. Paused partitions take no part in that wake-up computation. So once
// no delivery report has come for kStallAfter while records are in flight, the producer pauses
// every partition it knows; requests in flight still complete, and the first report resumes them.
// A request that must be sent again waits in a paused queue, so every kProbeEvery the partitions
// run for kProbeWindow.
class StallGuard {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kTick = std::chrono::milliseconds(25);  // check() period while watching
  static constexpr auto kStallAfter = std::chrono::milliseconds(100);
  static constexpr auto kProbeEvery = std::chrono::milliseconds(1000);
  static constexpr auto kProbeWindow = std::chrono::milliseconds(50);

  enum class Action {
    kNone,
    kPause,   // pause every partition
    kResume,  // resume every partition: the broker answers again, or nothing is left in flight
    kProbe,   // resume every partition for kProbeWindow; a later check() pauses them again
  };

  // A delivery report came, whatever its outcome. Called per report: a count, as a clock read
  // per report would cost more.
  void on_report() { ++reports_; }

  // Records went out while the guard was not watching: the wait for a report starts now. The
  // producer then calls check() every kTick until the queue is empty.
  void start(Clock::time_point now) { last_progress_ = now; }

  // One tick. `in_flight`: records are queued or in flight in librdkafka. When it is false the
  // guard stops watching until the next start().
  Action check(Clock::time_point now, bool in_flight) {
    if (reports_ != reports_seen_) {
      reports_seen_ = reports_;
      last_progress_ = now;
    }
    if (!in_flight) {
      if (!paused_) return Action::kNone;
      paused_ = false;
      return Action::kResume;
    }
    if (!paused_ && now - last_progress_ >= kStallAfter) {
      paused_ = true;
      paused_at_ = now;
      return Action::kPause;
    }
    if (paused_ && now - paused_at_ >= kProbeEvery) {
      paused_ = false;
      last_progress_ = now - kStallAfter + kProbeWindow;  // pause again after the window
      return Action::kProbe;
    }
    return Action::kNone;
  }

  // After delivery reports were served: a report while paused means the broker answers again.
  Action after_reports() {
    if (!paused_ || reports_ == reports_seen_) return Action::kNone;
    paused_ = false;
    return Action::kResume;
  }

  bool paused() const { return paused_; }
  // The last report check() saw, or start(): for the log line when pausing.
  Clock::time_point last_progress() const { return last_progress_; }

 private:
  bool paused_ = false;
  std::uint64_t reports_ = 0;       // delivery reports so far
  std::uint64_t reports_seen_ = 0;  // reports_ at the last check()
  Clock::time_point last_progress_;
  Clock::time_point paused_at_;
};

}  // namespace outbox::kafka
