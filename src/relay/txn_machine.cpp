#include "outbox/relay/txn_machine.hpp"

#include <stdexcept>

namespace outbox::relay {

std::string_view to_string(TxnPhase phase) {
  switch (phase) {
    case TxnPhase::kUninitialised:
      return "uninitialised";
    case TxnPhase::kInitialising:
      return "initialising";
    case TxnPhase::kCheckpoint:
      return "checkpoint";
    case TxnPhase::kReady:
      return "ready";
    case TxnPhase::kOpen:
      return "open";
    case TxnPhase::kCommitting:
      return "committing";
    case TxnPhase::kAborting:
      return "aborting";
    case TxnPhase::kFenced:
      return "fenced";
  }
  return "?";
}

bool TxnMachine::allowed(TxnPhase from, TxnPhase to) {
  using P = TxnPhase;
  if (from == P::kFenced) return false;  // terminal
  switch (to) {
    case P::kUninitialised:
      // An init call that failed for now (a broker away): tried again from the start, the
      // producers already initialised kept. New producers go back through reset().
      return from == P::kInitialising;
    case P::kInitialising:
      // The first call, or a retry after a call that timed out.
      return from == P::kUninitialised;
    case P::kCheckpoint:
      return from == P::kInitialising;
    case P::kReady:
      // The checkpoint read, a commit done, an abort done.
      return from == P::kCheckpoint || from == P::kCommitting || from == P::kAborting;
    case P::kOpen:
      return from == P::kReady;
    case P::kCommitting:
      return from == P::kOpen;
    case P::kAborting:
      return from == P::kOpen || from == P::kCommitting;
    case P::kFenced:
      // A successor may fence the producers at any time after they met the coordinator.
      return from != P::kUninitialised;
  }
  return false;
}

void TxnMachine::to(TxnPhase to) {
  if (!allowed(phase_, to)) {
    throw std::logic_error("Kafka transaction cycle: no transition from " +
                           std::string(to_string(phase_)) + " to " + std::string(to_string(to)));
  }
  phase_ = to;
}

void TxnMachine::reset() {
  if (phase_ == TxnPhase::kFenced) {
    throw std::logic_error("Kafka transaction cycle: new producers after being fenced");
  }
  phase_ = TxnPhase::kUninitialised;
  initialised_ = 0;
}

}  // namespace outbox::relay
