// The relay's life-cycle as one state machine, as TxnMachine is the exactly-once cycle's: one
// enum of phases and one function that checks every transition. Relay::Impl drives it (a
// session set up, the stream started, a rewind, a stop, a failure); an invalid transition is a
// broken invariant (std::logic_error, exit 1), never silently taken. Beside the phase it keeps
// what the phases carry: the failure (exit code, message; the broker refused the relay's
// credentials), whether a stop was asked for and its deadlines (they hold even when the relay
// failed since), and whether the relay answered the rewind under way (once: halting the sink,
// waking every wait). No I/O: unit-tested in tests/unit/relay/run_machine_test.cpp.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "outbox/relay/pipeline.hpp"

namespace outbox::relay {

enum class RunPhase {
  // A session is being set up (connect, identify, publication and slot, check, settle), or the
  // relay waits to reconnect after one ended. The first phase.
  kConnecting,
  // START_REPLICATION succeeded: the session holds the slot and streams.
  kStreaming,
  // The Pipeline began a rewind (a refused batch, a lost connection of the sink, a delivery
  // that timed out, an aborted transaction) and the relay answered it: the session ends, the
  // sink's clients are made anew, then kConnecting.
  kRewinding,
  // A stop was asked for (SIGTERM): the transaction at hand is read to its end, deliveries
  // flushed, the last position confirmed, the copy ended.
  kStopping,
  // A fatal error: the relay ends with its exit code. Terminal.
  kFailed,
};

std::string_view to_string(RunPhase phase);

class RunMachine {
 public:
  using Clock = std::chrono::steady_clock;

  RunPhase phase() const { return phase_; }
  // Whether `from` -> `to` is a transition of the life-cycle.
  static bool allowed(RunPhase from, RunPhase to);
  // Moves to `to`; throws std::logic_error naming both phases when the transition is not one of
  // the life-cycle's. The rewind's answer is cleared when a rewind ends (kRewinding ->
  // kConnecting).
  void to(RunPhase to);

  // START_REPLICATION succeeded: kConnecting -> kStreaming, true. A stop, a failure or a rewind
  // that came while the session was set up keeps its phase (false): the stream loop then ends at
  // once.
  bool stream_started();
  // A stop is asked for at `now`, with --shutdown-timeout `timeout`: kStopping, from any phase
  // but kFailed (there, only recorded: the stop's deadlines apply to the failure's end). Its
  // deadlines: half the timeout for reading to the end of the transaction at hand, all of it for
  // the stop's end. False when one was asked for already (the first one's deadlines stay).
  bool request_stop(Clock::time_point now, std::chrono::milliseconds timeout);
  // The first failure wins: kFailed with it (from any phase); false when failed already.
  // `broker_refused`: the broker refused the relay's credentials or certificate (nothing more
  // can be acknowledged: the stop sequence does not wait for deliveries).
  bool fail(Fatal fatal, bool broker_refused = false);
  // The Pipeline is rewinding: true the first time per rewind (the relay then halts the sink
  // and wakes every wait, once: the stop sequence's own waits must not be cut short again).
  // kConnecting and kStreaming move to kRewinding; in kStopping and kFailed the phase stays and
  // the answer is recorded.
  bool answer_rewind();

  bool stop_requested() const { return stop_requested_; }
  // A stop's deadlines (request_stop()): reading on to the end of the transaction at hand, and
  // the stop sequence's end.
  Clock::time_point stop_read_until() const { return stop_read_until_; }
  Clock::time_point stop_deadline() const { return stop_deadline_; }
  bool stopping() const { return phase_ == RunPhase::kStopping; }  // a stop, no failure
  bool failed() const { return phase_ == RunPhase::kFailed; }
  bool ending() const { return stopping() || failed(); }  // no session follows this one
  const std::optional<Fatal>& fatal() const { return fatal_; }
  bool broker_refused() const { return broker_refused_; }
  bool rewind_answered() const { return rewind_answered_; }

 private:
  RunPhase phase_ = RunPhase::kConnecting;
  std::optional<Fatal> fatal_;
  bool broker_refused_ = false;
  bool stop_requested_ = false;
  Clock::time_point stop_read_until_;
  Clock::time_point stop_deadline_;
  bool rewind_answered_ = false;
};

}  // namespace outbox::relay
