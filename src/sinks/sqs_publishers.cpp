#include "sqs_publishers.hpp"

namespace outbox::sinks {

SqsPublishers::SqsPublishers(boost::asio::any_io_executor executor, aws::SqsSinkOptions options,
                             std::string dlq_topic, Handlers handlers)
    : executor_(executor),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      resolved_(aws::resolve_sqs_config(options_, aws::process_environment())) {
  resolved_.dlq_topic = std::move(dlq_topic);
  // The SDKs' chain, asked at every request and refreshed before temporary credentials expire;
  // one for the process, so that a publisher made at a rewind keeps what it fetched.
  resolved_.sqs.credentials_provider =
      aws::default_credentials_provider(executor_, aws::process_environment());
  make();
}

SqsPublishers::~SqsPublishers() { reset(); }

void SqsPublishers::make() {
  publisher_ = std::make_unique<aws::SqsPublisher>(executor_, resolved_, handlers_.delivery,
                                                   handlers_.fatal, handlers_.refused);
}

sink::ProduceResult SqsPublishers::produce(const sink::Record& record, std::uint64_t opaque,
                                           bool alone) {
  return publisher_->produce(record, opaque, alone);
}

void SqsPublishers::halt() {
  if (publisher_ && !publisher_->stopped()) {
    publisher_->halt(
        "halted: no answer from SQS within --sqs-timeout, or an earlier record failed");
  }
}

void SqsPublishers::renew() {
  reset();  // answers still due are dropped: those records are sent again
  make();
}

void SqsPublishers::reset() { publisher_.reset(); }

std::string SqsPublishers::refusal_advice() const {
  return "check the AWS credentials the relay found (" +
         resolved_.sqs.credentials_provider->source() +
         "), their IAM policy (sqs:SendMessage and sqs:GetQueueAttributes on the queue" +
         (resolved_.dlq_queue_url.empty() ? "" : " and the dead-letter queue") +
         "), --sqs, --aws-region (" + resolved_.sqs.region + ") and --aws-endpoint (" +
         resolved_.sqs.endpoint_url + ")";
}

}  // namespace outbox::sinks
