// The relay's Amazon SQS sink (--sqs): one aws::SqsPublisher behind RecordSink. SQS answers every
// entry on its own, so a record sent alone needs nothing of its own: the publisher holds it until
// nothing else is held. The publisher retries throttling, 5xx and transport failures itself,
// holding each FIFO message group's later records behind the one retried; a service that does
// not answer at all meets the relay's deadline (delivery_timeout(), --sqs-timeout): the relay
// rewinds, halt() fails what the publisher held, and renew() makes a new publisher (new
// connections) that sends again from the confirmed position. SQS cannot be read back, so the
// relay's progress record is kept in PostgreSQL instead (pg_progress_store, docs/aws.md).
// make_aws_record_sink() makes one alone (no progress store) for reconcile's repair, which sends a
// gap's window again on a private io_context. Private to src/sinks; not thread-safe: the
// io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "outbox/aws/sqs_publisher.hpp"
#include "outbox/relay/record_sink.hpp"

namespace outbox::sinks {

class SqsPublishers : public relay::RecordSink {
 public:
  // Resolves region and endpoint (the config file read here, at start); the credentials come
  // from the SDKs' chain at the first request (aws::default_credentials_provider(): refused or
  // none is the refused handler, exit 1). Throws aws::CredentialsError (exit 1) or
  // aws::SqsConfigError (a flag's value: exit 2).
  // `dlq_topic`: the dead-letter record's topic (--dlq-topic) with --on-error dlq, else empty.
  SqsPublishers(boost::asio::any_io_executor executor, aws::SqsSinkOptions options,
                std::string dlq_topic, Handlers handlers);
  ~SqsPublishers() override;

  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override;
  bool stopped() const override { return publisher_ && publisher_->stopped(); }
  std::size_t queued() const override { return publisher_ ? publisher_->queued() : 0; }
  void halt() override;
  void renew() override;
  void reset() override;
  std::optional<std::chrono::milliseconds> delivery_timeout() const override {
    return options_.timeout;
  }
  std::string refusal_advice() const override;
  std::string client() const override { return "SQS publisher"; }

 private:
  void make();

  boost::asio::any_io_executor executor_;
  aws::SqsSinkOptions options_;
  Handlers handlers_;
  aws::SqsPublisherConfig resolved_;
  std::unique_ptr<aws::SqsPublisher> publisher_;
};

}  // namespace outbox::sinks
