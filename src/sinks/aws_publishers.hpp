// The relay's Amazon SQS (--sqs) and Amazon EventBridge (--eventbridge) sinks: one
// aws::Publisher behind RecordSink. Both services answer every entry on its own, so a record sent
// alone needs nothing of its own: the publisher holds it until nothing else is held. The
// publisher retries throttling, 5xx and transport failures itself (SQS holding each FIFO message
// group's later records behind the one retried); a service that does not answer at all meets the
// relay's deadline (delivery_timeout(): --sqs-timeout, --eventbridge-timeout): the relay rewinds,
// halt() fails what the publisher held, and renew() makes a new publisher (new connections, no
// network call on the io thread) that sends again from the confirmed position. Neither service
// can be read back, so the relay's progress record is kept in PostgreSQL instead
// (pg_progress_store, docs/aws.md). make_aws_record_sink() makes one alone (no progress store) for
// reconcile's repair, which sends a gap's window again on a private io_context.
//
// Region and endpoint are resolved (the config file read) when the sink is made, at start; the
// credentials come from the SDKs' chain at the first request (aws::default_credentials_provider():
// refused or none is the refused handler, exit 1), one provider for the process so that a
// publisher made at a rewind keeps what it fetched. Each maker throws aws::CredentialsError
// (exit 1) or the service's ConfigError (a flag's value: exit 2).
// Private to src/sinks; not thread-safe: the io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/aws/sqs_publisher.hpp"
#include "outbox/relay/record_sink.hpp"

namespace outbox::sinks {

// `dlq_topic`: the dead-letter record's topic (--dlq-topic) with --on-error dlq, else empty; its
// records go to --sqs-dlq.
std::unique_ptr<relay::RecordSink> sqs_publishers(boost::asio::any_io_executor executor,
                                                  const aws::SqsSinkOptions& options,
                                                  std::string dlq_topic,
                                                  relay::RecordSink::Handlers handlers);

// `dlq_topic` as above; its records go to --eventbridge-dlq (or the bus), with the topic as their
// Source.
std::unique_ptr<relay::RecordSink> eventbridge_publishers(boost::asio::any_io_executor executor,
                                                          aws::EventBridgeSinkOptions options,
                                                          std::string dlq_topic,
                                                          relay::RecordSink::Handlers handlers);

}  // namespace outbox::sinks
