// The envelope of a table-less outbox event: the content of a logical decoding message
// (pg_logical_emit_message) read as protobuf outbox.v1.Event (proto/outbox/v1/event.proto) or as
// a JSON object with the same fields. protobuf and simdjson stay private to this module.
// Not thread-safe: one EnvelopeReader per stream, used from the stream's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::mapping {

// --message-format. kAuto: JSON when the content's first byte is '{', else protobuf. A
// serialized outbox.v1.Event never starts with '{' (0x7B would be field 15, a group).
enum class MessageFormat : std::uint8_t { kAuto, kJson, kProtobuf };

struct EnvelopeHeader {
  std::string_view name;
  std::string_view value;
};

// An envelope read by EnvelopeReader. Views into the reader's storage or the content read:
// valid until the next read() and while the content lives.
struct Envelope {
  std::string_view id;              // required, non-empty
  std::string_view aggregate_type;  // required, non-empty
  std::optional<std::string_view> aggregate_id;
  std::optional<std::string_view> type;
  // protobuf: the bytes; JSON: the payload value's JSON text as written (an object, an array, a
  // quoted string...). nullopt when absent (or JSON null).
  std::optional<std::string_view> payload;
  std::span<const EnvelopeHeader> headers;  // protobuf: by name; JSON: as written
};

class EnvelopeReader {
 public:
  EnvelopeReader();
  ~EnvelopeReader();
  EnvelopeReader(EnvelopeReader&&) noexcept;
  EnvelopeReader& operator=(EnvelopeReader&&) noexcept;

  // Reads `content` into `out`. Returns an empty string, or why the content is not an envelope
  // ("is not valid protobuf outbox.v1.Event", "is JSON without \"id\"", ...). Its buffers are
  // reused: once warm, reading allocates only for protobuf headers.
  std::string read(std::string_view content, MessageFormat format, Envelope& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::mapping
