// A blocking client that reads a JetStream stream back: its state (message count, first and last
// storage times), its messages, and the event ids stored on a subject since a time. For the
// project's tools (tools/nats-read: the demo prints the stream, the bench waits for a count) and
// reconcile (the ids JetStream holds of a window: the gap repair of `run --nats`), never the
// relay's io thread. libnats stays inside.
// Not thread-safe; one connection per StreamClient.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/nats/publisher.hpp"

namespace outbox::nats {

struct StreamState {
  std::uint64_t messages = 0;
  std::int64_t first_ns = 0;  // storage time of the first message, ns since the epoch (UTC)
  std::int64_t last_ns = 0;   // ... of the last one
};

struct StoredMessage {
  std::uint64_t seq = 0;
  std::string subject;
  std::vector<std::pair<std::string, std::string>> headers;  // as stored
  std::string data;
};

// What StreamClient::read_ids() found on a subject.
struct SubjectIds {
  std::string stream;            // the stream capturing the subject; empty: none does
  std::uint64_t messages = 0;    // messages read
  std::uint64_t without_id = 0;  // ... with neither an `id` nor a Nats-Msg-Id header
};

class StreamClient {
 public:
  // Connects (security settings as the publisher's); throws std::runtime_error naming the
  // servers when it cannot within `timeout`.
  StreamClient(const PublisherConfig& config, std::chrono::milliseconds timeout);
  ~StreamClient();
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // Throws std::runtime_error naming the stream when it cannot be read (e.g. missing).
  StreamState state(const std::string& stream);
  // Every message in the stream, in stream order.
  std::vector<StoredMessage> messages(const std::string& stream);
  // Every message stored on `subject` (no wildcards) at or after `since_ns` (the server's storage
  // time, ns since the epoch; 0: from the stream's first), in stream order: its `id` header, else
  // its Nats-Msg-Id, handed to `on_id`. Headers only (an ordered consumer with HeadersOnly: the
  // payloads are not sent), up to the last message stored when the read starts. No stream
  // captures the subject: SubjectIds::stream is empty. Throws std::runtime_error when the server
  // refuses, or sends nothing for `timeout` while messages remain.
  SubjectIds read_ids(const std::string& subject, std::int64_t since_ns,
                      const std::function<void(std::string_view)>& on_id,
                      std::chrono::milliseconds timeout);
  // Deletes the stream and its messages; throws std::runtime_error when it cannot.
  void remove(const std::string& stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::nats
