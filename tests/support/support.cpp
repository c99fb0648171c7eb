#include "outbox_test/support.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace outbox_test {

std::string require_env(const char* name) {
  load_lane_env();
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::runtime_error(std::string("environment variable ") + name +
                             " is not set; run the integration tests through scripts/test.sh, "
                             "which starts PostgreSQL and Kafka and sets it");
  }
  return value;
}

Services require_services(bool kafka) {
  Services s{require_env("OUTBOX_PG"), kafka ? require_env("OUTBOX_BROKERS") : std::string(),
             require_env("OUTBOX_RELAY_BIN")};
  if (!std::filesystem::is_regular_file(s.relay_bin)) {
    throw std::runtime_error("OUTBOX_RELAY_BIN=" + s.relay_bin + " is not a file");
  }
  return s;
}

std::string unique_suffix() {
  static std::atomic<int> counter{0};
  return std::to_string(::getpid()) + "_" + std::to_string(wall_clock_ms()) + "_" +
         std::to_string(counter++);
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll_interval) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll_interval);
  }
  return condition();
}

std::int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int32_t java_partition(const std::string& key, std::int32_t partition_count) {
  // org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c.
  constexpr std::uint32_t kM = 0x5bd1e995;
  constexpr int kR = 24;
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const std::uint32_t length = static_cast<std::uint32_t>(key.size());
  std::uint32_t h = 0x9747b28cU ^ length;
  const std::uint32_t length4 = length / 4;
  for (std::uint32_t i = 0; i < length4; ++i) {
    const std::uint32_t i4 = i * 4;
    std::uint32_t k = data[i4 + 0] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) |
                      (static_cast<std::uint32_t>(data[i4 + 3]) << 24);
    k *= kM;
    k ^= k >> kR;
    k *= kM;
    h *= kM;
    h ^= k;
  }
  const std::uint32_t tail = length & ~3U;
  switch (length % 4) {
    case 3:
      h ^= static_cast<std::uint32_t>(data[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<std::uint32_t>(data[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= data[tail];
      h *= kM;
  }
  h ^= h >> 13;
  h *= kM;
  h ^= h >> 15;
  return static_cast<std::int32_t>((h & 0x7fffffffU) % static_cast<std::uint32_t>(partition_count));
}

}  // namespace outbox_test
