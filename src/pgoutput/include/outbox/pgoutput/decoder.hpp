// Pure pgoutput decoder: bytes in, typed message or decode error out. No I/O, no global state,
// every read bounds-checked. Thread-safe (stateless).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <variant>

#include "outbox/pgoutput/messages.hpp"

namespace outbox::pgoutput {

struct DecodeError {
  std::size_t offset = 0;  // byte offset in the message where decoding failed
  std::string reason;      // e.g. "truncated Commit: need 8 bytes for end_lsn, have 3"
};

using DecodeResult = std::variant<Message, DecodeError>;

// Decodes one pgoutput message (the payload of an XLogData 'w' frame, starting at its type byte).
// Views in the result refer into `bytes`. Trailing bytes after a complete message are an error.
DecodeResult decode(std::span<const std::byte> bytes);

// Same, reusing `out`'s vectors (tuple and column storage) to avoid allocating per message on the
// hot path. Returns nullptr on success, or fills `error` and returns &error.
const DecodeError* decode_into(std::span<const std::byte> bytes, Message& out, DecodeError& error);

}  // namespace outbox::pgoutput
