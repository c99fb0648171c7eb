// Private to src/aws: what the SQS and the EventBridge publishers share. The "aws" logger; a
// retry's delay (exponential, capped, jittered); and what a publisher keeps of a record it holds
// for the delivery report, which on failure carries the record's own fields (the relay makes the
// dead-letter record of them). Not thread-safe: each publisher's io thread.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/sink/record.hpp"

namespace outbox::aws {

std::shared_ptr<spdlog::logger> publisher_logger();

// The delay before retry number `attempts` (0 for the first): base * 2^attempts capped at
// `max`, then a uniform jitter in its upper half.
std::chrono::milliseconds retry_delay(int attempts, std::chrono::milliseconds base,
                                      std::chrono::milliseconds max, std::mt19937_64& rng);

// Retries are logged at most once every 5 s, each line with the entries retried since the last.
class RetryLog {
 public:
  // Counts a retry; the entries to name in a line now (this one included), 0 for no line.
  std::size_t count(std::chrono::steady_clock::time_point now);

 private:
  std::chrono::steady_clock::time_point last_{};
  std::size_t unlogged_ = 0;
};

struct HeldRecord {
  std::uint64_t opaque = 0;
  std::size_t bytes = 0;  // key + value, as the relay counts
  std::string topic;
  std::optional<std::string> key;
  std::optional<std::string> value;
  // The first "id" and "type" headers with a value; the others as they come.
  std::string id;
  std::optional<std::string> type;
  std::vector<std::pair<std::string, std::optional<std::string>>> others;

  static HeldRecord of(const sink::Record& record, std::uint64_t opaque);

  // The reports; their views refer into this HeldRecord (and `name` into the caller's string).
  sink::Delivery delivered() const;
  sink::Delivery failed(sink::ErrorKind kind, std::string_view name, const std::string& text) const;
};

}  // namespace outbox::aws
