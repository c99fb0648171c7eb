// CopyBoth framing of the streaming replication protocol: XLogData ('w') and primary keepalive
// ('k') from the server, standby status update ('r') from the client. Pure; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <variant>

#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pgoutput {

struct XLogData {
  Lsn wal_start;
  Lsn wal_end;
  PgTimestamp send_time = 0;
  std::span<const std::byte> payload;  // one pgoutput message; view into the frame
};

struct Keepalive {
  Lsn wal_end;
  PgTimestamp send_time = 0;
  bool reply_requested = false;
};

using CopyMessage = std::variant<XLogData, Keepalive>;
using CopyDecodeResult = std::variant<CopyMessage, DecodeError>;

// Decodes one CopyData payload received from the walsender.
CopyDecodeResult decode_copy_message(std::span<const std::byte> frame);

inline constexpr std::size_t kStatusUpdateSize = 34;

// Standby status update: 'r', write, flush, apply, clock, reply_requested (big-endian).
std::array<std::byte, kStatusUpdateSize> encode_status_update(Lsn write, Lsn flush, Lsn apply,
                                                              PgTimestamp now,
                                                              bool reply_requested);

}  // namespace outbox::pgoutput
