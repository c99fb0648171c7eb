// Small helpers shared by the integration and fault tests: environment, unique names, polling.
// Thread-safety: free functions, no shared state.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace outbox_test {

using Clock = std::chrono::steady_clock;

// Value of an environment variable the test scripts must set. Throws std::runtime_error naming
// the variable when it is missing or empty: CI must fail loudly, never skip.
std::string require_env(const char* name);
// Puts the variables of the lane ctest gave this test (tests/support/lane.cpp) into the
// environment, once; runs before main() in every test that links this library. True in a lane.
bool load_lane_env();

// What scripts/test.sh provides to every end-to-end test: OUTBOX_PG, OUTBOX_BROKERS and an
// OUTBOX_RELAY_BIN that is a file. Throws std::runtime_error naming what is missing.
struct Services {
  std::string conninfo;
  std::string brokers;
  std::string relay_bin;
};
// OUTBOX_PG, OUTBOX_RELAY_BIN, and OUTBOX_BROKERS unless `kafka` is false (then brokers is empty).
Services require_services(bool kafka = true);

// A suffix unique to this test process and call ("<pid>_<ms>_<n>", lower case, [a-z0-9_]), so
// every test gets its own table, slot, publication and topics and reruns never see old data.
std::string unique_suffix();

// Polls `condition` every `poll_interval` until it holds (returns true) or `timeout` elapsed
// (returns false after one last check). For waiting on external systems: never sleep bare.
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll_interval = std::chrono::milliseconds(50));

// Milliseconds since the Unix epoch on the wall clock (Kafka timestamps use that clock).
std::int64_t wall_clock_ms();

// Runs a callable when the scope ends, also when an assertion or exception leaves it early.
template <typename F>
class ScopeGuard {
 public:
  explicit ScopeGuard(F f) : f_(std::move(f)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ~ScopeGuard() { f_(); }

 private:
  F f_;
};

// Java's Kafka client partitioner: murmur2 of the key bytes, made positive, modulo the partition
// count. The relay uses librdkafka's murmur2_random, which must agree with it.
std::int32_t java_partition(const std::string& key, std::int32_t partition_count);

}  // namespace outbox_test
