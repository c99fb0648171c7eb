// The cross-flag checks (flag_checks.hpp): the combinations of flags that make no sense, checked
// once a command's table has been applied.
#include "flag_checks.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string_view>

#include "flags.hpp"
#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/nats/publisher.hpp"

namespace outbox::app::flags {

void check_kafka_properties(const std::vector<std::pair<std::string, std::string>>& properties,
                            bool allowed, const std::string& source) {
  if (allowed) return;
  struct Unsafe {
    std::string_view name;
    std::string_view does;
  };
  static constexpr Unsafe kUnsafe[] = {
      {"plugin.library.paths", "loads shared libraries into the relay"},
      {"sasl.kerberos.kinit.cmd", "is a shell command librdkafka runs"},
      {"ssl.engine.location", "loads an OpenSSL engine library into the relay"},
      {"ssl.providers", "loads OpenSSL provider modules into the relay"},
  };
  for (const auto& [key, value] : properties) {
    for (const Unsafe& u : kUnsafe) {
      if (key == u.name) {
        throw rejected(source, "property " + key + " " + std::string(u.does) +
                                   ": refused unless --unsafe-kafka-config is given");
      }
    }
    // The default sasl.kerberos.kinit.cmd passes both to /bin/sh.
    if (key == "sasl.kerberos.principal" || key == "sasl.kerberos.keytab") {
      const bool plain = std::all_of(value.begin(), value.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("._-/@:+=,").find(c) != std::string_view::npos;
      });
      if (!plain) {
        throw rejected(source, "property " + key +
                                   " holds shell metacharacters, and librdkafka's kinit command "
                                   "passes it to /bin/sh: refused unless --unsafe-kafka-config "
                                   "is given (the value is not shown)");
      }
    }
  }
}

void check_mapping(const mapping::MapperConfig& m) {
  if (m.format != mapping::Format::kCloudEvents) {
    if (!m.ce_source.empty()) throw rejected("--ce-source", "needs --format cloudevents");
    if (!m.content_type.empty()) throw rejected("--content-type", "needs --format cloudevents");
  }
  if (!m.column_tracestate.empty() && m.column_traceparent.empty()) {
    throw rejected("--column-tracestate",
                   "needs --column-traceparent (a tracestate is read only with its "
                   "traceparent)");
  }
}

namespace {

// The relay publishes to NATS JetStream with --nats (src/nats behind the relay's RecordSink).
constexpr bool kNatsSinkAvailable = true;

// A Kafka setting given, for a sink that is not Kafka: its flag, else null.
const char* kafka_flag_given(const Options& o) {
  if (!o.sinks.kafka.brokers.empty()) return "--brokers";
  if (o.relay.delivery == relay::DeliveryMode::kExactlyOnce) return "--delivery exactly-once";
  if (!o.sinks.kafka.transactional_id.empty()) return "--transactional-id";
  if (!o.kafka_config.empty()) return "--kafka-config";
  if (!o.sinks.kafka.properties.empty()) return "-X";
  return nullptr;
}

// http:// or https://, a host, and a path: what an SQS queue URL is.
void check_queue_url(const char* flag, const std::string& url) {
  const auto scheme = url.find("://");
  const bool http = scheme != std::string::npos &&
                    (url.compare(0, scheme, "http") == 0 || url.compare(0, scheme, "https") == 0);
  const auto path = http ? url.find('/', scheme + 3) : std::string::npos;
  if (!http || path == scheme + 3 || path == std::string::npos || path + 1 >= url.size()) {
    throw flags::rejected(flag, "\"" + url.substr(0, 200) +
                                    "\" is not a queue URL "
                                    "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)");
  }
}

// Amazon SQS (--sqs): no flag of another sink; its dead-letter queue with --on-error dlq.
void check_sqs_sink(const Options& o) {
  const auto& r = o.relay;
  const auto& s = o.sinks.sqs;
  if (s.queue_url.empty()) {
    if (!s.dlq_queue_url.empty()) throw flags::rejected("--sqs-dlq", "needs --sqs");
    return;
  }
  if (!o.sinks.nats.urls.empty()) {
    throw flags::rejected("--sqs", "cannot be used with --nats (one sink)");
  }
  if (const char* kafka_flag = kafka_flag_given(o)) {
    throw flags::rejected("--sqs", std::string("cannot be used with ") + kafka_flag +
                                       " (a Kafka setting; a FIFO queue drops re-sent events "
                                       "by MessageDeduplicationId instead)");
  }
  check_queue_url("--sqs", s.queue_url);
  if (!s.dlq_queue_url.empty()) {
    check_queue_url("--sqs-dlq", s.dlq_queue_url);
    if (r.on_error != relay::OnError::kDlq) {
      throw flags::rejected("--sqs-dlq", "needs --on-error dlq");
    }
  } else if (r.on_error == relay::OnError::kDlq) {
    throw flags::rejected("--on-error", "dlq with --sqs needs --sqs-dlq QUEUE_URL");
  }
}

// --aws-region and --aws-endpoint: for the AWS sinks only; an endpoint is a URL.
void check_aws_flags(const Options& o) {
  const auto& s = o.sinks.sqs;  // the flags fill the SQS and EventBridge options alike
  if (o.sinks.sqs.queue_url.empty() && o.sinks.eventbridge.bus.empty()) {
    if (!s.region.empty()) throw flags::rejected("--aws-region", "needs --sqs or --eventbridge");
    if (!s.endpoint_url.empty()) {
      throw flags::rejected("--aws-endpoint", "needs --sqs or --eventbridge");
    }
  }
  if (!s.queue_url.empty() && !o.sinks.eventbridge.bus.empty()) {
    throw flags::rejected("--sqs", "cannot be used with --eventbridge (one sink)");
  }
  if (!s.endpoint_url.empty() && s.endpoint_url.find("://") == std::string::npos) {
    throw flags::rejected("--aws-endpoint", "\"" + s.endpoint_url.substr(0, 200) +
                                                "\" is not an http:// or https:// URL");
  }
}

// Amazon EventBridge (--eventbridge): no flag of another sink; a bus name or ARN; its dead-letter
// bus only with --on-error dlq.
void check_eventbridge_sink(const Options& o) {
  const auto& e = o.sinks.eventbridge;
  if (e.bus.empty()) {
    if (!e.dlq_bus.empty()) throw flags::rejected("--eventbridge-dlq", "needs --eventbridge");
    return;
  }
  if (!o.sinks.nats.urls.empty()) {
    throw flags::rejected("--eventbridge", "cannot be used with --nats (one sink)");
  }
  if (const char* kafka_flag = kafka_flag_given(o)) {
    throw flags::rejected("--eventbridge",
                          std::string("cannot be used with ") + kafka_flag +
                              (o.relay.delivery == relay::DeliveryMode::kExactlyOnce
                                   ? " (EventBridge has no transactions: at-least-once only)"
                                   : " (a Kafka setting; one sink)"));
  }
  try {
    (void)aws::check_event_bus(e.bus);
  } catch (const aws::EventBridgeConfigError& error) {
    throw flags::rejected("--eventbridge", error.what());
  }
  if (!e.dlq_bus.empty()) {
    try {
      (void)aws::check_event_bus(e.dlq_bus);
    } catch (const aws::EventBridgeConfigError& error) {
      throw flags::rejected("--eventbridge-dlq", error.what());
    }
    if (o.relay.on_error != relay::OnError::kDlq) {
      throw flags::rejected("--eventbridge-dlq", "needs --on-error dlq");
    }
  }
}

// One sink: Kafka (--brokers), NATS JetStream (--nats), Amazon SQS (--sqs) or Amazon EventBridge
// (--eventbridge), and no flag of another.
void check_sink(const Options& o) {
  const auto& n = o.sinks.nats;
  check_aws_flags(o);
  check_sqs_sink(o);
  check_eventbridge_sink(o);
  if (!o.sinks.sqs.queue_url.empty() || !o.sinks.eventbridge.bus.empty()) return;
  if (n.urls.empty()) {
    if (o.sinks.kafka.brokers.empty())
      throw flags::rejected("--brokers", "required (HOST:PORT[,...])");
    const std::pair<const std::string*, const char*> nats_only[] = {
        {&n.credentials_file, "--nats-creds"},
        {&n.nkey_seed_file, "--nats-nkey"},
        {&n.tls_ca_file, "--nats-tls-ca"},
        {&n.tls_cert_file, "--nats-tls-cert"},
        {&n.tls_key_file, "--nats-tls-key"}};
    for (const auto& [value, flag] : nats_only) {
      if (!value->empty()) throw flags::rejected(flag, "needs --nats");
    }
    return;
  }
  if (const char* kafka_flag = kafka_flag_given(o)) {
    throw flags::rejected("--nats", std::string("cannot be used with ") + kafka_flag +
                                        " (a Kafka setting; JetStream drops re-sent events "
                                        "by Nats-Msg-Id instead)");
  }
  if (!n.credentials_file.empty() && !n.nkey_seed_file.empty()) {
    throw flags::rejected("--nats-creds", "cannot be used with --nats-nkey (one identity)");
  }
  if (n.tls_cert_file.empty() != n.tls_key_file.empty()) {
    throw flags::rejected(n.tls_cert_file.empty() ? "--nats-tls-key" : "--nats-tls-cert",
                          "needs --nats-tls-cert and --nats-tls-key together");
  }
  if (!kNatsSinkAvailable) {
    throw flags::rejected("--nats",
                          "publishing to NATS JetStream is not available in this version of "
                          "outbox-relay; use --brokers");
  }
}

}  // namespace

void check_run(const Options& o) {
  const auto& m = o.relay.mapper;
  check_sink(o);
  // A transactional producer that never initialises its transactions refuses every record.
  if (!o.sinks.kafka.transactional_id.empty() &&
      o.relay.delivery != relay::DeliveryMode::kExactlyOnce) {
    throw flags::rejected("--transactional-id", "needs --delivery exactly-once");
  }
  flags::check_mapping(m);
  if (o.progress_table_given && o.sinks.sqs.queue_url.empty() && o.sinks.eventbridge.bus.empty()) {
    throw flags::rejected("--progress-table",
                          "needs --sqs or --eventbridge (Kafka and JetStream keep the progress "
                          "record with the events)");
  }
  if (!o.gap_repair_column.empty()) {
    if (m.table.empty() || (!m.message_prefix.empty() && !o.table_given)) {
      throw flags::rejected("--gap-repair-column",
                            "needs --table (messages leave no rows to repair from)");
    }
  }
  // The envelope has no CloudEvents attributes to map yet: one format for every event.
  if (!m.message_prefix.empty() && m.format == mapping::Format::kCloudEvents) {
    throw flags::rejected("--messages", "is not supported with --format cloudevents yet");
  }
}

void check_messages_mapping(const mapping::MapperConfig& m) {
  try {
    mapping::Mapper check(m);
    (void)check;
  } catch (const std::invalid_argument& e) {
    throw flags::rejected("--topic", e.what());
  }
}

namespace {

// setup's --sqs or --eventbridge: one broker, the dead-letter queue or bus with its own, and the
// values run would refuse.
void check_setup_aws(const SetupOptions& o) {
  const auto& s = o.sqs;
  const auto& e = o.eventbridge;
  if (s.queue_url.empty() && !s.dlq_queue_url.empty()) {
    throw flags::rejected("--sqs-dlq", "needs --sqs");
  }
  if (e.bus.empty() && !e.dlq_bus.empty()) {
    throw flags::rejected("--eventbridge-dlq", "needs --eventbridge");
  }
  if (s.queue_url.empty() && e.bus.empty()) {
    if (!s.region.empty()) throw flags::rejected("--aws-region", "needs --sqs or --eventbridge");
    if (!s.endpoint_url.empty()) {
      throw flags::rejected("--aws-endpoint", "needs --sqs or --eventbridge");
    }
    return;
  }
  const char* flag = s.queue_url.empty() ? "--eventbridge" : "--sqs";
  if (!s.queue_url.empty() && !e.bus.empty()) {
    throw flags::rejected("--sqs", "cannot be used with --eventbridge (one sink)");
  }
  if (!o.nats.urls.empty()) {
    throw flags::rejected(flag, "cannot be used with --nats (one sink)");
  }
  if (!s.endpoint_url.empty() && s.endpoint_url.find("://") == std::string::npos) {
    throw flags::rejected("--aws-endpoint", "\"" + s.endpoint_url.substr(0, 200) +
                                                "\" is not an http:// or https:// URL");
  }
  if (!s.queue_url.empty()) {
    check_queue_url("--sqs", s.queue_url);
    if (!s.dlq_queue_url.empty()) check_queue_url("--sqs-dlq", s.dlq_queue_url);
    return;
  }
  for (const auto& [bus, name] :
       {std::pair{&e.bus, "--eventbridge"}, std::pair{&e.dlq_bus, "--eventbridge-dlq"}}) {
    if (bus->empty()) continue;
    try {
      (void)aws::check_event_bus(*bus);
    } catch (const aws::EventBridgeConfigError& error) {
      throw flags::rejected(name, error.what());
    }
  }
}

}  // namespace

void check_setup(const SetupOptions& o) {
  if (!o.message_writers.empty() && o.message_prefix.empty()) {
    throw flags::rejected("--message-writer", "needs --messages PREFIX");
  }
  const auto& n = o.nats;
  if (n.urls.empty()) {
    const std::pair<const std::string*, const char*> nats_only[] = {
        {&o.nats_stream, "--nats-stream"},     {&n.credentials_file, "--nats-creds"},
        {&n.nkey_seed_file, "--nats-nkey"},    {&n.tls_ca_file, "--nats-tls-ca"},
        {&n.tls_cert_file, "--nats-tls-cert"}, {&n.tls_key_file, "--nats-tls-key"}};
    for (const auto& [value, flag] : nats_only) {
      if (!value->empty()) throw flags::rejected(flag, "needs --nats");
    }
  } else if (o.nats_stream.empty()) {
    throw flags::rejected("--nats",
                          "needs --nats-stream NAME (the stream setup creates or checks)");
  }
  if (o.nats_stream.empty() && !o.stream_setting_given.empty()) {
    throw flags::rejected(o.stream_setting_given,
                          "needs --nats --nats-stream (it shapes the JetStream stream)");
  }
  if (!n.credentials_file.empty() && !n.nkey_seed_file.empty()) {
    throw flags::rejected("--nats-creds", "cannot be used with --nats-nkey (one identity)");
  }
  if (n.tls_cert_file.empty() != n.tls_key_file.empty()) {
    throw flags::rejected(n.tls_cert_file.empty() ? "--nats-tls-key" : "--nats-tls-cert",
                          "needs --nats-tls-cert and --nats-tls-key together");
  }
  if (!o.nats_stream.empty()) {
    try {
      (void)nats_stream_subjects(o.topic_template, o.dlq_subject);
    } catch (const std::invalid_argument& e) {
      throw flags::rejected("--topic", e.what());
    }
  }
  check_setup_aws(o);
}

void check_reconcile(const ReconcileOptions& o) {
  const auto& n = o.nats;
  if (o.resend()) {
    const char* flag = o.sqs.queue_url.empty() ? "--eventbridge" : "--sqs";
    if (!o.sqs.queue_url.empty() && !o.eventbridge.bus.empty()) {
      throw flags::rejected("--sqs", "cannot be used with --eventbridge (one destination)");
    }
    if (!o.brokers.empty() || !n.urls.empty()) {
      throw flags::rejected(flag, "cannot be used with --brokers or --nats (one destination)");
    }
    if (!o.properties.empty() || !o.kafka_config.empty()) {
      throw flags::rejected(flag, "cannot be used with -X or --kafka-config (Kafka settings)");
    }
    if (!o.repair) {
      throw flags::rejected(flag,
                            "needs --repair (it cannot be read back: nothing can be compared, "
                            "the whole window is sent again)");
    }
  } else if (n.urls.empty()) {
    if (o.brokers.empty()) {
      throw flags::rejected("--brokers",
                            "required (HOST:PORT[,...]), or --nats, --sqs or --eventbridge");
    }
    const std::pair<const std::string*, const char*> nats_only[] = {
        {&n.credentials_file, "--nats-creds"},
        {&n.nkey_seed_file, "--nats-nkey"},
        {&n.tls_ca_file, "--nats-tls-ca"},
        {&n.tls_cert_file, "--nats-tls-cert"},
        {&n.tls_key_file, "--nats-tls-key"}};
    for (const auto& [value, flag] : nats_only) {
      if (!value->empty()) throw flags::rejected(flag, "needs --nats");
    }
  } else {
    if (!o.brokers.empty()) throw flags::rejected("--nats", "cannot be used with --brokers");
    if (!o.properties.empty() || !o.kafka_config.empty()) {
      throw flags::rejected("--nats", "cannot be used with -X or --kafka-config (Kafka settings)");
    }
    if (!n.credentials_file.empty() && !n.nkey_seed_file.empty()) {
      throw flags::rejected("--nats-creds", "cannot be used with --nats-nkey (one identity)");
    }
    if (n.tls_cert_file.empty() != n.tls_key_file.empty()) {
      throw flags::rejected(n.tls_cert_file.empty() ? "--nats-tls-key" : "--nats-tls-cert",
                            "needs --nats-tls-cert and --nats-tls-key together");
    }
  }
  flags::check_mapping(o.mapper);
  flags::check_kafka_properties(o.properties, o.unsafe_kafka_config, "-X, --kafka-config");
  // Both ages or both timestamps: the order is known now (mixed ones are checked when run).
  if (o.until && o.since.ago.has_value() == o.until->ago.has_value() &&
      o.since.resolve(0) >= o.until->resolve(0)) {
    throw flags::rejected("--until", o.until->text + " is not after --since " + o.since.text);
  }
}

void check_progress_record(const ProgressRecordFlags& o) {
  if (!o.where.brokers.empty() && !o.where.nats.urls.empty()) {
    throw flags::rejected("--nats", "one progress record: --brokers or --nats");
  }
  if (o.where.pg_table && (!o.where.brokers.empty() || !o.where.nats.urls.empty())) {
    throw flags::rejected("--progress-table",
                          "one progress record: --brokers, --nats or --progress-table");
  }
  flags::check_kafka_properties(o.where.properties, o.unsafe_kafka_config, "-X, --kafka-config");
}

void check_prune(const PruneOptions& o) {
  check_progress_record(o.progress);
  if (o.without_progress_record && o.progress.where.given()) {
    throw flags::rejected("--without-progress-record",
                          std::string("it trusts the slot alone, and ") +
                              (o.progress.where.pg_table          ? "--progress-table"
                               : o.progress.where.brokers.empty() ? "--nats"
                                                                  : "--brokers") +
                              " names a progress record");
  }
  if (!o.without_progress_record && !o.progress.where.given()) {
    throw flags::rejected("--brokers",
                          "required (or --nats, or --progress-table with the relay's --sqs or "
                          "--eventbridge): the relay's progress record shows whether the "
                          "slot is the one the relay delivered through (or "
                          "--without-progress-record to trust the slot alone)");
  }
}

}  // namespace outbox::app::flags

namespace outbox::app {

std::vector<std::string> nats_stream_subjects(const std::string& topic_template,
                                              const std::string& dlq_subject) {
  const mapping::TopicTemplate t(topic_template);
  std::string subject;
  if (t.columns().empty()) {
    subject = t.text();
  } else {
    // The text before the first reference; its last, unfinished token is dropped.
    std::string before;
    t.render(std::vector<std::string_view>(t.columns().size(), "\x01"), before);
    before.resize(before.find('\x01'));
    const std::size_t dot = before.rfind('.');
    if (dot == std::string::npos) {
      throw std::invalid_argument(
          "topic template \"" + topic_template +
          "\" starts with a column, so only a stream capturing every subject (>) would capture "
          "what it renders: give it a literal first token, e.g. outbox.${aggregatetype}");
    }
    subject = before.substr(0, dot + 1) + ">";
  }
  std::vector<std::string> subjects{subject};
  if (dlq_subject != subject && !nats::subject_captures(subject, dlq_subject)) {
    subjects.push_back(dlq_subject);
  }
  return subjects;
}

}  // namespace outbox::app
