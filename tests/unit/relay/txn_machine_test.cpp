// The exactly-once transaction cycle's transitions: every allowed one, every other refused.
#include "outbox/relay/txn_machine.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

using outbox::relay::TxnMachine;
using outbox::relay::TxnPhase;
using P = TxnPhase;

const std::vector<P> kAll = {P::kUninitialised, P::kInitialising, P::kCheckpoint, P::kReady,
                             P::kOpen,          P::kCommitting,   P::kAborting,   P::kFenced};

// The cycle, written out once: anything not here is refused.
const std::set<std::pair<P, P>> kAllowed = {
    {P::kUninitialised, P::kInitialising},  // init_transactions called
    {P::kInitialising, P::kUninitialised},  // it failed for now (broker away): retried
    {P::kInitialising, P::kCheckpoint},     // both producers initialised
    {P::kInitialising, P::kFenced},
    {P::kCheckpoint, P::kReady},  // checkpoint read
    {P::kCheckpoint, P::kFenced},
    {P::kReady, P::kFenced},
    {P::kReady, P::kOpen},           // begin_transaction
    {P::kOpen, P::kCommitting},      // the commit begins
    {P::kOpen, P::kAborting},        // the session ends inside a PostgreSQL transaction
    {P::kOpen, P::kFenced},          // a fatal producer error: fenced
    {P::kCommitting, P::kReady},     // committed
    {P::kCommitting, P::kAborting},  // a record or the commit failed
    {P::kCommitting, P::kFenced},    // the commit learnt of a successor
    {P::kAborting, P::kReady},       // aborted
    {P::kAborting, P::kFenced},
};

TEST(TxnMachine, EveryTransitionIsCheckedAgainstTheCycle) {
  for (const P from : kAll) {
    for (const P to : kAll) {
      EXPECT_EQ(TxnMachine::allowed(from, to), kAllowed.count({from, to}) == 1)
          << to_string(from) << " -> " << to_string(to);
    }
  }
}

// Drives a machine to `phase` along allowed transitions.
TxnMachine at(P phase) {
  TxnMachine m;
  const std::vector<P> path = {P::kInitialising, P::kCheckpoint, P::kReady, P::kOpen,
                               P::kCommitting};
  if (phase == P::kUninitialised) return m;
  if (phase == P::kAborting || phase == P::kFenced) {
    for (const P p : {P::kInitialising, P::kCheckpoint, P::kReady, P::kOpen}) m.to(p);
    m.to(phase);
    return m;
  }
  for (const P p : path) {
    m.to(p);
    if (p == phase) break;
  }
  return m;
}

TEST(TxnMachine, InvalidTransitionThrowsNamingBothPhases) {
  for (const P from : kAll) {
    for (const P to : kAll) {
      TxnMachine m = at(from);
      ASSERT_EQ(m.phase(), from);
      if (kAllowed.count({from, to}) == 1) {
        EXPECT_NO_THROW(m.to(to)) << to_string(from) << " -> " << to_string(to);
        EXPECT_EQ(m.phase(), to);
      } else {
        try {
          m.to(to);
          ADD_FAILURE() << to_string(from) << " -> " << to_string(to) << " was accepted";
        } catch (const std::logic_error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find(std::string(to_string(from))), std::string::npos) << what;
          EXPECT_NE(what.find(std::string(to_string(to))), std::string::npos) << what;
        }
        EXPECT_EQ(m.phase(), from) << "a refused transition must not move the machine";
      }
    }
  }
}

TEST(TxnMachine, ACycleCommitsThenOpensTheNextTransaction) {
  TxnMachine m;
  m.to(P::kInitialising);
  m.producer_initialised();
  m.to(P::kUninitialised);  // the second init timed out: the broker is away
  EXPECT_EQ(m.initialised(), 1) << "the first producer stays initialised";
  m.to(P::kInitialising);
  m.producer_initialised();
  m.to(P::kCheckpoint);
  EXPECT_FALSE(m.ready());
  m.set_checkpoint_read();
  m.to(P::kReady);
  EXPECT_TRUE(m.ready());
  EXPECT_FALSE(m.open());
  m.to(P::kOpen);
  EXPECT_TRUE(m.open());
  m.to(P::kCommitting);
  EXPECT_TRUE(m.committing());
  EXPECT_TRUE(m.open());
  m.to(P::kReady);
  m.to(P::kOpen);
  EXPECT_TRUE(m.open());
}

TEST(TxnMachine, ResetAfterARewindKeepsTheCheckpointButNotTheProducers) {
  TxnMachine m = at(P::kAborting);
  m.set_checkpoint_read();
  m.producer_initialised();
  m.reset();
  EXPECT_EQ(m.phase(), P::kUninitialised);
  EXPECT_EQ(m.initialised(), 0);
  EXPECT_TRUE(m.checkpoint_read()) << "read once per process";
}

TEST(TxnMachine, FencedIsTerminal) {
  TxnMachine m = at(P::kFenced);
  for (const P to : kAll) EXPECT_THROW(m.to(to), std::logic_error) << to_string(to);
  EXPECT_THROW(m.reset(), std::logic_error);
}

}  // namespace
