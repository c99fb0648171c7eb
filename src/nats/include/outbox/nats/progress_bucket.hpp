// The relay's progress record on JetStream: a key-value bucket of its own (history 1, file
// storage), made when missing, that holds the last delivered position per database system and
// slot, as the Kafka checkpoint topic does for Kafka. Blocking, with a connection of its own
// (the publisher's settings): never on the relay's io thread (the relay runs it on a worker
// thread). libnats handles never leave the module.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "outbox/nats/publisher.hpp"

namespace outbox::nats {

class ProgressBucket {
 public:
  // `bucket`: letters, digits, '-' and '_' (JetStream's rule for bucket names).
  ProgressBucket(PublisherConfig config, std::string bucket, std::chrono::milliseconds timeout);
  ~ProgressBucket();
  ProgressBucket(const ProgressBucket&) = delete;
  ProgressBucket& operator=(const ProgressBucket&) = delete;

  struct Result {
    std::optional<std::string> value;        // get(): the key's value; none: no such key
    std::optional<std::int64_t> created_ms;  // get(): when the server stored it (Unix ms)
    std::string error;                       // empty: done
    bool refused = false;                    // the server refused the credentials or the permission
  };
  // Connects (again after a failure) and opens the bucket, making it when missing.
  Result open();
  // The key's last value.
  Result get(const std::string& key);
  // Writes the key; done once the server stored it.
  Result put(const std::string& key, const std::string& value);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::nats
