// The broker record of an outbox event, laid out in one place: the relay's Pipeline sends it and
// `reconcile --repair` sends the same bytes again. Headers: `id`, then `type` when the event has
// one, then the mapper's placements in their order; the mapper's key, value and partition (-1:
// the partitioner's); the event's timestamp, else the commit time. The dead-letter record is the
// Pipeline's own (pipeline.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "outbox/mapping/mapper.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::relay {

struct EventRecord {
  sink::Record record;
  // The mapper's placements: the headers after id and type.
  std::span<const sink::Header> placed;
};

// `headers` is the caller's buffer, reused from one event to the next (no allocation once it has
// grown); the record points into it and into `ev`.
inline EventRecord event_record(const mapping::Event& ev, std::int64_t commit_time_ms,
                                std::vector<sink::Header>& headers) {
  headers.clear();
  headers.push_back({"id", ev.id});
  if (ev.type) headers.push_back({"type", *ev.type});
  const std::size_t first_placed = headers.size();
  for (const mapping::ExtraHeader& h : ev.headers) headers.push_back({h.name, h.value});
  const std::span<const sink::Header> all(headers.data(), headers.size());
  return {sink::Record{ev.topic, ev.key, ev.value, all, ev.timestamp_ms.value_or(commit_time_ms),
                       ev.partition.value_or(-1)},
          all.subspan(first_placed)};
}

}  // namespace outbox::relay
