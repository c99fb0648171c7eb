// A blocking client that reads a JetStream stream back: its state (message count, first and last
// storage times) and its messages. For the project's tools (tools/nats-read: the demo prints the
// stream, the bench waits for a count), never the relay's io thread. libnats stays inside.
// Not thread-safe; one connection per StreamClient.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
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
  // Deletes the stream and its messages; throws std::runtime_error when it cannot.
  void remove(const std::string& stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::nats
