// The relay's memory outside the slot: the last position it confirmed, per database system and
// slot, as a record of the compacted checkpoint topic (--checkpoint-topic; key "SYSTEM_ID/SLOT",
// value "LSN timeline=N", or "LSN" while decoding on a standby). Exactly-once writes it in every
// Kafka transaction (KafkaTransactions); at-least-once writes it before the slot is confirmed
// (the relay, at most every kProgressInterval), so that the slot is never ahead of it. Read on
// every start: a record and no slot means a slot of that name delivered before and is gone; a
// slot ahead of the record was moved by another client or made anew; a server whose WAL ends
// before it is not the one the relay delivered from (docs/failures.md).
// Private to the relay.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/kafka/consumer.hpp"
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

// At-least-once: the progress record is written at most this often. The slot is confirmed only
// through a recorded position, so this bounds how far the slot trails what Kafka acknowledged
// (one small record each time; nothing per event).
inline constexpr std::chrono::milliseconds kProgressInterval{100};

struct ProgressRead {
  std::optional<pgoutput::Lsn> last;       // the last record of the key
  std::optional<std::uint32_t> timeline;   // the timeline it was written on (older: none)
  std::optional<std::int64_t> written_ms;  // Kafka's timestamp of the last record (Unix ms)
  std::string bad;                         // a value under the key that is not a WAL position
  std::string error;                       // the topic could not be read: why
  bool refused = false;  // the broker refused the credentials or certificate (`error` says)
};

// Reads `topic` to its end (ConsumerConfig::read_committed says how) with a consumer of its own on
// `worker`, and returns the last value of `key`. A topic the broker does not know holds no record.
boost::asio::awaitable<ProgressRead> read_progress(boost::asio::thread_pool& worker,
                                                   kafka::ConsumerConfig config, std::string topic,
                                                   std::string key,
                                                   std::chrono::milliseconds timeout);

// "LSN" or "LSN timeline=N" into `out` (last, timeline); anything else is out.bad.
void parse_progress_value(std::string_view value, ProgressRead& out);

// "LSN timeline=N", or "LSN" without a timeline.
std::string progress_value(pgoutput::Lsn lsn, std::optional<std::uint32_t> timeline);

}  // namespace outbox::relay
