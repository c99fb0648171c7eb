// The acknowledged-prefix watermark: what may be confirmed, given deliveries in any order.
#include "outbox/relay/ack_tracker.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace outbox::relay {
namespace {

Lsn lsn(std::uint64_t v) { return Lsn{v}; }

TEST(AckTracker, NothingConfirmedBeforeAcknowledgement) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.add_event(a, 10);
  t.add_event(a, 20);
  t.commit(a, lsn(110));
  EXPECT_EQ(t.confirmable(), lsn(0));
  EXPECT_EQ(t.inflight_events(), 2u);
  EXPECT_EQ(t.inflight_bytes(), 30u);
  t.ack(a, 10);
  EXPECT_EQ(t.confirmable(), lsn(0)) << "one event of the transaction is still unacknowledged";
  t.ack(a, 20);
  EXPECT_EQ(t.confirmable(), lsn(110));
  EXPECT_TRUE(t.idle());
  EXPECT_EQ(t.inflight_bytes(), 0u);
}

TEST(AckTracker, LaterTransactionAckedFirstWaitsForEarlier) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.add_event(a, 1);
  t.commit(a, lsn(110));
  auto b = t.begin(lsn(200));
  t.add_event(b, 1);
  t.commit(b, lsn(210));
  t.ack(b, 1);  // another partition answered first
  EXPECT_EQ(t.confirmable(), lsn(0));
  t.ack(a, 1);
  EXPECT_EQ(t.confirmable(), lsn(210));
}

TEST(AckTracker, OpenTransactionIsNeverConfirmed) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.add_event(a, 1);
  t.ack(a, 1);
  EXPECT_EQ(t.confirmable(), lsn(0)) << "Commit has not arrived yet";
  EXPECT_FALSE(t.advance_idle(lsn(500)))
      << "keepalive must not confirm while a transaction is open";
  t.commit(a, lsn(120));
  EXPECT_EQ(t.confirmable(), lsn(120));
}

TEST(AckTracker, EmptyTransactionConfirmsAtCommit) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.commit(a, lsn(130));
  EXPECT_EQ(t.confirmable(), lsn(130));
}

TEST(AckTracker, IdleKeepaliveAdvancesOnlyWhenNothingInFlight) {
  AckTracker t;
  EXPECT_TRUE(t.advance_idle(lsn(50)));
  EXPECT_EQ(t.confirmable(), lsn(50));
  EXPECT_FALSE(t.advance_idle(lsn(40))) << "never moves backwards";
  auto a = t.begin(lsn(100));
  t.add_event(a, 1);
  t.commit(a, lsn(110));
  EXPECT_FALSE(t.advance_idle(lsn(900)));
  EXPECT_EQ(t.confirmable(), lsn(50));
  t.ack(a, 1);
  EXPECT_TRUE(t.advance_idle(lsn(900)));
  EXPECT_EQ(t.confirmable(), lsn(900));
}

TEST(AckTracker, AbandonedTransactionBlocksUntilAckedAndNeverMovesWatermark) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.add_event(a, 1);
  t.abandon_open();  // connection lost mid-transaction; the server sends it again
  auto b = t.begin(lsn(100));
  t.add_event(b, 1);
  t.commit(b, lsn(110));
  t.ack(b, 1);
  EXPECT_EQ(t.confirmable(), lsn(0)) << "the abandoned copy's event is still in flight";
  t.ack(a, 1);
  EXPECT_EQ(t.confirmable(), lsn(110));
}

TEST(AckTracker, ForgetUnacknowledgedKeepsThePrefixAndStartsAfresh) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  t.add_event(a, 5);
  t.commit(a, lsn(110));
  auto b = t.begin(lsn(200));
  t.add_event(b, 7);
  t.add_event(b, 7);
  t.commit(b, lsn(210));
  t.ack(a, 5);
  t.ack(b, 7);  // half of b: b is not confirmable
  auto c = t.begin(lsn(300));
  t.add_event(c, 9);
  EXPECT_EQ(t.confirmable(), lsn(110));
  t.forget_unacknowledged();
  EXPECT_EQ(t.confirmable(), lsn(110)) << "what was acknowledged stays confirmable";
  EXPECT_TRUE(t.idle());
  EXPECT_FALSE(t.has_open());
  EXPECT_EQ(t.inflight_events(), 0u);
  EXPECT_EQ(t.inflight_bytes(), 0u);
  EXPECT_THROW(t.ack(b, 7), std::logic_error) << "a report for a forgotten transaction";
  // The stream sends b and c again from the slot's position: tracked anew.
  auto b2 = t.begin(lsn(200));
  t.add_event(b2, 7);
  t.add_event(b2, 7);
  t.commit(b2, lsn(210));
  t.ack(b2, 7);
  EXPECT_EQ(t.confirmable(), lsn(110));
  t.ack(b2, 7);
  EXPECT_EQ(t.confirmable(), lsn(210));
}

TEST(AckTracker, BrokenInvariantsThrow) {
  AckTracker t;
  auto a = t.begin(lsn(100));
  EXPECT_THROW(t.begin(lsn(200)), std::logic_error);
  EXPECT_THROW(t.ack(a, 1), std::logic_error);
  EXPECT_THROW(t.ack(a + 5, 1), std::logic_error);
  t.commit(a, lsn(110));
  EXPECT_THROW(t.add_event(a, 1), std::logic_error);
}

// Many transactions, deliveries in random order: at every step the confirmable position is the
// end LSN of the longest fully acknowledged prefix, computed here the slow way.
TEST(AckTracker, RandomOutOfOrderAcknowledgementsKeepThePrefixRule) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 20; ++round) {
    AckTracker t;
    struct Ev {
      AckTracker::TxnSeq txn;
      int index;
    };
    std::vector<Ev> events;
    std::vector<int> pending;
    std::vector<Lsn> ends;
    for (int i = 0; i < 200; ++i) {
      auto txn = t.begin(lsn(1000 + i * 10));
      int n = static_cast<int>(rng() % 4);  // 0..3 events; empty ones confirm at once
      for (int e = 0; e < n; ++e) {
        t.add_event(txn, 1);
        events.push_back({txn, i});
      }
      pending.push_back(n);
      t.commit(txn, lsn(1000 + i * 10 + 5));
      ends.push_back(lsn(1000 + i * 10 + 5));
    }
    std::shuffle(events.begin(), events.end(), rng);
    Lsn last;
    for (const Ev& ev : events) {
      t.ack(ev.txn, 1);
      --pending[ev.index];
      Lsn expected;
      for (std::size_t i = 0; i < pending.size() && pending[i] == 0; ++i) expected = ends[i];
      ASSERT_EQ(t.confirmable(), expected);
      ASSERT_GE(t.confirmable(), last) << "watermark moved backwards";
      last = t.confirmable();
    }
    EXPECT_EQ(t.confirmable(), ends.back());
    EXPECT_EQ(t.inflight_events(), 0u);
  }
}

}  // namespace
}  // namespace outbox::relay
