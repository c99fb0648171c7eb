// The relay's brokers, chosen in one place: the settings of every sink (filled by the app from
// the flags) and the relay::SinkFactory (outbox/relay/sink_factory.hpp) that builds the chosen
// one's parts for the relay: Kafka (KafkaProducers, the checkpoint topic's progress store, and
// exactly-once's KafkaTransactions), NATS JetStream (NatsPublishers, the key-value bucket's
// progress store), Amazon SQS or Amazon EventBridge (one aws::Publisher behind RecordSink:
// aws_publishers.hpp), both with the progress record in a table of the database itself (they
// cannot be read back). A new sink adds its settings here, its parts in a file of this directory
// and a branch in make_sink_factory(); nothing in src/relay changes.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/aws/sqs_publisher.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/nats/publisher.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/sink_factory.hpp"

namespace outbox::sinks {

// The PostgreSQL table of the relay's progress record with SQS and EventBridge
// (pg/progress_table.hpp; --progress-table). An empty schema: the outbox table's.
struct ProgressTableName {
  std::string schema;
  std::string table = "outbox_relay_progress";
};

struct SinkConfig {
  // Kafka (--brokers, -X, --kafka-config, --transactional-id): the default sink. With
  // exactly-once the transactional.id is kafka.transactional_id, "outbox-relay." + slot when
  // empty.
  kafka::ProducerConfig kafka;
  // NATS JetStream (--nats): urls non-empty means publish there instead of Kafka (`kafka` then
  // unused). The subject is the rendered topic template.
  nats::PublisherConfig nats;
  // With --nats: the JetStream key-value bucket of the relay's progress records (made when
  // missing; what RelayConfig::checkpoint_topic is with Kafka).
  std::string nats_progress_bucket = "outbox-relay-progress";
  // Amazon EventBridge (--eventbridge): bus non-empty means publish there instead of Kafka. The
  // progress record in `progress_table` (EventBridge cannot be read back: docs/aws.md). The region,
  // endpoint and credentials are resolved from these and the environment when the sink is made.
  aws::EventBridgeSinkOptions eventbridge;
  // Amazon SQS (--sqs): queue_url non-empty means publish there instead of Kafka. The progress
  // record in `progress_table` (SQS cannot be read back: docs/aws.md). Region, endpoint and
  // credentials are resolved from these and the environment when the sink is made.
  aws::SqsSinkOptions sqs;
  // With --sqs or --eventbridge: where the progress record lives, a table of the database the
  // relay reads (they cannot be read back).
  ProgressTableName progress_table;
};

// The factory of the sink `config` chooses. Makes nothing until the Relay asks (its
// constructor): a bad setting throws then (kafka::ConfigError, nats::ConfigError,
// aws::SqsConfigError, aws::EventBridgeConfigError, aws::CredentialsError).
std::unique_ptr<relay::SinkFactory> make_sink_factory(SinkConfig config);

// The relay's own record sink for Amazon SQS (`sqs.queue_url` set) or EventBridge
// (`eventbridge.bus` set), without a progress store: the same mapping, batching, retries and
// credentials chain as the relay's (aws_publishers.hpp), for a blocking caller that runs
// `executor`'s io_context itself (reconcile's repair, run --gap-repair-column's). No
// dead letters. nullptr when neither is set. Throws as make_sink_factory()'s make() does.
std::unique_ptr<relay::RecordSink> make_aws_record_sink(
    boost::asio::any_io_executor executor, const aws::SqsSinkOptions& sqs,
    const aws::EventBridgeSinkOptions& eventbridge, relay::RecordSink::Handlers handlers);

}  // namespace outbox::sinks
