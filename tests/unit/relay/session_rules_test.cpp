// The session's decisions without I/O (session_rules.hpp): the slot against the progress record
// at a start or reconnect, how far the slot may be told before and after that comparison, the
// stop sequence's choices, and the answers to the sink's reports.
#include "outbox/relay/session_rules.hpp"

#include <gtest/gtest.h>

namespace {

using outbox::pgoutput::Lsn;
using outbox::relay::answer_sink_stop;
using outbox::relay::compare_with_record;
using outbox::relay::deliveries_overdue;
using outbox::relay::delivery_watch_period;
using outbox::relay::final_check_wanted;
using outbox::relay::halt_on_rewind;
using outbox::relay::progress_flush_wanted;
using outbox::relay::reader_goes_on;
using outbox::relay::RecordFacts;
using outbox::relay::RecordVerdict;
using outbox::relay::SinkStop;
using outbox::relay::slot_confirm_bound;
using outbox::relay::SlotBound;
using outbox::relay::stream_start;
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

TEST(SessionRules, TheStreamStartsAtTheAcknowledgedPrefixWhenTheServerHasIt) {
  EXPECT_EQ(stream_start(true, at(300), at(500)), at(300));
  EXPECT_EQ(stream_start(true, at(500), at(500)), at(500));  // at the WAL's end
  // Past the server's WAL end (a restore) or the history broken (ghosts): the slot's own.
  EXPECT_EQ(stream_start(true, at(501), at(500)), Lsn{});
  EXPECT_EQ(stream_start(false, at(300), at(500)), Lsn{});
}

// ---- the sink's reports ----

TEST(SessionRules, AStoppedSinkIsAnsweredByItsCause) {
  // A fence wins over everything: the successor holds the transactional.id.
  EXPECT_EQ(answer_sink_stop(true, true, true), SinkStop::kFenced);
  EXPECT_EQ(answer_sink_stop(true, false, true), SinkStop::kFenced);
  // While stopping nothing is rewound any more: exit 1, in both modes.
  EXPECT_EQ(answer_sink_stop(false, true, false), SinkStop::kFail);
  EXPECT_EQ(answer_sink_stop(false, true, true), SinkStop::kFail);
  EXPECT_EQ(answer_sink_stop(false, false, true), SinkStop::kAbortTransaction);
  EXPECT_EQ(answer_sink_stop(false, false, false), SinkStop::kRewind);
}

TEST(SessionRules, ARewindHaltsOnlyASinkThatGoesOnAtLeastOnce) {
  EXPECT_TRUE(halt_on_rewind(false, false));  // a delivery timed out: the sink still sends
  EXPECT_FALSE(halt_on_rewind(false, true));  // a refused batch stopped it already
  EXPECT_FALSE(halt_on_rewind(true, false));  // exactly-once aborts its transaction instead
  EXPECT_FALSE(halt_on_rewind(true, true));
}

TEST(SessionRules, AReaderWaitingForDeliveriesGoesOnForAnyOfItsReasons) {
  EXPECT_FALSE(reader_goes_on(false, true, false, false));  // paused, above the low watermark
  EXPECT_TRUE(reader_goes_on(true, true, false, false));    // a commit is under way
  EXPECT_TRUE(reader_goes_on(false, false, false, false));  // not paused (a record sent alone)
  EXPECT_TRUE(reader_goes_on(false, true, true, false));    // the session ends
  EXPECT_TRUE(reader_goes_on(false, true, false, true));    // below the low watermark
}

TEST(SessionRules, TheDeliveryDeadlineIsLookedAtAFifthOfItBetween10MsAnd1s) {
  using std::chrono::milliseconds;
  EXPECT_EQ(delivery_watch_period(milliseconds(5000)), milliseconds(1000));
  EXPECT_EQ(delivery_watch_period(milliseconds(60'000)), milliseconds(1000));
  EXPECT_EQ(delivery_watch_period(milliseconds(1000)), milliseconds(200));
  EXPECT_EQ(delivery_watch_period(milliseconds(20)), milliseconds(10));
  EXPECT_EQ(delivery_watch_period(milliseconds(0)), milliseconds(10));
}

TEST(SessionRules, DeliveriesAreOverdueWithRecordsQueuedAndNoReportForTheTimeout) {
  using std::chrono::milliseconds;
  EXPECT_TRUE(deliveries_overdue(3, milliseconds(5000), milliseconds(5000)));
  EXPECT_TRUE(deliveries_overdue(1, milliseconds(9000), milliseconds(5000)));
  EXPECT_FALSE(deliveries_overdue(3, milliseconds(4999), milliseconds(5000)));
  EXPECT_FALSE(deliveries_overdue(0, milliseconds(9000), milliseconds(5000)));  // nothing queued
}

}  // namespace
