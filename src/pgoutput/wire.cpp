#include "outbox/pgoutput/wire.hpp"

#include <cstdint>
#include <string>

namespace outbox::pgoutput {
namespace {

constexpr std::size_t kXLogDataHeaderSize = 1 + 8 + 8 + 8;  // 'w', walStart, walEnd, sendTime
constexpr std::size_t kKeepaliveSize = 1 + 8 + 8 + 1;       // 'k', walEnd, sendTime, reply

// Byte shifts: frames come from a socket buffer with no alignment guarantee.
std::uint64_t read_u64(std::span<const std::byte> b, std::size_t at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | std::to_integer<std::uint8_t>(b[at + i]);
  return v;
}

void write_u64(std::byte* out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<std::byte>(v & 0xff);
    v >>= 8;
  }
}

DecodeError size_error(const char* what, std::size_t need, std::size_t have) {
  const char* relation = have < need ? "truncated " : "oversized ";
  return DecodeError{have < need ? have : need, std::string(relation) + what + ": expected " +
                                                    std::to_string(need) + " bytes, got " +
                                                    std::to_string(have)};
}

}  // namespace

CopyDecodeResult decode_copy_message(std::span<const std::byte> frame) {
  if (frame.empty()) return DecodeError{0, "empty CopyData frame"};
  switch (std::to_integer<char>(frame[0])) {
    case 'w': {
      if (frame.size() < kXLogDataHeaderSize) {
        return size_error("XLogData header", kXLogDataHeaderSize, frame.size());
      }
      return CopyMessage{XLogData{Lsn{read_u64(frame, 1)}, Lsn{read_u64(frame, 9)},
                                  static_cast<PgTimestamp>(read_u64(frame, 17)),
                                  frame.subspan(kXLogDataHeaderSize)}};
    }
    case 'k': {
      if (frame.size() != kKeepaliveSize) {
        return size_error("primary keepalive", kKeepaliveSize, frame.size());
      }
      return CopyMessage{Keepalive{Lsn{read_u64(frame, 1)},
                                   static_cast<PgTimestamp>(read_u64(frame, 9)),
                                   frame[17] != std::byte{0}}};
    }
    default:
      return DecodeError{0, "unknown CopyData message type " +
                                std::to_string(std::to_integer<unsigned>(frame[0])) +
                                " (expected 'w' XLogData or 'k' keepalive)"};
  }
}

std::array<std::byte, kStatusUpdateSize> encode_status_update(Lsn write, Lsn flush, Lsn apply,
                                                              PgTimestamp now,
                                                              bool reply_requested) {
  std::array<std::byte, kStatusUpdateSize> out{};
  out[0] = std::byte{'r'};
  write_u64(&out[1], write.value);
  write_u64(&out[9], flush.value);
  write_u64(&out[17], apply.value);
  write_u64(&out[25], static_cast<std::uint64_t>(now));
  out[33] = std::byte{reply_requested ? std::uint8_t{1} : std::uint8_t{0}};
  return out;
}

}  // namespace outbox::pgoutput
