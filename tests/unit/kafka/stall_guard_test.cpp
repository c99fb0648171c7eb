// The stall guard's decisions: pause when reports stop while records are in flight, probe now
// and then while paused, resume as soon as the broker answers or nothing is left in flight.
#include "kafka/stall_guard.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <tuple>
#include <utility>

namespace outbox::kafka {
namespace {

using namespace std::chrono_literals;
using Action = StallGuard::Action;
using Clock = StallGuard::Clock;

constexpr bool kInFlight = true;
constexpr bool kEmpty = false;

// Ticks every kTick from `from` (exclusive) to `to` (inclusive) with records in flight and no
// report; the first action other than kNone and when it came.
std::pair<Action, Clock::time_point> tick_until(StallGuard& g, Clock::time_point from,
                                                Clock::time_point to) {
  for (auto t = from + StallGuard::kTick; t <= to; t += StallGuard::kTick) {
    if (Action a = g.check(t, kInFlight); a != Action::kNone) return {a, t};
  }
  return {Action::kNone, to};
}

// A guard that paused at the returned time: started at t0, no report for kStallAfter.
Clock::time_point paused_guard(StallGuard& g, Clock::time_point t0) {
  g.start(t0);
  auto [action, at] = tick_until(g, t0, t0 + 1s);
  EXPECT_EQ(action, Action::kPause);
  EXPECT_TRUE(g.paused());
  return at;
}

const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(StallGuard, NoPauseWhileReportsFlow) {
  StallGuard g;
  g.start(t0);
  for (auto t = t0 + StallGuard::kTick; t <= t0 + 10s; t += StallGuard::kTick) {
    g.on_report();
    ASSERT_EQ(g.check(t, kInFlight), Action::kNone) << "at +" << (t - t0) / 1ms << " ms";
  }
  EXPECT_FALSE(g.paused());
}

TEST(StallGuard, OneReportPerStallPeriodIsEnough) {
  // A slow broker that still answers is not stalled: 90 ms between reports never pauses.
  StallGuard g;
  g.start(t0);
  auto next_report = t0 + 90ms;
  for (auto t = t0 + 1ms; t <= t0 + 5s; t += 1ms) {
    if (t >= next_report) {
      g.on_report();
      next_report += 90ms;
    }
    if (t.time_since_epoch() % StallGuard::kTick == 0ms) {
      ASSERT_EQ(g.check(t, kInFlight), Action::kNone) << "at +" << (t - t0) / 1ms << " ms";
    }
  }
}

TEST(StallGuard, PausesOnceNoReportCameForStallAfter) {
  StallGuard g;
  g.start(t0);
  EXPECT_EQ(g.check(t0 + 99ms, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(t0 + StallGuard::kStallAfter, kInFlight), Action::kPause);
  EXPECT_TRUE(g.paused());
  EXPECT_EQ(g.last_progress(), t0) << "the log line says how long nothing came";
  EXPECT_EQ(g.check(t0 + 125ms, kInFlight), Action::kNone) << "paused once, not again per tick";
}

TEST(StallGuard, StallCountsFromTheLastReportSeen) {
  StallGuard g;
  g.start(t0);
  g.on_report();
  EXPECT_EQ(g.check(t0 + 75ms, kInFlight), Action::kNone);  // the report is seen at +75 ms
  EXPECT_EQ(g.check(t0 + 174ms, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(t0 + 175ms, kInFlight), Action::kPause);
}

TEST(StallGuard, ProbesEveryProbeEveryForProbeWindow) {
  StallGuard g;
  Clock::time_point paused_at = paused_guard(g, t0);
  for (int probe = 0; probe < 3; ++probe) {
    // Paused: nothing until kProbeEvery has passed.
    auto [action, at] = tick_until(g, paused_at, paused_at + 5s);
    ASSERT_EQ(action, Action::kProbe);
    EXPECT_EQ(at - paused_at, StallGuard::kProbeEvery);
    EXPECT_FALSE(g.paused()) << "the partitions run during the window";
    // No report during the window: paused again once it is over, not kStallAfter later.
    std::tie(action, paused_at) = tick_until(g, at, at + 5s);
    ASSERT_EQ(action, Action::kPause);
    EXPECT_EQ(paused_at - at, StallGuard::kProbeWindow);
  }
}

TEST(StallGuard, ProbeThatGetsAReportEndsThePause) {
  StallGuard g;
  Clock::time_point paused_at = paused_guard(g, t0);
  const auto probe_at = paused_at + StallGuard::kProbeEvery;
  ASSERT_EQ(g.check(probe_at, kInFlight), Action::kProbe);
  g.on_report();
  EXPECT_EQ(g.after_reports(), Action::kNone) << "not paused: nothing to resume";
  // Seen at the next tick: a full kStallAfter from there before pausing again.
  const auto seen_at = probe_at + StallGuard::kTick;
  EXPECT_EQ(g.check(seen_at, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(seen_at + 99ms, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(seen_at + StallGuard::kStallAfter, kInFlight), Action::kPause);
}

TEST(StallGuard, ResumesOnTheFirstReport) {
  StallGuard g;
  Clock::time_point paused_at = paused_guard(g, t0);
  EXPECT_EQ(g.after_reports(), Action::kNone) << "no report yet";
  EXPECT_EQ(g.check(paused_at + StallGuard::kTick, kInFlight), Action::kNone);
  g.on_report();
  EXPECT_EQ(g.after_reports(), Action::kResume);
  EXPECT_FALSE(g.paused());
  EXPECT_EQ(g.after_reports(), Action::kNone) << "resumed once";
  // The next tick sees the report: the stall clock restarts there.
  const auto seen_at = paused_at + 2 * StallGuard::kTick;
  EXPECT_EQ(g.check(seen_at, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(seen_at + StallGuard::kStallAfter, kInFlight), Action::kPause);
}

TEST(StallGuard, ResumesWhenTheQueueEmpties) {
  StallGuard g;
  Clock::time_point paused_at = paused_guard(g, t0);
  EXPECT_EQ(g.check(paused_at + StallGuard::kTick, kEmpty), Action::kResume);
  EXPECT_FALSE(g.paused());
  EXPECT_EQ(g.check(paused_at + 2 * StallGuard::kTick, kEmpty), Action::kNone);
}

TEST(StallGuard, EmptyQueueNeverPauses) {
  StallGuard g;
  g.start(t0);
  EXPECT_EQ(g.check(t0 + 10s, kEmpty), Action::kNone);
  EXPECT_FALSE(g.paused());
}

TEST(StallGuard, StartAfterIdleRestartsTheStallClock) {
  // The queue emptied; records go out again an hour later: no instant pause.
  StallGuard g;
  g.start(t0);
  ASSERT_EQ(g.check(t0 + 25ms, kEmpty), Action::kNone);
  const auto t1 = t0 + 1h;
  g.start(t1);
  EXPECT_EQ(g.check(t1 + 25ms, kInFlight), Action::kNone);
  EXPECT_EQ(g.check(t1 + StallGuard::kStallAfter, kInFlight), Action::kPause);
}

}  // namespace
}  // namespace outbox::kafka
