// What the SQS and the EventBridge publishers share, as the sinks use them: one interface
// (sink::Record in, sink::Delivery out, on the io_context's thread), the settings every AWS call
// of theirs takes from the relay's flags, and the publisher's own limits. Each publisher's header
// says how it batches, orders and fails (sqs_publisher.hpp, eventbridge_publisher.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "outbox/sink/record.hpp"

namespace outbox::aws {

// What the relay's flags and the environment give every AWS sink.
struct CallOptions {
  std::string region;        // --aws-region
  std::string endpoint_url;  // --aws-endpoint
  // --sqs-max-calls, --eventbridge-max-calls: calls in flight at once.
  std::size_t max_calls = 8;
  // --sqs-timeout, --eventbridge-timeout: a call's deadline, and the relay's for a delivery report
  // while records wait.
  std::chrono::milliseconds timeout{30'000};
};

// A publisher's own limits.
struct PublisherLimits {
  // Records held (waiting, in flight, to be retried); produce() answers kQueueFull beyond.
  std::size_t max_held = 20'000;
  // A retry's delay: retry_base doubling to retry_max, jittered between half and all of it.
  std::chrono::milliseconds retry_base{100};
  std::chrono::milliseconds retry_max{10'000};
};

class Publisher {
 public:
  using DeliveryHandler = std::function<void(const sink::Delivery&)>;
  using FatalHandler = std::function<void(const std::string&)>;
  using RefusedHandler = std::function<void(const std::string&)>;

  virtual ~Publisher() = default;

  // Queues a record; `opaque` comes back in its Delivery. `alone`: it waits until nothing else is
  // held (kQueueFull meanwhile), and a refusal of it is final for it (kRecord, kSize). kFailed: no
  // Delivery will come.
  virtual sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                                      bool alone) = 0;
  // Records held, not reported yet.
  virtual std::size_t queued() const = 0;
  virtual bool stopped() const = 0;
  // Stops without the fatal or refused handler: every record held is reported failed
  // (kTransient), in produce order; answers still due are ignored.
  virtual void halt(const std::string& why) = 0;
};

}  // namespace outbox::aws
