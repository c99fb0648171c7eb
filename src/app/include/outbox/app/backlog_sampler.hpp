// The backlog while the relay runs: every --backlog-interval, the same count as `outbox-relay
// status` (outbox events committed and not yet confirmed by the slot, and the commit time of the
// oldest), read from a temporary copy of the slot so that the slot itself never moves. For
// /metrics, beside the relay's own figures.
//
// Counting blocks on libpq (a plain session and a slot copy), so it runs on a thread of its own,
// never on the relay's io_context thread. sample() is thread-safe; start() and the destructor
// (which stops and joins the thread) are called from the owning thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "outbox/lifecycle/options.hpp"  // StatusOptions

namespace outbox::app {

template <class Sample>
class SamplerThread;

// The last scan, as /metrics reports it.
struct BacklogSample {
  bool counted = false;                               // a scan succeeded at least once
  std::uint64_t pending_events = 0;                   // of the last successful scan
  bool lower_bound = false;                           // that scan stopped at its change limit
  std::optional<std::int64_t> oldest_commit_unix_ms;  // nullopt: nothing pending
  double scan_seconds = 0;
  std::int64_t scanned_at_unix_ms = 0;
  std::uint64_t scans_ok = 0;
  std::uint64_t scans_failed = 0;
};

// The backlog series in the Prometheus text format (pure; `now_unix_ms` for the age).
std::string render_backlog_prometheus(const BacklogSample& sample, std::int64_t now_unix_ms);

class BacklogSampler {
 public:
  // `where` names the slot, publication and table (and the scan limit) as for `status`.
  BacklogSampler(lifecycle::StatusOptions where, std::chrono::milliseconds every);
  // Stops the thread; waits for a scan in progress at most a few seconds (a server that does not
  // answer must not hold the process), then leaves it to end on its own.
  ~BacklogSampler();
  BacklogSampler(const BacklogSampler&) = delete;
  BacklogSampler& operator=(const BacklogSampler&) = delete;

  void start();
  BacklogSample sample() const;

 private:
  lifecycle::StatusOptions where_;
  std::chrono::milliseconds every_;
  std::unique_ptr<SamplerThread<BacklogSample>> thread_;  // sampler_thread.hpp
};

}  // namespace outbox::app
