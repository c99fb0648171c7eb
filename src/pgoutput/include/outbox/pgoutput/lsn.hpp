// Log sequence numbers: a position in PostgreSQL's write-ahead log.
// Value type; thread-safe as any integer is.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox::pgoutput {

struct Lsn {
  std::uint64_t value = 0;

  constexpr auto operator<=>(const Lsn&) const = default;
  constexpr bool is_zero() const { return value == 0; }

  // "16/B374D848", as PostgreSQL prints pg_lsn.
  std::string to_string() const;
  // Parses "X/X" (hex halves); nullopt on anything else.
  static std::optional<Lsn> parse(std::string_view text);
};

// Microseconds since 2000-01-01 00:00:00 UTC, as the replication protocol sends them.
using PgTimestamp = std::int64_t;
inline constexpr std::int64_t kPgEpochUnixMicros = 946'684'800LL * 1'000'000LL;
constexpr std::int64_t to_unix_millis(PgTimestamp t) { return (t + kPgEpochUnixMicros) / 1000; }
constexpr std::int64_t to_unix_micros(PgTimestamp t) { return t + kPgEpochUnixMicros; }
constexpr PgTimestamp from_unix_micros(std::int64_t unix_us) {
  return unix_us - kPgEpochUnixMicros;
}

}  // namespace outbox::pgoutput
