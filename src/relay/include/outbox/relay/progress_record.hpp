// The relay's memory outside the slot: the last position it confirmed, per database system and
// slot, kept with the events (a ProgressStore: progress_store.hpp; the compacted checkpoint
// topic with Kafka, a key-value bucket with JetStream; key "SYSTEM_ID/SLOT", value
// "LSN timeline=N", or "LSN" while decoding on a standby). Exactly-once writes it in every
// transaction of the broker's (Transactions); at-least-once writes it before the slot is
// confirmed (the relay, at most every kProgressInterval), so that the slot is never ahead of it.
// Read on every start: a record and no slot means a slot of that name delivered before and is
// gone; a slot ahead of the record was moved by another client or made anew; a server whose WAL
// ends before it is not the one the relay delivered from (docs/failures.md). This header holds
// the record's value and key, broker-neutral; where it is stored is a sink's (src/sinks).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

// At-least-once: the progress record is written at most this often. The slot is confirmed only
// through a recorded position, so this bounds how far the slot trails what the broker
// acknowledged (one small record each time; nothing per event).
inline constexpr std::chrono::milliseconds kProgressInterval{100};

struct ProgressRead {
  std::optional<pgoutput::Lsn> last;       // the last record of the key
  std::optional<std::uint32_t> timeline;   // the timeline it was written on (older: none)
  std::optional<std::int64_t> written_ms;  // the broker's timestamp of the last record (Unix ms)
  std::string bad;                         // a value under the key that is not a WAL position
  std::string error;                       // the store could not be read: why
  bool refused = false;  // the broker refused the credentials or certificate (`error` says)
};

// "LSN" or "LSN timeline=N" into `out` (last, timeline); anything else is out.bad.
void parse_progress_value(std::string_view value, ProgressRead& out);

// "LSN timeline=N", or "LSN" without a timeline.
std::string progress_value(pgoutput::Lsn lsn, std::optional<std::uint32_t> timeline);

// The record's key: the server's system identifier (IDENTIFY_SYSTEM, pg_control_system()) and
// the slot's name.
std::string progress_key(const std::string& system_id, const std::string& slot);

}  // namespace outbox::relay
