// run --standby (or a multi-host --pg with --failover): the standby's copy of the slot checked
// (lifecycle::inspect_standbys) on a thread of its own, for /metrics and the log.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace outbox::app {

template <class Sample>
class SamplerThread;

// The last checks of the standby's copy, as /metrics reports them.
struct FailoverSample {
  bool checked = false;  // a check answered at least once
  bool ready = false;    // the last check that answered: StandbyCopy::ready()
  std::uint64_t ready_checks = 0;
  std::uint64_t not_ready_checks = 0;
  std::uint64_t failed_checks = 0;  // the standby could not be inspected
};

// outbox_relay_failover_ready and outbox_relay_failover_checks_total (pure).
std::string render_failover_prometheus(const FailoverSample& sample);

// run --standby (or a multi-host --pg): checks the standby's copy of the slot (inspect_standbys)
// at start and every
// `every`, on a thread of its own (libpq blocks), and logs each change of readiness. sample() is
// thread-safe; start() and the destructor (which stops the thread, waiting a few seconds at most)
// are called from the owning thread.
class FailoverSampler {
 public:
  FailoverSampler(std::vector<std::string> standby_conninfos, std::string slot,
                  std::chrono::milliseconds every);
  ~FailoverSampler();
  FailoverSampler(const FailoverSampler&) = delete;
  FailoverSampler& operator=(const FailoverSampler&) = delete;

  void start();
  FailoverSample sample() const;

 private:
  std::vector<std::string> conninfos_;
  std::string slot_;
  std::chrono::milliseconds every_;
  std::unique_ptr<SamplerThread<FailoverSample>> thread_;  // sampler_thread.hpp
};

}  // namespace outbox::app
