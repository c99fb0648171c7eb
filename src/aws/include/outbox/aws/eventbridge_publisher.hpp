// The EventBridge sink's publisher on Asio, the EventBridge counterpart of kafka::Producer and
// nats::Publisher: sink::Record in, sink::Delivery out, on the io_context's thread
// (docs/aws.md#eventbridge).
//
// Each record becomes one PutEvents entry (eventbridge_batching.hpp: Source the record's topic,
// DetailType its type, Detail a JSON object carrying the event id, the payload inside). Entries
// are sent in PutEvents calls of up to 10 entries and 256 KiB (EventBridge's count: Source,
// DetailType, Detail), several calls in flight at once on keep-alive connections (the
// EventBridge client's http.max_connections). EventBridge keeps no order and does not
// deduplicate: nothing is held back for order here, and a record sent twice (a retry after a lost
// answer, a rewind) reaches the bus twice; consumers deduplicate by detail.id.
//
// Failures, by what the caller must do:
//   - throttled, 5xx, a transport failure or an unreadable answer, for the call or one entry
//     (PutEvents answers each entry: FailedEntryCount, ErrorCode): that entry (or the call's
//     entries) sent again here after a backoff (retry_base doubling to retry_max, jittered between
//     half and all of it); the entries EventBridge took are reported at once. No report until a
//     retry passes; a service that never answers meets the caller's own deadline (halt()).
//   - an entry EventBridge refuses for good (per entry, or a call of that one entry refused as
//     invalid): a Delivery with kind kRecord (kSize when the code says too large), final for it;
//     the publisher goes on. A call of several entries refused whole as invalid: each of them is
//     sent again in a call of its own, so that the refusal falls on the bad one only.
//   - refused credentials, signature or access: the refused handler once (its text names the
//     credentials' source, never the secret), then a stop; nothing more is reported.
//   - a record that cannot be an entry (over 256 KiB, an empty Source): produce() returns kFailed
//     (size_error when too large); no Delivery comes.
//
// Not thread-safe: construct, call and destroy on the executor's thread; handlers run there,
// never inside produce(). A delivery handler may call produce() (a dead letter).
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/eventbridge_client.hpp"
#include "outbox/aws/publisher.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::aws {

struct EventBridgePublisherConfig : PublisherLimits {
  std::string bus;  // a name or an ARN
  // Records whose topic is dlq_topic go to dlq_bus (--on-error dlq); dlq_bus empty: `bus`.
  std::string dlq_topic;
  std::string dlq_bus;
  // Endpoint, region, credentials; http.max_connections is the calls in flight at once.
  EventBridgeConfig events;
};

// A bus, endpoint or region that cannot be used (a configuration error).
class EventBridgeConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the relay's flags and the environment give (resolve_eventbridge_config()).
struct EventBridgeSinkOptions : CallOptions {
  std::string bus;        // --eventbridge
  std::string dlq_bus;    // --eventbridge-dlq
  std::string dlq_topic;  // --dlq-topic: the Source of a dead letter
};

// A bus EventBridge takes: a name (1 to 256 of A-Z a-z 0-9 . _ - /) or an event bus ARN
// (arn:PARTITION:events:REGION:ACCOUNT:event-bus/NAME). The ARN's region, none for a name;
// throws EventBridgeConfigError naming what is wrong.
std::string check_event_bus(const std::string& bus);

// The publisher's settings but its credentials (the caller sets events.credentials_provider): the
// region from the option, else AWS_REGION, AWS_DEFAULT_REGION, the profile's, else the bus ARN's;
// the endpoint from the option, else AWS_ENDPOINT_URL_EVENTS, else AWS_ENDPOINT_URL, else
// https://events.REGION.amazonaws.com (.amazonaws.com.cn in China). Reads the config file: not on
// the io thread. Throws CredentialsError (a config file it cannot read) or EventBridgeConfigError
// (a bus or endpoint that is not one, no region anywhere).
EventBridgePublisherConfig resolve_eventbridge_config(const EventBridgeSinkOptions& options,
                                                      const EnvLookup& env);

class EventBridgePublisher : public Publisher {
 public:
  // Throws std::invalid_argument for a bad endpoint, std::runtime_error for a TLS context that
  // cannot be made.
  EventBridgePublisher(boost::asio::any_io_executor executor, EventBridgePublisherConfig config,
                       DeliveryHandler on_delivery, RefusedHandler on_refused);
  // Calls in flight are abandoned: their handlers never run.
  ~EventBridgePublisher() override;
  EventBridgePublisher(const EventBridgePublisher&) = delete;
  EventBridgePublisher& operator=(const EventBridgePublisher&) = delete;

  // Queues a record; `opaque` comes back in its Delivery. `alone`: it waits until nothing else is
  // held (kQueueFull meanwhile) and goes in a call of its own. kQueueFull: max_held records are
  // held. kFailed: no Delivery will come (see above).
  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override;

  // Records held, not reported yet.
  std::size_t queued() const override;
  bool stopped() const override;
  // Stops without the refused handler: every record held is reported failed (kTransient), in
  // produce order; answers still due are ignored.
  void halt(const std::string& why) override;

  // PutEvents calls made; entries sent again (retries).
  std::size_t calls() const;
  std::size_t retries() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: callbacks hold a weak one
};

}  // namespace outbox::aws
