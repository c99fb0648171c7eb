// The exactly-once Kafka transaction cycle as one state machine (--delivery exactly-once): one
// enum of phases and one function that checks every transition, as librdkafka's transaction
// manager does. The relay drives it (init both transactional producers, read the checkpoint,
// begin, commit, abort, rewind); an invalid transition is a broken invariant (std::logic_error,
// exit 1), never silently taken. No I/O: unit-tested in tests/unit/relay/txn_machine_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace outbox::relay {

enum class TxnPhase {
  kUninitialised,  // producers made; init_transactions not yet done on both
  kInitialising,   // an init_transactions call is under way (on the worker thread)
  kCheckpoint,     // both initialised; the last committed checkpoint is being read
  kReady,          // initialised, checkpoint read, no Kafka transaction open
  kOpen,           // a Kafka transaction is open (begin_transaction done)
  kCommitting,     // the checkpoint record produced; waiting for reports, then the commit call
  kAborting,       // an abort call is under way
  kFenced,         // a newer producer of the transactional.id took over: terminal
};

std::string_view to_string(TxnPhase phase);

class TxnMachine {
 public:
  TxnPhase phase() const { return phase_; }
  // Whether `from` -> `to` is a transition of the cycle.
  static bool allowed(TxnPhase from, TxnPhase to);
  // Moves to `to`; throws std::logic_error naming both phases when the transition is not one of
  // the cycle's.
  void to(TxnPhase to);
  // New producers (a rewind): back to the start from any phase but kFenced.
  void reset();

  // Shorthands the relay asks.
  bool open() const { return phase_ == TxnPhase::kOpen || phase_ == TxnPhase::kCommitting; }
  bool ready() const {
    return phase_ == TxnPhase::kReady || phase_ == TxnPhase::kOpen ||
           phase_ == TxnPhase::kCommitting;
  }
  bool committing() const { return phase_ == TxnPhase::kCommitting; }
  bool checkpoint_read() const { return checkpoint_read_; }
  void set_checkpoint_read() { checkpoint_read_ = true; }
  // How many of the two producers are initialised (librdkafka refuses a second init, so a retry
  // after the first succeeded goes on with the second).
  int initialised() const { return initialised_; }
  void producer_initialised() { ++initialised_; }

 private:
  TxnPhase phase_ = TxnPhase::kUninitialised;
  int initialised_ = 0;
  bool checkpoint_read_ = false;  // once per process: a rewind does not read it again
};

}  // namespace outbox::relay
