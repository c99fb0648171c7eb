// The relay's pace between sessions (reconnect.hpp): the backoff's bounds, a standby's steady
// pace logged once, the count started again by a session that streamed, and rewinds without
// progress backing off.
#include "outbox/relay/reconnect.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using outbox::pgoutput::Lsn;
using outbox::relay::Reconnect;
using std::chrono::milliseconds;

// Every draw of `attempt`'s backoff lies in [base / 2, base]; many draws reach both halves.
void expect_backoff_within(Reconnect& r, int attempt, std::int64_t base) {
  bool low = false;
  bool high = false;
  for (int i = 0; i < 200; ++i) {
    const milliseconds d = r.backoff(attempt);
    ASSERT_GE(d.count(), base / 2) << "attempt " << attempt;
    ASSERT_LE(d.count(), base) << "attempt " << attempt;
    (d.count() < base * 3 / 4 ? low : high) = true;
  }
  EXPECT_TRUE(low && high) << "attempt " << attempt << ": jittered over the whole range";
}

TEST(Reconnect, TheBackoffDoublesFrom200MsUpTo30sWithJitter) {
  Reconnect r(42);
  expect_backoff_within(r, 0, 200);
  expect_backoff_within(r, 1, 400);
  expect_backoff_within(r, 4, 3200);
  expect_backoff_within(r, 7, 25'600);
  expect_backoff_within(r, 8, 30'000);  // 51,200 capped
  expect_backoff_within(r, 30, 30'000);
}

TEST(Reconnect, FailuresInARowCountUpAndASessionThatStreamedStartsAgain) {
  Reconnect r(1);
  Reconnect::Next n = r.after_session(false, false, false);
  EXPECT_EQ(n.attempt, 1);
  EXPECT_LE(n.delay, milliseconds(200));
  n = r.after_session(false, false, false);
  EXPECT_EQ(n.attempt, 2);
  EXPECT_GE(n.delay, milliseconds(200));  // attempt 1's: [200, 400]
  EXPECT_LE(n.delay, milliseconds(400));
  n = r.after_session(true, false, false);  // streamed, then lost
  EXPECT_EQ(n.attempt, 1);
  EXPECT_LE(n.delay, milliseconds(200));
}

TEST(Reconnect, AStandbyWaitsASteadySecondLoggedOnceAndCountsNothing) {
  Reconnect r(7);
  EXPECT_FALSE(r.standby_logged());
  EXPECT_TRUE(r.standby_first());
  EXPECT_FALSE(r.standby_first()) << "logged once";
  for (int i = 0; i < 20; ++i) {
    const Reconnect::Next n = r.after_session(false, false, true);
    EXPECT_GE(n.delay, milliseconds(500));
    EXPECT_LE(n.delay, milliseconds(1000));
    EXPECT_EQ(n.attempt, 0) << "a standby is no failure";
  }
  EXPECT_TRUE(r.standby_logged());
  // It took over and streamed: a later standby is logged again.
  r.after_session(true, false, false);
  EXPECT_FALSE(r.standby_logged());
  EXPECT_TRUE(r.standby_first());
}

TEST(Reconnect, RewindsWithoutProgressBackOffLikeFailures) {
  Reconnect r(3);
  EXPECT_FALSE(r.rewound_without_progress(Lsn{100}));  // the first: 100 > 0
  EXPECT_TRUE(r.rewound_without_progress(Lsn{100}));   // nothing confirmed since
  EXPECT_TRUE(r.rewound_without_progress(Lsn{90}));
  EXPECT_FALSE(r.rewound_without_progress(Lsn{150}));
  // A session that streamed but ended in a rewind without progress counts on.
  EXPECT_EQ(r.after_session(true, true, false).attempt, 1);
  EXPECT_EQ(r.after_session(true, true, false).attempt, 2);
  EXPECT_EQ(r.after_session(true, false, false).attempt, 1);  // progress: from the start
}

}  // namespace
