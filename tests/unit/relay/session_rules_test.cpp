// The session's decisions without I/O (session_rules.hpp): the slot against the progress record
// at a start or reconnect, how far the slot may be told before and after that comparison, and
// the stop sequence's choices.
#include "outbox/relay/session_rules.hpp"

#include <gtest/gtest.h>

namespace {

using outbox::pgoutput::Lsn;
using outbox::relay::compare_with_record;
using outbox::relay::final_check_wanted;
using outbox::relay::progress_flush_wanted;
using outbox::relay::RecordFacts;
using outbox::relay::RecordVerdict;
using outbox::relay::slot_confirm_bound;
using outbox::relay::SlotBound;
using outbox::relay::transaction_at_end;
using outbox::relay::TxnAtEnd;
using outbox::relay::TxnEnd;

Lsn at(std::uint64_t v) { return Lsn{v}; }

// A slot at 100 on a server whose WAL ends at 500, timeline 2; the record at `recorded`.
RecordFacts facts(std::optional<Lsn> recorded, std::optional<std::uint32_t> timeline = 2) {
  return {recorded, timeline, at(100), at(500), 2, false};
}

TEST(SessionRules, NoRecordIsAFirstStart) {
  EXPECT_EQ(compare_with_record(facts(std::nullopt)), RecordVerdict::kNoRecord);
  RecordFacts ahead = facts(std::nullopt);
  ahead.slot_confirmed = at(10'000);  // nothing to compare with, however far the slot is
  EXPECT_EQ(compare_with_record(ahead), RecordVerdict::kNoRecord);
}

TEST(SessionRules, ASlotNotAheadOfTheRecordAgrees) {
  EXPECT_EQ(compare_with_record(facts(at(100))), RecordVerdict::kAgrees);  // equal
  EXPECT_EQ(compare_with_record(facts(at(300))), RecordVerdict::kAgrees);  // the slot behind
  EXPECT_EQ(compare_with_record(facts(at(500))), RecordVerdict::kAgrees);  // at the WAL's end
}

TEST(SessionRules, ASlotConfirmedPastTheRecordIsALoss) {
  EXPECT_EQ(compare_with_record(facts(at(99))), RecordVerdict::kSlotAhead);
  EXPECT_EQ(compare_with_record(facts(at(0))), RecordVerdict::kSlotAhead);
}

TEST(SessionRules, AServerWhoseWalEndsBeforeTheRecordOnItsTimelineIsALoss) {
  EXPECT_EQ(compare_with_record(facts(at(501))), RecordVerdict::kServerBehind);
  // The server's check comes first: a restored server's slot says nothing.
  RecordFacts both = facts(at(501));
  both.slot_confirmed = at(600);
  EXPECT_EQ(compare_with_record(both), RecordVerdict::kServerBehind);
}

TEST(SessionRules, TheServersWalEndBindsOnlyOnTheRecordsTimelineAndNotOnAStandby) {
  // Another timeline (a promotion since): the WAL end is not compared; the slot still is.
  EXPECT_EQ(compare_with_record(facts(at(501), 1)), RecordVerdict::kAgrees);
  // A record of an older relay names no timeline.
  EXPECT_EQ(compare_with_record(facts(at(501), std::nullopt)), RecordVerdict::kAgrees);
  // On a hot standby the WAL end is the replay position: it says nothing of a restore.
  RecordFacts standby = facts(at(501));
  standby.on_standby = true;
  EXPECT_EQ(compare_with_record(standby), RecordVerdict::kAgrees);
  standby.recorded = at(50);
  EXPECT_EQ(compare_with_record(standby), RecordVerdict::kSlotAhead);
}

TEST(SessionRules, WithoutAProgressRecordTheSlotIsToldTheConfirmablePosition) {
  EXPECT_EQ(slot_confirm_bound(at(900), {false, false, at(100), at(0)}), at(900));
  EXPECT_EQ(slot_confirm_bound(at(900), {false, true, at(100), at(200)}), at(900));
}

// 25b937c: until the comparison passed, the slot stays where the session found it, whatever
// the record says (a record ahead of a restored server's WAL bounds nothing).
TEST(SessionRules, UntilComparedTheSlotStaysWhereTheSessionFoundIt) {
  EXPECT_EQ(slot_confirm_bound(at(900), {true, false, at(100), at(5'000)}), at(100));
  EXPECT_EQ(slot_confirm_bound(at(50), {true, false, at(100), at(5'000)}), at(50));
}

TEST(SessionRules, OnceComparedTheSlotFollowsTheStoredRecord) {
  EXPECT_EQ(slot_confirm_bound(at(900), {true, true, at(100), at(700)}), at(700));
  EXPECT_EQ(slot_confirm_bound(at(600), {true, true, at(100), at(700)}), at(600));
}

TEST(SessionRules, AtTheEndWholeTransactionsCommitAndAPartIsAborted) {
  EXPECT_EQ(transaction_at_end({false, false, false, true, 3, false}), TxnEnd::kLeave);
  EXPECT_EQ(transaction_at_end({true, false, false, true, 3, false}), TxnEnd::kCommit);
  // A failure or a rewind never commits: what the open transaction holds is aborted.
  EXPECT_EQ(transaction_at_end({true, true, false, true, 3, false}), TxnEnd::kAbort);
  EXPECT_EQ(transaction_at_end({true, false, true, true, 3, false}), TxnEnd::kAbort);
  // Not due (a PostgreSQL transaction is cut): aborted when it holds records or is inside one.
  EXPECT_EQ(transaction_at_end({true, false, false, false, 0, true}), TxnEnd::kAbort);
  EXPECT_EQ(transaction_at_end({true, false, false, false, 2, false}), TxnEnd::kAbort);
  EXPECT_EQ(transaction_at_end({true, false, false, false, 0, false}), TxnEnd::kLeave);
}

TEST(SessionRules, TheFinalCheckRunsAtAStopOrAPoisonEventOnly) {
  EXPECT_TRUE(final_check_wanted(true, false, false, true));
  EXPECT_TRUE(final_check_wanted(false, true, false, true));
  EXPECT_FALSE(final_check_wanted(false, false, false, true));  // another failure (exit 5, ...)
  EXPECT_FALSE(final_check_wanted(true, false, true, true));    // a rewind
  EXPECT_FALSE(final_check_wanted(true, false, false, false));  // nothing past the last check
}

TEST(SessionRules, TheProgressIsFlushedAtTheRelaysEndWhenBehind) {
  EXPECT_TRUE(progress_flush_wanted(true, false, true, at(200), at(100)));
  EXPECT_FALSE(progress_flush_wanted(false, false, true, at(200), at(100)));  // nothing recorded
  EXPECT_FALSE(progress_flush_wanted(true, true, true, at(200), at(100)));    // broker refused
  EXPECT_FALSE(progress_flush_wanted(true, false, false, at(200), at(100)));  // a rewind's session
  EXPECT_FALSE(progress_flush_wanted(true, false, true, at(100), at(100)));   // recorded already
}

}  // namespace
