#include <functional>
#include <memory>

#include "aws_publishers.hpp"
#include "kafka_producers.hpp"
#include "kafka_transactions.hpp"
#include "nats_publishers.hpp"
#include "outbox/sinks/sinks.hpp"
#include "progress_stores.hpp"

namespace outbox::sinks {
using relay::SinkFactory;

// A progress record's report and a checkpoint record's come through the sink's handler beside
// the events': their opaques must not meet.
static_assert((kProgressTag & KafkaTransactions::kCheckpointOpaque) == 0);

namespace {

// The dead-letter record's topic where the relay makes dead letters (--on-error dlq).
std::string dlq_topic(const relay::RelayConfig& config) {
  return config.on_error == relay::OnError::kDlq ? config.dlq_topic : std::string();
}

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

// SQS and EventBridge: the progress record in a table of the database itself, as neither can be
// read back (docs/aws.md).
class AwsSinkFactory : public SinkFactory {
 public:
  using MakeSink = std::function<std::unique_ptr<relay::RecordSink>(
      boost::asio::any_io_executor, std::string dlq_topic, relay::RecordSink::Handlers)>;

  AwsSinkFactory(std::string service, MakeSink make_sink, ProgressTableName table)
      : service_(std::move(service)), make_sink_(std::move(make_sink)), table_(std::move(table)) {}

  Parts make(boost::asio::any_io_executor executor, const relay::RelayConfig& config,
             relay::RecordSink::Handlers handlers, relay::ProgressStore::Written written) override {
    Parts parts;
    parts.progress = pg_progress_store(executor, config, table_, service_, std::move(written));
    parts.sink = make_sink_(executor, dlq_topic(config), std::move(handlers));
    return parts;
  }

  // One queue or bus whatever the topic: nothing lasts per topic.
  bool bounds_topics() const override { return false; }

 private:
  std::string service_;
  MakeSink make_sink_;
  ProgressTableName table_;
};

}  // namespace

std::unique_ptr<SinkFactory> make_sink_factory(SinkConfig config) {
  if (!config.sqs.queue_url.empty()) {
    return std::make_unique<AwsSinkFactory>(
        "SQS",
        [sqs = std::move(config.sqs)](boost::asio::any_io_executor executor, std::string dlq_topic,
                                      relay::RecordSink::Handlers handlers) {
          return sqs_publishers(executor, sqs, std::move(dlq_topic), std::move(handlers));
        },
        std::move(config.progress_table));
  }
  if (!config.eventbridge.bus.empty()) {
    return std::make_unique<AwsSinkFactory>(
        "EventBridge",
        [eventbridge = std::move(config.eventbridge)](boost::asio::any_io_executor executor,
                                                      std::string dlq_topic,
                                                      relay::RecordSink::Handlers handlers) {
          return eventbridge_publishers(executor, eventbridge, std::move(dlq_topic),
                                        std::move(handlers));
        },
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
    return sqs_publishers(executor, sqs, "", std::move(handlers));
  }
  if (!eventbridge.bus.empty()) {
    return eventbridge_publishers(executor, eventbridge, "", std::move(handlers));
  }
  return nullptr;
}

}  // namespace outbox::sinks
