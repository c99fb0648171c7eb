// Paced reading of the replication stream: when to read the socket again. Pure rules (no I/O,
// standard library only), shared by the relay and scripts/bench.sh's walsender-ceiling consumer
// (bench_tool drain), which must read exactly like the relay.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace outbox::relay {

// Paced reading while the stream is busy. The walsender sends every pgoutput message with its
// own send(); read the moment the socket turns readable and each of them becomes a TCP segment
// of its own and a wake-up, which costs the walsender (the bottleneck on a small machine) more
// than decoding. A short pause lets the socket fill: the kernel then carries the messages in
// large segments. The pause adapts below the configured maximum: it halves when the socket holds
// more than a quarter of its receive buffer (read now: the server may be about to block on us,
// so pacing never throttles) and grows by a quarter while it held less than one libpq read.
class ReadPacer {
 public:
  // `start`: when the first rate window begins (a parameter for tests).
  explicit ReadPacer(std::chrono::microseconds max,
                     std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now())
      : max_(max), pause_(max), window_start_(start) {}

  void on_frame(std::size_t bytes) { window_bytes_ += bytes; }

  // Busy: the stream brings at least 8 MB/s (8 KiB per ms), measured over windows of at least a
  // millisecond. A trickle is read at once: pausing would only add wake-ups and latency. By
  // rate, not per read: a reader that keeps up gets a few messages per read however fast the
  // stream is.
  bool busy(std::chrono::steady_clock::time_point now) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - window_start_);
    if (ms.count() >= 1) {
      busy_ = window_bytes_ >= kBusyBytesPerMs * static_cast<std::size_t>(ms.count());
      window_bytes_ = 0;
      window_start_ += ms;
    }
    return busy_ && max_.count() > 0;
  }

  // Adapts the pause to the socket's backlog (bytes the kernel holds for us, and the receive
  // buffer's size); true when the reader should read without pausing.
  bool read_now(std::size_t queued, std::size_t capacity) {
    if (queued > capacity / 4) {
      pause_ = std::max(pause_ / 2, std::min(kMinPause, max_));
      return true;
    }
    if (queued < kThinBacklogBytes) {
      pause_ = std::min(pause_ + pause_ / 4 + std::chrono::microseconds(1), max_);
    }
    return false;
  }

  std::chrono::microseconds pause() const { return pause_; }

 private:
  static constexpr std::size_t kBusyBytesPerMs = 8192;
  static constexpr std::chrono::microseconds kMinPause{25};
  static constexpr std::size_t kThinBacklogBytes = 16384;  // one libpq read

  std::chrono::microseconds max_;
  std::chrono::microseconds pause_;
  std::size_t window_bytes_ = 0;
  std::chrono::steady_clock::time_point window_start_;
  bool busy_ = false;
};

}  // namespace outbox::relay
