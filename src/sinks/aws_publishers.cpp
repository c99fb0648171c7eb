#include "aws_publishers.hpp"

#include <spdlog/spdlog.h>

#include <functional>
#include <utility>

#include "outbox/aws/credentials_provider.hpp"
#include "outbox/common/log_text.hpp"

namespace outbox::sinks {

namespace {

// One aws::Publisher behind RecordSink; what differs by service comes in a Service.
class AwsPublishers : public relay::RecordSink {
 public:
  struct Service {
    // A new publisher, reporting to the handlers.
    std::function<std::unique_ptr<aws::Publisher>(const Handlers&)> make;
    std::string halt_reason;  // what halt() tells the publisher
    std::string advice;       // refusal_advice()
    std::string client;       // client()
    std::chrono::milliseconds timeout;
  };

  AwsPublishers(Service service, Handlers handlers)
      : service_(std::move(service)), handlers_(std::move(handlers)) {
    renew();
  }
  ~AwsPublishers() override { reset(); }

  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override {
    return publisher_->produce(record, opaque, alone);
  }
  bool stopped() const override { return publisher_ && publisher_->stopped(); }
  std::size_t queued() const override { return publisher_ ? publisher_->queued() : 0; }
  void halt() override {
    if (publisher_ && !publisher_->stopped()) publisher_->halt(service_.halt_reason);
  }
  void renew() override {
    reset();  // answers still due are dropped: those records are sent again
    publisher_ = service_.make(handlers_);
  }
  void reset() override { publisher_.reset(); }
  std::optional<std::chrono::milliseconds> delivery_timeout() const override {
    return service_.timeout;
  }
  std::string refusal_advice() const override { return service_.advice; }
  std::string client() const override { return service_.client; }

 private:
  Service service_;
  Handlers handlers_;
  std::unique_ptr<aws::Publisher> publisher_;
};

std::string endpoint_advice(const std::string& flag, const std::string& region,
                            const std::string& endpoint) {
  return ", " + flag + ", --aws-region (" + region + ") and --aws-endpoint (" + endpoint + ")";
}

}  // namespace

std::unique_ptr<relay::RecordSink> sqs_publishers(boost::asio::any_io_executor executor,
                                                  const aws::SqsSinkOptions& options,
                                                  std::string dlq_topic,
                                                  relay::RecordSink::Handlers handlers) {
  aws::SqsPublisherConfig resolved = aws::resolve_sqs_config(options, aws::process_environment());
  resolved.dlq_topic = std::move(dlq_topic);
  resolved.sqs.credentials_provider =
      aws::default_credentials_provider(executor, aws::process_environment());
  AwsPublishers::Service service;
  service.halt_reason =
      "halted: no answer from SQS within --sqs-timeout, or an earlier record failed";
  service.advice = "check the AWS credentials the relay found (" +
                   resolved.sqs.credentials_provider->source() +
                   "), their IAM policy (sqs:SendMessage and sqs:GetQueueAttributes on the queue" +
                   (resolved.dlq_queue_url.empty() ? "" : " and the dead-letter queue") + ")" +
                   endpoint_advice("--sqs", resolved.sqs.region, resolved.sqs.endpoint_url);
  service.client = "SQS publisher";
  service.timeout = options.timeout;
  service.make = [executor, resolved = std::move(resolved)](const relay::RecordSink::Handlers& h) {
    return std::make_unique<aws::SqsPublisher>(executor, resolved, h.delivery, h.fatal, h.refused);
  };
  return std::make_unique<AwsPublishers>(std::move(service), std::move(handlers));
}

std::unique_ptr<relay::RecordSink> eventbridge_publishers(boost::asio::any_io_executor executor,
                                                          aws::EventBridgeSinkOptions options,
                                                          std::string dlq_topic,
                                                          relay::RecordSink::Handlers handlers) {
  options.dlq_topic = std::move(dlq_topic);
  aws::EventBridgePublisherConfig resolved =
      aws::resolve_eventbridge_config(options, aws::process_environment());
  resolved.events.credentials_provider =
      aws::default_credentials_provider(executor, aws::process_environment());
  auto log = spdlog::get("relay");
  if (!log) log = spdlog::default_logger();
  log->info(
      "event=eventbridge_bus bus={} dlq_bus={} region={} endpoint={} credentials={} "
      "max_calls={}: at least once, no order kept, no deduplication by EventBridge (consumers "
      "deduplicate by detail.id); the progress record in PostgreSQL (EventBridge cannot be read "
      "back)",
      common::quoted(resolved.bus),
      common::quoted(resolved.dlq_topic.empty()
                         ? std::string()
                         : (resolved.dlq_bus.empty() ? resolved.bus : resolved.dlq_bus)),
      common::quoted(resolved.events.region), common::quoted(resolved.events.endpoint_url),
      common::quoted(resolved.events.credentials_provider->source()),
      resolved.events.http.max_connections);
  AwsPublishers::Service service;
  service.halt_reason =
      "halted: no answer from EventBridge within --eventbridge-timeout, or an earlier record "
      "failed";
  service.advice =
      "check the AWS credentials the relay found (" +
      resolved.events.credentials_provider->source() +
      "), their IAM policy (events:PutEvents on the bus" +
      (!resolved.dlq_bus.empty() && !resolved.dlq_topic.empty() ? " and the dead-letter bus" : "") +
      ")" + endpoint_advice("--eventbridge", resolved.events.region, resolved.events.endpoint_url);
  service.client = "EventBridge publisher";
  service.timeout = options.timeout;
  service.make = [executor, resolved = std::move(resolved)](const relay::RecordSink::Handlers& h) {
    return std::make_unique<aws::EventBridgePublisher>(executor, resolved, h.delivery, h.refused);
  };
  return std::make_unique<AwsPublishers>(std::move(service), std::move(handlers));
}

}  // namespace outbox::sinks
