#include <memory>

#include "eventbridge_publishers.hpp"
#include "kafka_producers.hpp"
#include "kafka_transactions.hpp"
#include "nats_publishers.hpp"
#include "outbox/sinks/sinks.hpp"
#include "progress_stores.hpp"
#include "sqs_publishers.hpp"

namespace outbox::sinks {
using relay::SinkFactory;

// A progress record's report and a checkpoint record's come through the sink's handler beside
// the events': their opaques must not meet.
static_assert((kProgressTag & KafkaTransactions::kCheckpointOpaque) == 0);

namespace {

class KafkaSinkFactory : public SinkFactory {
 public:
  explicit KafkaSinkFactory(kafka::ProducerConfig producer) : producer_(std::move(producer)) {}

  Parts make(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
             relay::RecordSink::Handlers handlers, relay::ProgressStore::Written written) override {
    auto sink = std::make_unique<KafkaProducers>(executor, producer_, config.delivery,
                                                 transactional_id(config), std::move(handlers));
    producers_ = sink.get();
    Parts parts;
    parts.progress = kafka_progress_store(*sink, config, producer_, std::move(written));
    parts.sink = std::move(sink);
    return parts;
  }

  std::unique_ptr<relay::Transactions> transactions(const relay::RelayConfig& config,
                                                    relay::Pipeline& pipeline,
                                                    relay::Metrics& metrics,
                                                    std::shared_ptr<spdlog::logger> log,
                                                    relay::Transactions::Host& host) override {
    return std::make_unique<KafkaTransactions>(config, producer_, pipeline, *producers_, metrics,
                                               std::move(log), transactional_id(config), host);
  }

  bool bounds_topics() const override { return true; }

 private:
  std::string transactional_id(const relay::RelayConfig& config) const {
    return producer_.transactional_id.empty() ? "outbox-relay." + config.slot
                                              : producer_.transactional_id;
  }

  kafka::ProducerConfig producer_;
  KafkaProducers* producers_ = nullptr;  // made by make(), owned by the relay
};

class NatsSinkFactory : public SinkFactory {
 public:
  NatsSinkFactory(nats::PublisherConfig nats, std::string bucket)
      : nats_(std::move(nats)), bucket_(std::move(bucket)) {}

  Parts make(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
             relay::RecordSink::Handlers handlers, relay::ProgressStore::Written written) override {
    Parts parts;
    parts.progress = nats_progress_store(executor, config, nats_, bucket_, std::move(written));
    parts.sink = std::make_unique<NatsPublishers>(executor, nats_, std::move(handlers));
    return parts;
  }

  // A subject costs the client nothing that lasts.
  bool bounds_topics() const override { return false; }

 private:
  nats::PublisherConfig nats_;
  std::string bucket_;
};

class EventBridgeSinkFactory : public SinkFactory {
 public:
  EventBridgeSinkFactory(aws::EventBridgeSinkOptions options, ProgressTableName table)
      : options_(std::move(options)), table_(std::move(table)) {}

  // The progress record in a table of the database itself: EventBridge cannot be read back.
  Parts make(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
             relay::RecordSink::Handlers handlers, relay::ProgressStore::Written written) override {
    Parts parts;
    parts.progress = pg_progress_store(executor, config, table_, "EventBridge", std::move(written));
    parts.sink =
        std::make_unique<EventBridgePublishers>(executor, config, options_, std::move(handlers));
    return parts;
  }

  // A Source costs the client nothing that lasts.
  bool bounds_topics() const override { return false; }

 private:
  aws::EventBridgeSinkOptions options_;
  ProgressTableName table_;
};

class SqsSinkFactory : public SinkFactory {
 public:
  SqsSinkFactory(aws::SqsSinkOptions sqs, ProgressTableName table)
      : sqs_(std::move(sqs)), table_(std::move(table)) {}

  // The progress record in a table of the database itself: SQS cannot be read back
  // (docs/aws.md).
  Parts make(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
             relay::RecordSink::Handlers handlers, relay::ProgressStore::Written written) override {
    Parts parts;
    parts.progress = pg_progress_store(executor, config, table_, "SQS", std::move(written));
    parts.sink = std::make_unique<SqsPublishers>(
        executor, sqs_, config.on_error == relay::OnError::kDlq ? config.dlq_topic : "",
        std::move(handlers));
    return parts;
  }

  // One queue whatever the topic: nothing lasts per topic.
  bool bounds_topics() const override { return false; }

 private:
  aws::SqsSinkOptions sqs_;
  ProgressTableName table_;
};

}  // namespace

std::unique_ptr<SinkFactory> make_sink_factory(SinkConfig config) {
  if (!config.sqs.queue_url.empty()) {
    return std::make_unique<SqsSinkFactory>(std::move(config.sqs),
                                            std::move(config.progress_table));
  }
  if (!config.eventbridge.bus.empty()) {
    return std::make_unique<EventBridgeSinkFactory>(std::move(config.eventbridge),
                                                    std::move(config.progress_table));
  }
  if (!config.nats.urls.empty()) {
    return std::make_unique<NatsSinkFactory>(std::move(config.nats),
                                             std::move(config.nats_progress_bucket));
  }
  return std::make_unique<KafkaSinkFactory>(std::move(config.kafka));
}

std::unique_ptr<relay::RecordSink> make_aws_record_sink(
    boost::asio::any_io_executor executor, const aws::SqsSinkOptions& sqs,
    const aws::EventBridgeSinkOptions& eventbridge, relay::RecordSink::Handlers handlers) {
  if (!sqs.queue_url.empty()) {
    return std::make_unique<SqsPublishers>(executor, sqs, "", std::move(handlers));
  }
  if (!eventbridge.bus.empty()) {
    return std::make_unique<EventBridgePublishers>(executor, relay::RelayConfig{}, eventbridge,
                                                   std::move(handlers));
  }
  return nullptr;
}

}  // namespace outbox::sinks
