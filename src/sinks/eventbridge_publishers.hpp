// The relay's Amazon EventBridge sink (--eventbridge): one aws::EventBridgePublisher behind
// RecordSink. EventBridge answers every entry on its own and keeps no order, so a record sent
// alone needs nothing of its own: the publisher holds it until nothing else is held. The
// publisher retries throttling, 5xx and transport failures itself; a service that does not answer
// at all meets the relay's deadline (delivery_timeout(), --eventbridge-timeout): the relay
// rewinds, halt() fails what the publisher held, and renew() makes a new publisher (new
// connections) that sends again from the confirmed position. EventBridge cannot be read back, so
// the relay's progress record is kept in PostgreSQL instead (pg_progress_store, docs/aws.md).
// make_aws_record_sink() makes one alone (no progress store) for reconcile's repair, which sends a
// gap's window again on a private io_context. Private to the sinks; not thread-safe: the
// io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::sinks {

class EventBridgePublishers : public relay::RecordSink {
 public:
  // Resolves region and endpoint (the config file read here, at start); the credentials come
  // from the SDKs' chain at the first request (aws::default_credentials_provider(): refused or
  // none is the refused handler, exit 1). Dead letters (the relay's --dlq-topic under --on-error
  // dlq) go to options.dlq_bus. Throws aws::CredentialsError (exit 1) or
  // aws::EventBridgeConfigError (exit 2).
  EventBridgePublishers(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
                        aws::EventBridgeSinkOptions options, Handlers handlers);
  ~EventBridgePublishers() override;

  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override;
  bool stopped() const override { return publisher_ && publisher_->stopped(); }
  std::size_t queued() const override { return publisher_ ? publisher_->queued() : 0; }
  void halt() override;
  void renew() override;
  void reset() override;
  std::optional<std::chrono::milliseconds> delivery_timeout() const override { return timeout_; }
  std::string refusal_advice() const override;
  std::string client() const override { return "EventBridge publisher"; }

 private:
  void make();

  boost::asio::any_io_executor executor_;
  Handlers handlers_;
  std::chrono::milliseconds timeout_;
  aws::EventBridgePublisherConfig resolved_;
  std::unique_ptr<aws::EventBridgePublisher> publisher_;
};

}  // namespace outbox::sinks
