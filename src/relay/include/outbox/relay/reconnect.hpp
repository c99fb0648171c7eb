// The relay's pace between sessions: capped exponential backoff with jitter after a failure (so
// that several relays do not retry in lockstep), a standby's steady short pace (it takes over soon
// after the active relay lets go, and says so once), and rewinds that make no progress backing
// off like failed connections. Relay::Impl's reconnect loop asks it after every session; the
// broker waits of ProgressCheck and exactly-once's Transactions use backoff(). No I/O, the random
// source seeded by the caller: unit-tested in tests/unit/relay/reconnect_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

class Reconnect {
 public:
  explicit Reconnect(std::uint64_t seed) : rng_(seed) {}

  // Uniform in [base / 2, base], base = min(30 s, 200 ms << min(attempt, 8)).
  std::chrono::milliseconds backoff(int attempt);
  // Uniform in [base_ms / 2, base_ms].
  std::chrono::milliseconds jittered(std::int64_t base_ms);

  // A session found the slot held by another connection: true the first time since the relay
  // last streamed (the relay then logs that it waits as a standby).
  bool standby_first();
  bool standby_logged() const { return standby_logged_; }

  // A rewind ended the session with the slot confirmable at `confirmed`: true when it made no
  // progress since the last rewind (the next session then backs off).
  bool rewound_without_progress(pgoutput::Lsn confirmed);

  struct Next {
    std::chrono::milliseconds delay;
    int attempt;  // the failed attempts in a row, for the log (not counted as a standby)
  };
  // The wait before the next session. A session that streamed, unless a rewind without progress
  // ended it, starts the count again (and a later standby is logged again); a standby waits
  // jittered(1 s) and counts nothing; any other failure waits backoff() of its attempt.
  Next after_session(bool streamed, bool rewind_without_progress, bool standby);

 private:
  std::mt19937_64 rng_;
  int attempt_ = 0;
  bool standby_logged_ = false;
  pgoutput::Lsn last_rewind_at_;  // the confirmable position at the last rewind
};

}  // namespace outbox::relay
