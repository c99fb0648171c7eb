#include "eventbridge_publishers.hpp"

#include <spdlog/spdlog.h>

#include "outbox/common/log_text.hpp"

namespace outbox::sinks {

EventBridgePublishers::EventBridgePublishers(boost::asio::any_io_executor executor,
                                             const relay::RelayConfig& config,
                                             aws::EventBridgeSinkOptions options, Handlers handlers)
    : executor_(executor), handlers_(std::move(handlers)), timeout_(options.timeout) {
  options.dlq_topic = config.on_error == relay::OnError::kDlq ? config.dlq_topic : std::string();
  resolved_ = aws::resolve_eventbridge_config(options, aws::process_environment());
  // The SDKs' chain, asked at every request and refreshed before temporary credentials expire;
  // one for the process, so that a publisher made at a rewind keeps what it fetched.
  resolved_.events.credentials_provider =
      aws::default_credentials_provider(executor_, aws::process_environment());
  auto log = spdlog::get("relay");
  if (!log) log = spdlog::default_logger();
  log->info(
      "event=eventbridge_bus bus={} dlq_bus={} region={} endpoint={} credentials={} "
      "max_calls={}: at least once, no order kept, no deduplication by EventBridge (consumers "
      "deduplicate by detail.id); the progress record in PostgreSQL (EventBridge cannot be read "
      "back)",
      common::quoted(resolved_.bus),
      common::quoted(resolved_.dlq_topic.empty()
                         ? std::string()
                         : (resolved_.dlq_bus.empty() ? resolved_.bus : resolved_.dlq_bus)),
      common::quoted(resolved_.events.region), common::quoted(resolved_.events.endpoint_url),
      common::quoted(resolved_.events.credentials_provider->source()),
      resolved_.events.http.max_connections);
  make();
}

EventBridgePublishers::~EventBridgePublishers() { reset(); }

void EventBridgePublishers::make() {
  publisher_ = std::make_unique<aws::EventBridgePublisher>(executor_, resolved_, handlers_.delivery,
                                                           handlers_.refused);
}

sink::ProduceResult EventBridgePublishers::produce(const sink::Record& record, std::uint64_t opaque,
                                                   bool alone) {
  return publisher_->produce(record, opaque, alone);
}

void EventBridgePublishers::halt() {
  if (publisher_ && !publisher_->stopped()) {
    publisher_->halt(
        "halted: no answer from EventBridge within --eventbridge-timeout, or an earlier record "
        "failed");
  }
}

void EventBridgePublishers::renew() {
  reset();  // answers still due are dropped: those records are sent again
  make();
}

void EventBridgePublishers::reset() { publisher_.reset(); }

std::string EventBridgePublishers::refusal_advice() const {
  std::string buses = "the bus";
  if (!resolved_.dlq_bus.empty() && !resolved_.dlq_topic.empty())
    buses += " and the dead-letter bus";
  return "check the AWS credentials the relay found (" +
         resolved_.events.credentials_provider->source() +
         "), their IAM policy (events:PutEvents on " + buses + "), --eventbridge, --aws-region (" +
         resolved_.events.region + ") and --aws-endpoint (" + resolved_.events.endpoint_url + ")";
}

}  // namespace outbox::sinks
