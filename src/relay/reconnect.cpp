#include "outbox/relay/reconnect.hpp"

#include <algorithm>

namespace outbox::relay {

std::chrono::milliseconds Reconnect::backoff(int attempt) {
  return jittered(std::min<std::int64_t>(30'000, 200LL << std::min(attempt, 8)));
}

std::chrono::milliseconds Reconnect::jittered(std::int64_t base_ms) {
  std::uniform_int_distribution<std::int64_t> jitter(base_ms / 2, base_ms);
  return std::chrono::milliseconds(jitter(rng_));
}

bool Reconnect::standby_first() {
  if (standby_logged_) return false;
  standby_logged_ = true;
  return true;
}

bool Reconnect::rewound_without_progress(pgoutput::Lsn confirmed) {
  const bool without = confirmed <= last_rewind_at_;
  last_rewind_at_ = confirmed;
  return without;
}

Reconnect::Next Reconnect::after_session(bool streamed, bool rewind_without_progress,
                                         bool standby) {
  if (streamed && !rewind_without_progress) {
    attempt_ = 0;
    standby_logged_ = false;
  }
  if (standby) return {jittered(1000), attempt_};
  const std::chrono::milliseconds delay = backoff(attempt_++);
  return {delay, attempt_};
}

}  // namespace outbox::relay
