// Wall-clock time as the relay's metrics and records count it.
#pragma once

#include <chrono>
#include <cstdint>

namespace outbox::common {

// Milliseconds since the Unix epoch, from the system clock (PostgreSQL's commit times are too).
inline std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace outbox::common
