// The broker behind the relay, one small interface that every sink implements (src/sinks:
// Kafka's KafkaProducers, NATS JetStream's NatsPublishers), made by the SinkFactory the relay is
// given (sink_factory.hpp): records in, delivery reports out through the handlers, a stop
// (refused batch, lost connection) that the relay answers with a rewind and renew(). The relay
// loop and the Pipeline speak only this and the sink vocabulary (outbox/sink/record.hpp).
// Not thread-safe: the io_context's thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "outbox/sink/record.hpp"

namespace outbox::relay {

class RecordSink {
 public:
  struct Handlers {
    std::function<void(const sink::Delivery&)> delivery;  // every report, on the io thread
    // The sink stopped (a refused batch, a lost sequence or connection): the relay rewinds.
    std::function<void(const std::string&)> fatal;
    // Credentials or certificate refused: one line naming the broker ("Kafka broker ...").
    std::function<void(const std::string&)> refused;
  };

  virtual ~RecordSink() = default;
  // Queues a record; `alone`: sent on its own, once nothing else is in flight, so that its
  // report is its own (a record of a refused batch).
  virtual sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                                      bool alone) = 0;
  // The sink stopped and accepts nothing more until renew().
  virtual bool stopped() const = 0;
  // The sink stops at the first batch the broker refuses, before any later record of its
  // partition goes (Kafka's enable.gapless.guarantee): see Pipeline::Sink::stops_at_refusal().
  virtual bool stops_at_refusal() const { return false; }
  // Records queued or in flight, not yet reported.
  virtual std::size_t queued() const = 0;
  // Sends nothing more of what it holds (a rewind began while it goes on: a delivery timed out):
  // what is queued or in flight is reported as failed (transient), so that no record goes out
  // after an earlier one that failed. A sink that stops at its first failure does nothing.
  virtual void halt() = 0;
  // Anew (a rewind): reports still due from before are dropped.
  virtual void renew() = 0;
  // Nothing left (the relay ends).
  virtual void reset() = 0;
  // The relay's own delivery deadline (-X message.timeout.ms in at-least-once mode, taken from
  // librdkafka: see SinkReports::watch_deliveries()); none: the sink's own.
  virtual std::optional<std::chrono::milliseconds> delivery_timeout() const { return {}; }
  // What to check when the broker refuses the relay's credentials or certificate.
  virtual std::string refusal_advice() const = 0;
  // The client, for messages: "Kafka producer", "NATS publisher".
  virtual std::string client() const = 0;
};

}  // namespace outbox::relay
