// The record vocabulary between the relay's Pipeline and a broker: what a sink is asked to
// publish (Record), what comes back for it (Delivery), and what a failure means for it
// (ErrorKind). Header-only and broker-neutral: Kafka (outbox::kafka::Producer) and NATS
// JetStream (outbox::nats::Publisher) both speak it; neither's C types appear here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::sink {

struct Header {
  std::string_view name;
  std::optional<std::string_view> value;
};

// A record to publish. Everything is copied by produce(); views need only live for the call.
struct Record {
  std::string_view topic;  // Kafka: the topic; JetStream: the subject
  std::optional<std::string_view> key;
  std::optional<std::string_view> value;
  std::span<const Header> headers;
  std::int64_t timestamp_ms = 0;  // 0 = let the producer stamp it (Kafka only)
  std::int32_t partition = -1;    // -1 = the configured partitioner chooses (Kafka only)
};

// What a broker error means for the record it came with. Each sink classifies its client's codes
// into these once (src/kafka/errors.cpp, src/nats/errors.cpp). Clients retry transient errors by
// themselves; a delivery report carries one only when the sink gave up on the record.
enum class ErrorKind {
  kNone,       // no error
  // The broker did not take the record, and said nothing against it: down, leader moving, a
  // delivery or acknowledgement that timed out. Never poison: the relay rewinds and sends again.
  kTransient,
  kRecord,  // the broker refused this record: unknown topic, no stream, purged, ...
  // The broker rejected the whole batch (invalid or corrupt record): the record may be an
  // innocent neighbour of the bad one.
  kBatch,
  kSize,           // too large for the broker or the client; the broker rejects the whole batch
  kAuthorization,  // authentication or ACLs refuse this client the topic or the cluster
  kFatal,          // the producer lost its sequence: nothing more goes out in order
};

// kSize and kBatch: the record may have been rejected with its batch, not for itself.
constexpr bool rejects_batch(ErrorKind kind) {
  return kind == ErrorKind::kSize || kind == ErrorKind::kBatch;
}

// A delivery report. The views refer into the client's message and are valid only during the
// handler call.
struct Delivery {
  std::uint64_t opaque = 0;  // what the caller passed to produce()
  std::size_t bytes = 0;     // key size + value size of the record
  bool ok = true;            // kind == kNone
  // The classification of the outcome, the one field to read. size_error and batch_error are
  // derived from it and go once the relay reads kind.
  ErrorKind kind = ErrorKind::kNone;
  bool size_error = false;      // kind == kSize
  bool batch_error = false;     // rejects_batch(kind)
  std::string_view error_name;  // the client's error name when !ok, e.g. MSG_SIZE_TOO_LARGE
  std::string error;            // error name and text when !ok
  std::string_view topic;       // Kafka: the topic; JetStream: the subject
  int partition = -1;           // Kafka: the partition; JetStream: -1
  std::int64_t offset = -1;     // Kafka: the offset; JetStream: the stream sequence
  // Filled when !ok, so that the failure can be reported or dead-lettered.
  std::optional<std::string_view> key;
  std::optional<std::string_view> value;
  std::string_view id_header;
  std::optional<std::string_view> type_header;
  std::vector<Header> other_headers;  // the record's headers other than id and type
};

enum class ProduceStatus { kQueued, kQueueFull, kFailed };

struct ProduceResult {
  ProduceStatus status = ProduceStatus::kQueued;
  std::string error;        // for kFailed: what the client said
  bool size_error = false;  // for kFailed: the record exceeds the broker's limit (ErrorKind::kSize)
};

}  // namespace outbox::sink
