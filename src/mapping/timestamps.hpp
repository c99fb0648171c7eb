// Private to src/mapping: instants as PostgreSQL prints them and as RFC 3339 writes them, for the
// record timestamp (--column-timestamp) and ce_time. Changes with those two formats only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace outbox::mapping {

// A timestamp or timestamptz as PostgreSQL prints it with DateStyle ISO (its default):
// "2026-12-01 05:55:23.123456+00", "+05:30", "-03:30:15"; no offset for timestamp, which is
// taken as UTC (as Debezium does). To microseconds since the epoch; its milliseconds, truncated,
// must be a Kafka timestamp.
std::string_view parse_timestamp(std::string_view text, std::int64_t& out_us);

// An instant as RFC 3339 in UTC with microseconds, "2026-12-01T05:55:23.123456Z" (27
// characters). Zero when the year is not 0001 to 9999, which RFC 3339 cannot write.
std::size_t format_rfc3339(std::int64_t unix_us, std::array<char, 32>& out);

}  // namespace outbox::mapping
