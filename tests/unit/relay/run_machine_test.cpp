// The relay's life-cycle transitions: every allowed one, every other refused; what the phases
// carry (the failure, a stop asked for, the rewind's answer).
#include "outbox/relay/run_machine.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

using outbox::relay::Fatal;
using outbox::relay::RunMachine;
using outbox::relay::RunPhase;
using P = RunPhase;

const std::vector<P> kAll = {P::kConnecting, P::kStreaming, P::kRewinding, P::kStopping,
                             P::kFailed};

// The life-cycle, written out once: anything not here is refused.
const std::set<std::pair<P, P>> kAllowed = {
    {P::kConnecting, P::kConnecting},  // a session ended before streaming: the next one
    {P::kConnecting, P::kStreaming},   // START_REPLICATION succeeded
    {P::kConnecting, P::kRewinding},   // the sink stopped while the session settled
    {P::kConnecting, P::kStopping},
    {P::kConnecting, P::kFailed},
    {P::kStreaming, P::kConnecting},  // the session was lost: the next one
    {P::kStreaming, P::kRewinding},   // a refused batch, a timeout, an abort
    {P::kStreaming, P::kStopping},
    {P::kStreaming, P::kFailed},
    {P::kRewinding, P::kConnecting},  // new clients: the next session
    {P::kRewinding, P::kStopping},    // a stop wins over the rewind
    {P::kRewinding, P::kFailed},
    {P::kStopping, P::kFailed},  // a failure while stopping (its exit code wins)
};

TEST(RunMachine, EveryTransitionIsCheckedAgainstTheLifeCycle) {
  for (const P from : kAll) {
    for (const P to : kAll) {
      EXPECT_EQ(RunMachine::allowed(from, to), kAllowed.count({from, to}) == 1)
          << to_string(from) << " -> " << to_string(to);
    }
  }
}

// Drives a machine to `phase` along allowed transitions.
RunMachine at(P phase) {
  RunMachine m;
  switch (phase) {
    case P::kConnecting:
      break;
    case P::kStreaming:
      m.to(P::kStreaming);
      break;
    case P::kRewinding:
      m.to(P::kStreaming);
      m.answer_rewind();
      break;
    case P::kStopping:
      m.to(P::kStreaming);
      m.to(P::kStopping);
      break;
    case P::kFailed:
      m.to(P::kFailed);
      break;
  }
  EXPECT_EQ(m.phase(), phase);
  return m;
}

TEST(RunMachine, ARefusedTransitionThrowsNamingBothPhasesAndChangesNothing) {
  for (const P from : kAll) {
    for (const P to : kAll) {
      if (RunMachine::allowed(from, to)) continue;
      RunMachine m = at(from);
      try {
        m.to(to);
        ADD_FAILURE() << to_string(from) << " -> " << to_string(to) << " was taken";
      } catch (const std::logic_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(std::string(to_string(from))), std::string::npos) << what;
        EXPECT_NE(what.find(std::string(to_string(to))), std::string::npos) << what;
      }
      EXPECT_EQ(m.phase(), from);
    }
  }
}

TEST(RunMachine, TheFirstFailureWinsAndEndsEverything) {
  RunMachine m = at(P::kStreaming);
  EXPECT_TRUE(m.fail({3, "poison"}));
  EXPECT_FALSE(m.fail({1, "later"}, true));
  EXPECT_TRUE(m.failed());
  EXPECT_TRUE(m.ending());
  EXPECT_FALSE(m.stopping());
  ASSERT_TRUE(m.fatal());
  EXPECT_EQ(m.fatal()->code, 3);
  EXPECT_EQ(m.fatal()->message, "poison");
  EXPECT_FALSE(m.broker_refused()) << "a later failure's refusal is not the relay's";
}

TEST(RunMachine, ARefusalIsCarriedByTheFailure) {
  RunMachine m;
  EXPECT_TRUE(m.fail({1, "Kafka broker authentication refused"}, true));
  EXPECT_TRUE(m.broker_refused());
}

TEST(RunMachine, AStopIsAskedForOnceAndAFailureAfterItKeepsItsDeadlines) {
  RunMachine m = at(P::kStreaming);
  const RunMachine::Clock::time_point t0{std::chrono::seconds(1000)};
  EXPECT_TRUE(m.request_stop(t0, std::chrono::milliseconds(30'000)));
  EXPECT_EQ(m.phase(), P::kStopping);
  EXPECT_TRUE(m.stopping());
  // Half the timeout to read to the end of the transaction at hand, all of it for the stop.
  EXPECT_EQ(m.stop_read_until(), t0 + std::chrono::seconds(15));
  EXPECT_EQ(m.stop_deadline(), t0 + std::chrono::seconds(30));
  EXPECT_FALSE(m.request_stop(t0 + std::chrono::seconds(5), std::chrono::milliseconds(30'000)))
      << "a second SIGTERM does nothing";
  EXPECT_EQ(m.stop_deadline(), t0 + std::chrono::seconds(30)) << "nor moves the deadline";
  EXPECT_TRUE(m.fail({1, "fatal error while stopping"}));
  EXPECT_FALSE(m.stopping());
  EXPECT_TRUE(m.stop_requested());
  EXPECT_EQ(m.stop_deadline(), t0 + std::chrono::seconds(30));
}

TEST(RunMachine, AStopAfterAFailureIsRecordedOnly) {
  RunMachine m = at(P::kFailed);
  const RunMachine::Clock::time_point t0{std::chrono::seconds(1000)};
  EXPECT_TRUE(m.request_stop(t0, std::chrono::milliseconds(10'000)));
  EXPECT_EQ(m.stop_deadline(), t0 + std::chrono::seconds(10)) << "the failure's end is bounded";
  EXPECT_EQ(m.phase(), P::kFailed);
  EXPECT_TRUE(m.stop_requested());
}

TEST(RunMachine, ARewindIsAnsweredOnceUntilItIsDone) {
  RunMachine m = at(P::kStreaming);
  EXPECT_TRUE(m.answer_rewind());
  EXPECT_EQ(m.phase(), P::kRewinding);
  EXPECT_FALSE(m.answer_rewind()) << "every later report of the same rewind";
  m.to(P::kConnecting);  // new clients
  EXPECT_FALSE(m.rewind_answered());
  EXPECT_TRUE(m.answer_rewind()) << "the next rewind";
  EXPECT_EQ(m.phase(), P::kRewinding);
}

TEST(RunMachine, ARewindWhileStoppingIsAnsweredOnceAndTheStopGoesOn) {
  RunMachine m = at(P::kStopping);
  EXPECT_TRUE(m.answer_rewind());
  EXPECT_EQ(m.phase(), P::kStopping);
  EXPECT_FALSE(m.answer_rewind()) << "the stop sequence's waits are not cut short again";
}

TEST(RunMachine, AStopDuringARewindKeepsItsAnswer) {
  RunMachine m = at(P::kRewinding);
  ASSERT_TRUE(m.rewind_answered());
  EXPECT_TRUE(m.request_stop(RunMachine::Clock::now(), std::chrono::milliseconds(30'000)));
  EXPECT_EQ(m.phase(), P::kStopping);
  EXPECT_FALSE(m.answer_rewind());
}

TEST(RunMachine, ARewindBeforeTheStreamRunsIsOneToo) {
  RunMachine m;
  EXPECT_TRUE(m.answer_rewind());
  EXPECT_EQ(m.phase(), P::kRewinding);
}

TEST(RunMachine, TheStreamStartsOnlyFromConnectingAndAnythingMeanwhileKeepsItsPhase) {
  RunMachine m;
  EXPECT_TRUE(m.stream_started());
  EXPECT_EQ(m.phase(), P::kStreaming);
  EXPECT_FALSE(m.stream_started()) << "started already";
  EXPECT_EQ(m.phase(), P::kStreaming);
  // A stop, a failure or a rewind while the session was set up: START_REPLICATION changes none.
  for (const P meanwhile : {P::kStopping, P::kFailed, P::kRewinding}) {
    RunMachine n = at(meanwhile);
    EXPECT_FALSE(n.stream_started());
    EXPECT_EQ(n.phase(), meanwhile);
  }
}

}  // namespace
