// The EventBridge sink's pure parts, without I/O (unit-tested in
// tests/unit/aws/eventbridge_batching_test.cpp): a sink::Record as a PutEvents entry, and how
// many queued entries go into the next call. Private to src/aws.
//
// The entry (docs/aws.md#eventbridge):
//   Source       the record's topic (the relay's --topic template; --dlq-topic for a dead letter)
//   DetailType   the event's type (header "type"); "outbox.event" when it has none
//   EventBusName the bus (a dead letter: the dead-letter bus)
//   Detail       a JSON object: {"id": header "id", "type": header "type" (when present),
//                "aggregateid": the key (when present), "headers": {the other headers, in their
//                order; when there are any}, "payload": ...}. The payload is embedded as it is
//                when its bytes are one JSON text (an object, an array, a string, a number,
//                true, false, null); other UTF-8 text becomes a JSON string; bytes that are not
//                UTF-8 become a base64 string with "payload_encoding": "base64" before it; a
//                record without a value (a tombstone) gets "payload": null.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/aws/eventbridge_client.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::aws {

inline constexpr std::string_view kDefaultDetailType = "outbox.event";

// Detail's JSON text for the record (see above).
std::string build_detail(const sink::Record& record);

struct MappedEntry {
  PutEventsEntry entry;
  std::size_t size = 0;  // entry_size(entry): EventBridge's count
  // Set when the record cannot be an EventBridge entry: the reason, first word a code
  // ("EntryTooLarge: ..."); size_error when it is over 256 KiB.
  std::string error;
  bool size_error = false;
};

// The record as an entry for `bus`.
MappedEntry map_record(const sink::Record& record, const std::string& bus);

// How many of `count` queued entries (the i-th of size size_at(i)) go into the next PutEvents
// call: at most 10, their sizes at most 256 KiB together, and at least one when count > 0 (no
// entry over the limit is ever queued: map_record() refuses it).
template <class SizeAt>
std::size_t next_batch(std::size_t count, SizeAt size_at) {
  std::size_t n = 0;
  std::size_t total = 0;
  while (n < count && n < kPutEventsMaxEntries) {
    const std::size_t size = size_at(n);
    if (n > 0 && total + size > kPutEventsMaxBytes) break;
    total += size;
    ++n;
  }
  return n;
}

}  // namespace outbox::aws
