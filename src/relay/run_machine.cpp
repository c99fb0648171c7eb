#include "outbox/relay/run_machine.hpp"

#include <stdexcept>
#include <string>

namespace outbox::relay {

std::string_view to_string(RunPhase phase) {
  switch (phase) {
    case RunPhase::kConnecting:
      return "connecting";
    case RunPhase::kStreaming:
      return "streaming";
    case RunPhase::kRewinding:
      return "rewinding";
    case RunPhase::kStopping:
      return "stopping";
    case RunPhase::kFailed:
      return "failed";
  }
  return "?";
}

bool RunMachine::allowed(RunPhase from, RunPhase to) {
  using P = RunPhase;
  if (from == P::kFailed) return false;  // terminal
  switch (to) {
    case P::kConnecting:
      // A session ended (lost, refused, a slot held by another relay): the next one; a rewind
      // done: the next session with new clients.
      return from == P::kConnecting || from == P::kStreaming || from == P::kRewinding;
    case P::kStreaming:
      return from == P::kConnecting;
    case P::kRewinding:
      // Exactly-once prepares its transactions after START_REPLICATION, and the sink may stop
      // while a session settles: a rewind may begin before the stream runs.
      return from == P::kConnecting || from == P::kStreaming;
    case P::kStopping:
      return from == P::kConnecting || from == P::kStreaming || from == P::kRewinding;
    case P::kFailed:
      return true;  // from anything but itself (above)
  }
  return false;
}

void RunMachine::to(RunPhase to) {
  if (!allowed(phase_, to)) {
    throw std::logic_error("relay life-cycle: no transition from " +
                           std::string(to_string(phase_)) + " to " + std::string(to_string(to)));
  }
  if (phase_ == RunPhase::kRewinding && to == RunPhase::kConnecting) rewind_answered_ = false;
  phase_ = to;
}

bool RunMachine::stream_started() {
  if (phase_ != RunPhase::kConnecting) return false;
  to(RunPhase::kStreaming);
  return true;
}

bool RunMachine::request_stop(Clock::time_point now, std::chrono::milliseconds timeout) {
  if (stop_requested_) return false;
  stop_requested_ = true;
  stop_read_until_ = now + timeout / 2;
  stop_deadline_ = now + timeout;
  if (phase_ != RunPhase::kFailed) to(RunPhase::kStopping);
  return true;
}

bool RunMachine::fail(Fatal fatal, bool broker_refused) {
  if (phase_ == RunPhase::kFailed) return false;
  to(RunPhase::kFailed);
  fatal_ = std::move(fatal);
  broker_refused_ = broker_refused;
  return true;
}

bool RunMachine::answer_rewind() {
  if (rewind_answered_) return false;
  rewind_answered_ = true;
  if (phase_ == RunPhase::kConnecting || phase_ == RunPhase::kStreaming) {
    to(RunPhase::kRewinding);
  }
  return true;
}

}  // namespace outbox::relay
