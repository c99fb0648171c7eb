// The SQS sink's publisher on Asio, the SQS counterpart of kafka::Producer and nats::Publisher:
// sink::Record in, sink::Delivery out, on the io_context's thread (docs/aws.md).
//
// At start it reads the queue's attributes (GetQueueAttributes: FIFO or standard, its
// MaximumMessageSize); produce() answers kQueueFull until they came. Each record becomes one
// message (map_record in sqs_batching.hpp: body, FIFO group and deduplication ids, attributes).
// Records are sent in SendMessageBatch calls of up to 10 entries and 1 MiB, several calls in
// flight on keep-alive connections (max_calls). Order: on a FIFO queue at most one entry of a
// message group is in flight at once; the group's later entries wait here while its earlier one
// is answered or retried; other groups flow. A standard queue keeps no order (at-least-once).
//
// Failures, by what the caller must do:
//   - throttled, 5xx, a transport failure or an unreadable answer, for the call or one entry:
//     sent again here, alone of its group, after a backoff (100 ms doubling to 10 s, jittered);
//     no report until it passes. A service that never answers: the caller's own deadline
//     (halt()).
//   - an entry the service refuses for good, sent `alone`: a Delivery with kind kRecord (kSize
//     for a message too long), final for it; the publisher goes on.
//   - one refused for good that was not sent alone, or a whole call refused (then the entry may
//     be an innocent neighbour: kBatch): the publisher stops (stopped(), the fatal handler runs
//     once), then every entry it held is reported failed, in produce order: the refused ones with
//     their kind, the others kTransient. The caller sends again from what was acknowledged, the
//     refused ones alone: no later entry of a group passes a refused one.
//   - refused credentials, signature or access, or a queue that does not exist at start: the
//     refused handler (its text names the credentials' source, never the secret), then a stop.
//   - a record that cannot be an SQS message (over the queue's size, a header not sendable):
//     produce() returns kFailed (size_error when too large); no Delivery comes.
//
// Not thread-safe: construct, call and destroy on the executor's thread; handlers run there,
// never inside produce().
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
#include <optional>
#include <stdexcept>
#include <string>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/publisher.hpp"
#include "outbox/aws/sqs_client.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::aws {

struct SqsPublisherConfig : PublisherLimits {
  std::string queue_url;
  // Records whose topic is dlq_topic go to dlq_queue_url (--on-error dlq); empty: none.
  std::string dlq_topic;
  std::string dlq_queue_url;
  // Endpoint, region, credentials; http.max_connections is the calls in flight at once.
  SqsConfig sqs;
};

// A queue URL, endpoint or region that cannot be used (a configuration error).
class SqsConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the relay's flags and the environment give (resolve_sqs_config()).
struct SqsSinkOptions : CallOptions {
  std::string queue_url;      // --sqs
  std::string dlq_queue_url;  // --sqs-dlq
};

// The publisher's settings but its credentials (the caller sets sqs.credentials_provider): the
// region from the option, else AWS_REGION, AWS_DEFAULT_REGION, the profile's, else the queue
// URL's host (sqs.REGION.amazonaws.com); the endpoint from the option, else AWS_ENDPOINT_URL_SQS,
// else AWS_ENDPOINT_URL, else the queue URL's scheme and host. Reads the config file: not on the
// io thread. Throws CredentialsError (a config file it cannot read) or SqsConfigError (a queue
// URL or endpoint that is not one, no region anywhere).
SqsPublisherConfig resolve_sqs_config(const SqsSinkOptions& options, const EnvLookup& env);

class SqsPublisher : public Publisher {
 public:
  // Throws std::invalid_argument for a bad endpoint, std::runtime_error for a TLS context that
  // cannot be made. The queue's attributes are asked for at once (retried while retryable).
  SqsPublisher(boost::asio::any_io_executor executor, SqsPublisherConfig config,
               DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused);
  // Calls in flight are abandoned: their handlers never run.
  ~SqsPublisher() override;
  SqsPublisher(const SqsPublisher&) = delete;
  SqsPublisher& operator=(const SqsPublisher&) = delete;

  // Queues a record; `opaque` comes back in its Delivery. `alone`: it waits until nothing else is
  // held (kQueueFull meanwhile), and a refusal of it is final for it (kRecord, kSize), not a stop.
  // kQueueFull: the attributes have not come yet, or max_held records are held. kFailed: no
  // Delivery will come (see above).
  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override;

  // Records held, not reported yet.
  std::size_t queued() const override;
  bool stopped() const override;
  // The attributes came: produce() takes records.
  bool ready() const;
  // The main queue's attributes, once ready().
  std::optional<QueueAttributes> attributes() const;
  // Stops without the fatal handler: every record held is reported failed (kTransient), in
  // produce order; answers still due are ignored.
  void halt(const std::string& why) override;

  // Calls made, and connections opened (keep-alive: fewer).
  std::size_t calls() const;
  std::size_t connections_opened() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: callbacks hold a weak one
};

}  // namespace outbox::aws
