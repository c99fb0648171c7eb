// The flag tables of the commands (command_tables.hpp): one row per flag, the rows shared by
// several commands written once.
#include "command_tables.hpp"

#include <algorithm>
#include <iterator>

#include "flag_kinds.hpp"
#include "properties_file.hpp"

namespace outbox::app::flags {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// --- rows several commands share

Flag pg_flag(std::string& target, std::string help = "libpq conninfo string or URI [required]") {
  return flags::text("--pg", "CONNINFO", target, std::move(help))
      .require("a libpq conninfo or URI");
}

Flag slot_flag(std::string& target,
               std::string help = "logical replication slot (default outbox_relay)") {
  return flags::name("--slot", target, std::move(help));
}

Flag publication_flag(std::string& target,
                      std::string help = "publication (default outbox_relay)") {
  return flags::name("--publication", target, std::move(help));
}

Flag help_flag(bool& target) { return flags::stop("--help", target, "this text").also("-h"); }

// The NATS server and security rows of run and setup.
Table nats_flags(nats::PublisherConfig& n, std::string urls_help) {
  return {
      flags::text("--nats", "URL[,URL...]", n.urls, std::move(urls_help)),
      flags::text("--nats-creds", "FILE", n.credentials_file,
                  "NATS credentials file (user JWT and NKey seed) for --nats"),
      flags::text("--nats-nkey", "FILE", n.nkey_seed_file,
                  "file holding the NATS user NKey seed (SU...) for --nats"),
      flags::text("--nats-tls-ca", "FILE", n.tls_ca_file,
                  "CA certificates (PEM) to verify the NATS servers with; implies TLS"),
      flags::text("--nats-tls-cert", "FILE", n.tls_cert_file,
                  "client certificate (PEM) for NATS mutual TLS, with --nats-tls-key"),
      flags::text("--nats-tls-key", "FILE", n.tls_key_file, "private key (PEM) of --nats-tls-cert"),
  };
}

// --nats-progress-bucket of run and prune.
Flag nats_bucket_flag(std::string& target, std::string help) {
  return Flag("--nats-progress-bucket", "NAME", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                const bool ok =
                    !value.empty() && value.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-") == std::string::npos;
                if (!ok) {
                  throw flags::rejected(flag,
                                        "must be letters, digits, '-' and '_' (a JetStream "
                                        "bucket name)");
                }
                target = value;
              })
      .defer();
}

// --progress-table of run, setup, status and prune: [SCHEMA.]TABLE, the schema empty (the outbox
// table's) when not given.
Flag progress_table_flag(std::optional<sinks::ProgressTableName>& target, std::string help) {
  return Flag("--progress-table", "SCHEMA.TABLE", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                const auto dot = value.find('.');
                sinks::ProgressTableName name;
                name.schema = dot == std::string::npos ? "" : value.substr(0, dot);
                name.table = dot == std::string::npos ? value : value.substr(dot + 1);
                if ((dot != std::string::npos && name.schema.empty()) || name.table.empty() ||
                    name.table.find('.') != std::string::npos) {
                  throw flags::malformed(flag, "SCHEMA.TABLE or TABLE", value);
                }
                target = std::move(name);
              })
      .defer();
}

// --aws-region and --aws-endpoint of setup and reconcile (run's own say more), into both sinks'
// options: one region and endpoint for whichever AWS service the command names.
Table aws_endpoint_flags(aws::SqsSinkOptions& sqs, aws::EventBridgeSinkOptions& eventbridge) {
  // The setter of one field in both.
  const auto both = [&sqs, &eventbridge](std::string aws::SqsSinkOptions::*in_sqs,
                                         std::string aws::EventBridgeSinkOptions::*in_events) {
    return [&sqs, &eventbridge, in_sqs, in_events](const std::string&, const std::string& v) {
      sqs.*in_sqs = v;
      eventbridge.*in_events = v;
    };
  };
  return {
      {"--aws-region", "REGION",
       "with --sqs or --eventbridge: the AWS region, as for run (default:\n"
       "AWS_REGION, AWS_DEFAULT_REGION, the profile's, else the queue URL's or\n"
       "the bus ARN's)",
       both(&aws::SqsSinkOptions::region, &aws::EventBridgeSinkOptions::region)},
      {"--aws-endpoint", "URL",
       "with --sqs or --eventbridge: the service's endpoint, as for run (default:\n"
       "AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL_EVENTS, then AWS_ENDPOINT_URL,\n"
       "else SQS's queue URL's scheme and host, EventBridge's regional endpoint)",
       both(&aws::SqsSinkOptions::endpoint_url, &aws::EventBridgeSinkOptions::endpoint_url)},
  };
}

// Where prune and status read the relay's progress record.
Table progress_record_flags(ProgressRecordFlags& o, std::string brokers_help) {
  Table table = {
      flags::text("--brokers", "HOST:PORT[,...]", o.where.brokers, std::move(brokers_help)),
      flags::name("--checkpoint-topic", o.where.checkpoint_topic,
                  "the relay's --checkpoint-topic (default outbox-relay.checkpoints)"),
      flags::properties_file("--kafka-config", o.kafka_config, o.warnings,
                             "librdkafka properties from a file (PROPERTY=VALUE lines, # "
                             "comments,\nas kcat -F); -X overrides it"),
      flags::on("--unsafe-kafka-config", o.unsafe_kafka_config,
                "accept librdkafka properties that run a command or load code")
          .argv_only(),
      flags::property("-X", o.where.properties,
                      "librdkafka property for reading the progress record, repeatable"),
  };
  Table nats = nats_flags(o.where.nats,
                          "NATS servers of the relay's progress record, with JetStream (instead\n"
                          "of --brokers)");
  table.insert(table.end(), std::make_move_iterator(nats.begin()),
               std::make_move_iterator(nats.end()));
  table.push_back(nats_bucket_flag(o.where.nats_bucket,
                                   "the relay's --nats-progress-bucket (default "
                                   "outbox-relay-progress)"));
  table.push_back(
      progress_table_flag(o.where.pg_table,
                          "PostgreSQL table of the relay's progress record, as `run --sqs` or\n"
                          "--eventbridge keeps it (instead of --brokers; a TABLE alone is in the\n"
                          "--table's schema; the relay's default: outbox_relay_progress)"));
  table.push_back(flags::duration("--timeout", o.timeout,
                                  "longest wait for the progress record (default 30s)",
                                  {std::chrono::milliseconds(1), flags::Below::kPositive}));
  return table;
}

}  // namespace

Table mapping_flags(mapping::MapperConfig& m, std::string table_help) {
  return {
      flags::tables("--table", m.schema, m.table, m.more_tables, std::move(table_help)),
      flags::topic_template("--topic", m.topic_template,
                            "topic template over columns (default "
                            "'outbox.event.${aggregatetype}')"),
      flags::text("--column-id", "NAME", m.column_id,
                  "event id column, sent as header \"id\" (default id)"),
      flags::text("--column-aggregatetype", "NAME", m.column_aggregatetype,
                  "aggregate type column (default aggregatetype)"),
      flags::text("--column-aggregateid", "NAME", m.column_aggregateid,
                  "aggregate id column, the record key (default aggregateid)"),
      flags::text("--column-type", "NAME", m.column_type,
                  "event type column, sent as header \"type\" (default type)"),
      flags::text("--column-payload", "NAME", m.column_payload,
                  "payload column, the record value (default payload)"),
      flags::on("--require-json", m.require_json,
                "reject payloads that are not valid JSON (default off)"),
      flags::placement("--additional-placement", m.additional_placements,
                       "send one more column as a header (its text; ALIAS names the header,\n"
                       "default the column), or choose the partition by an integer column;\n"
                       "repeatable (Debezium's table.fields.additional.placement)")
          .argv_only(),
      flags::text("--column-timestamp", "NAME", m.column_timestamp,
                  "timestamp or timestamptz column that gives the record timestamp; NULL\n"
                  "falls back to the commit time (default: the commit time)"),
      flags::on("--tombstone-on-empty-payload", m.tombstone_on_empty_payload,
                "a NULL (or empty) payload gives a tombstone: the key and a null value\n"
                "(default: a NULL payload is a mapping error)"),
      flags::choice("--format", "debezium|cloudevents", m.format, "format",
                    {{"debezium", mapping::Format::kDebezium},
                     {"cloudevents", mapping::Format::kCloudEvents}},
                    "record layout: debezium (default; Debezium's outbox event router), or\n"
                    "cloudevents (CloudEvents 1.0, Kafka binary mode: ce_* headers and\n"
                    "content-type beside id and type, the payload as the value)"),
      flags::topic_template(
          "--ce-source", m.ce_source,
          "ce_source of --format cloudevents, a template over columns as --topic\n"
          "(default '/outbox/${aggregatetype}', the --column-aggregatetype)"),
      {"--content-type", "MEDIA-TYPE",
       "content-type header of --format cloudevents (default application/json,\n"
       "or application/octet-stream for a bytea payload column)",
       [&m](const std::string& flag, const std::string& v) {
         // TYPE/SUBTYPE without blanks, then parameters; printable ASCII only (a header value).
         const auto slash = v.find('/');
         const auto end = std::min(v.find(';'), v.size());
         bool ok = slash != std::string::npos && slash > 0 && slash + 1 < end;
         for (std::size_t i = 0; i < v.size(); ++i) {
           const auto c = static_cast<unsigned char>(v[i]);
           ok = ok && c >= (i < end ? 0x21 : 0x20) && c <= 0x7e;
         }
         if (!ok) {
           throw flags::invalid(flag, "media type", v,
                                "expected TYPE/SUBTYPE[;PARAMETER], e.g. application/x-protobuf");
         }
         m.content_type = v;
       }},
      flags::text("--column-traceparent", "NAME", m.column_traceparent,
                  "column sent as W3C header traceparent (NULL: none; an invalid value is\n"
                  "not sent and counted in outbox_relay_invalid_traceparent_total)"),
      flags::text("--column-tracestate", "NAME", m.column_tracestate,
                  "column sent as header tracestate with a valid traceparent (NULL or\n"
                  "empty: none); needs --column-traceparent"),
  };
}

// ---------------------------------------------------------------------------------------------
// The commands' tables.
namespace {

// A non-empty name (flags::name) shown with another metavar.
Flag named(Flag row, std::string metavar) {
  row.metavar = std::move(metavar);
  return row;
}

// The row, noting in `given` that it was given.
Flag noting(Flag row, bool& given) {
  row.apply = [&given, apply = std::move(row.apply)](const std::string& f, const std::string& v) {
    given = true;
    apply(f, v);
  };
  return row;
}

// The row, noting its name in `first` unless an earlier row did.
Flag noting(Flag row, std::string& first) {
  row.apply = [&first, name = row.name, apply = std::move(row.apply)](const std::string& f,
                                                                      const std::string& v) {
    if (first.empty()) first = name;
    apply(f, v);
  };
  return row;
}

}  // namespace

Table run_flags(Options& o) {
  auto& r = o.relay;
  auto& s = o.sinks;
  auto& m = r.mapper;
  Table table = {
      pg_flag(r.conninfo,
              "libpq conninfo string or URI (replication=database is added) [required]"),
      // Required unless --nats (check_sink).
      flags::text("--brokers", "HOST:PORT[,...]", s.kafka.brokers,
                  "Kafka bootstrap servers [required unless --nats]"),
      slot_flag(r.slot),
      publication_flag(r.publication),
      flags::off("--no-create", r.create,
                 "do not create a missing publication or slot: fail instead"),
      flags::on("--accept-slot-loss", r.accept_slot_loss,
                "go on past a loss the progress record (--checkpoint-topic, or\n"
                "--nats-progress-bucket) shows: a missing slot that delivered before\n"
                "(created anew), a slot confirmed past\n"
                "the record, a server whose WAL ends before it; the events in between may\n"
                "be missing; logged as an error and counted. Without it the relay exits 4"),
      flags::name("--gap-repair-column", o.gap_repair_column,
                  "the outbox's time column (e.g. created_at): a slot the progress record\n"
                  "shows was dropped or made anew while the relay was down is made, then\n"
                  "the rows of the gap Kafka or JetStream lacks are published from the\n"
                  "table, in commit order, before streaming (docs/failures.md); with --sqs\n"
                  "or --eventbridge, which cannot be read back, every row of the window is\n"
                  "sent again (at least once; docs/aws.md). Only for an outbox whose rows\n"
                  "stay until prune removes them. Default: such a gap stops the relay (exit 4)")
          .defer(),
      flags::duration("--gap-repair-margin", o.gap_repair_margin,
                      "how far before the progress record's time the gap repair reads the\n"
                      "table (the longest transaction, and clock skew; default 1h)"),
      flags::on("--failover", o.failover,
                "a failover slot (PostgreSQL 17+), kept by standbys with\n"
                "sync_replication_slots; warns when synchronized_standby_slots does not\n"
                "protect it (docs/failover.md)"),
      flags::text("--standby", "CONNINFO", o.standby,
                  "a standby whose synced copy of the slot is checked every 10s:\n"
                  "outbox_relay_failover_ready in /metrics (docs/failover.md); with\n"
                  "--failover, default: the standby among the hosts of a multi-host --pg"),
      flags::properties_file(
          "--kafka-config", o.kafka_config, o.warnings,
          "librdkafka properties from a file (PROPERTY=VALUE lines, # comments,\n"
          "as kcat -F), e.g. security.protocol, sasl.username, sasl.password;\n"
          "-X overrides it; a regular file (warned when group or others may read it)"),
      flags::on("--unsafe-kafka-config", o.unsafe_kafka_config,
                "accept librdkafka properties that run a command or load code\n"
                "(plugin.library.paths, sasl.kerberos.kinit.cmd, ssl.engine.location,\n"
                "ssl.providers): refused without it")
          .argv_only(),
  };
  // The mapping rows, shared with reconcile; run notes whether --table was given (--messages
  // alone relays no table).
  for (Flag& f :
       flags::mapping_flags(m,
                            "outbox table (default public.outbox; none with --messages alone);\n"
                            "repeatable: the tables' events are relayed in one commit order\n"
                            "through one slot, mapped alike")) {
    table.push_back(f.name == "--table" ? noting(std::move(f), o.table_given) : std::move(f));
  }
  table.push_back(named(flags::name("--messages", m.message_prefix,
                                    "also relay transactional logical decoding messages with this "
                                    "prefix\n(pg_logical_emit_message(true, PREFIX, envelope), "
                                    "PostgreSQL 15+);\nwithout --table, only them (default: none);"
                                    "\nrefused while PUBLIC may emit (setup --messages)"),
                        "PREFIX"));
  table.push_back(
      flags::choice("--message-format", "auto|json|protobuf", m.message_format, "format",
                    {{"auto", mapping::MessageFormat::kAuto},
                     {"json", mapping::MessageFormat::kJson},
                     {"protobuf", mapping::MessageFormat::kProtobuf}},
                    "envelope of --messages: protobuf outbox.v1.Event, a JSON object, or auto\n"
                    "(JSON when the content starts with '{', else protobuf; the default)"));
  Table rest = {
      flags::property("-X", s.kafka.properties,
                      "librdkafka producer property, repeatable (e.g. -X linger.ms=10)"),
      flags::duration("--status-interval", r.status_interval,
                      "standby status update period while idle (default 10s);\n"
                      "acknowledged events are confirmed within about a second\n"
                      "whatever it is",
                      {milliseconds(1), Below::kInvalid}),
      flags::duration("--read-pause", r.read_pause,
                      "while the stream is busy, pause up to this long before reading\n"
                      "the socket again, so WAL arrives in large segments (default\n"
                      "500us; 0 reads at once)"),
      flags::duration("--shutdown-timeout", r.shutdown_timeout,
                      "how long a stop may take: up to half of it reading on to the\n"
                      "end of the transaction at hand, the rest for deliveries\n"
                      "(default 30s)"),
      flags::duration("--publication-check-interval", r.publication_check_interval,
                      "longest time between two checks, while streaming, that the\n"
                      "publication publishes every insert into --table (default 30s;\n"
                      "the slot is never confirmed past the last check that passed)",
                      {seconds(1), Below::kIsBelow}),
      flags::count("--max-inflight-events", r.max_inflight_events,
                   "stop reading WAL beyond this many unacknowledged events (default 20000)"),
      flags::size("--max-inflight-bytes", r.max_inflight_bytes,
                  "... or beyond this many unacknowledged bytes (default 16MiB)"),
      flags::choice("--on-error", "fail|dlq", r.on_error, "policy",
                    {{"fail", relay::OnError::kFail}, {"dlq", relay::OnError::kDlq}},
                    "an event that cannot be mapped or delivered for good: stop with exit code 3\n"
                    "(fail, the default), or publish it to --dlq-topic with the error (dlq)"),
      flags::name("--dlq-topic", r.dlq_topic,
                  "dead-letter topic for --on-error dlq (default outbox.dlq)"),
      flags::count("--max-topics", r.max_topics,
                   "distinct Kafka topics events may go to while the process runs; an event\n"
                   "rendering another one is poison, as --on-error says (default 10000)"),
      flags::choice("--delivery", "at-least-once|exactly-once", r.delivery, "delivery",
                    {{"at-least-once", relay::DeliveryMode::kAtLeastOnce},
                     {"exactly-once", relay::DeliveryMode::kExactlyOnce}},
                    "at-least-once (default), or exactly-once: Kafka transactions carrying\n"
                    "whole PostgreSQL transactions and a checkpoint (read them with\n"
                    "isolation.level=read_committed)"),
      flags::text("--transactional-id", "ID", s.kafka.transactional_id,
                  "transactional.id for --delivery exactly-once (default outbox-relay.SLOT);\n"
                  "the relay also uses ID#2 (two producers take turns)"),
      flags::name("--checkpoint-topic", r.checkpoint_topic,
                  "compacted topic of the relay's progress records (--delivery\n"
                  "exactly-once's checkpoints; default outbox-relay.checkpoints)"),
      flags::duration("--transaction-interval", r.transaction_interval,
                      "longest time a Kafka transaction stays open while events flow, for\n"
                      "--delivery exactly-once (default 100ms)",
                      {milliseconds(1), Below::kInvalid}),
      {"--metrics-addr", "HOST:PORT|off",
       "HTTP listener for /metrics, /healthz, /readyz (default 127.0.0.1:9187;\n"
       "when the default address is taken the relay runs without it)",
       [&o](const std::string& flag, const std::string& v) {
         o.metrics_addr_explicit = true;
         if (v == "off") {
           o.metrics_addr.reset();
         } else {
           o.metrics_addr = parse_listen_address(flag, v);
         }
       }},
      flags::choice<std::string>("--log-level", "LEVEL", o.log_level, "level",
                                 {{"trace", "trace"},
                                  {"debug", "debug"},
                                  {"info", "info"},
                                  {"warn", "warn"},
                                  {"error", "error"},
                                  {"off", "off"}},
                                 "trace, debug, info, warn, error or off (default info)"),
      flags::choice("--log-format", "text|json", o.log_format, "format",
                    {{"text", LogFormat::kText}, {"json", LogFormat::kJson}},
                    "log line format on stderr (default text)"),
      flags::duration("--summary-interval", o.summary_interval,
                      "period of the summary log line while streaming, 0 for none (default 1m)"),
      flags::duration("--backlog-interval", o.backlog_interval,
                      "period of the backlog count for /metrics (pending events and the age of\n"
                      "the oldest, from a temporary copy of the slot, as `status` counts\n"
                      "them), 0 for none (default 1m)"),
      flags::count("--backlog-scan-limit", o.backlog_scan_limit,
                   "pgoutput messages one backlog count reads at most; beyond it the count is\n"
                   "a lower bound, the oldest event's age stays exact (default 10000)"),
  };
  Table nats = nats_flags(s.nats,
                          "NATS JetStream servers (nats:// or tls://) to publish to instead of\n"
                          "--brokers: subject = the topic template, Nats-Msg-Id = the event id\n"
                          "(docs/jetstream.md)");
  rest.insert(rest.end(), std::make_move_iterator(nats.begin()),
              std::make_move_iterator(nats.end()));
  rest.push_back(nats_bucket_flag(s.nats_progress_bucket,
                                  "JetStream key-value bucket of the relay's progress records with "
                                  "--nats,\nmade when missing (what --checkpoint-topic is with "
                                  "Kafka; default\noutbox-relay-progress)"));
  Table eventbridge = {
      flags::text("--eventbridge", "BUS", s.eventbridge.bus,
                  "Amazon EventBridge event bus (a name or an ARN) to publish to instead of\n"
                  "--brokers: Source = the topic template, DetailType = the type, Detail\n"
                  "= {\"id\", ..., \"payload\"} (docs/aws.md); at least once, no order; the\n"
                  "progress record in --progress-table (EventBridge cannot be read back)"),
      flags::text("--eventbridge-dlq", "BUS", s.eventbridge.dlq_bus,
                  "with --eventbridge and --on-error dlq: the bus of the dead letters\n"
                  "(Source = --dlq-topic; default: the --eventbridge bus)"),
      flags::duration("--eventbridge-timeout", s.eventbridge.timeout,
                      "with --eventbridge: a PutEvents call's deadline, and the longest wait\n"
                      "for an answer while records wait before the relay rewinds and sends\n"
                      "again what EventBridge has not acknowledged (default 30s)",
                      {milliseconds(100), Below::kInvalid}),
      flags::count("--eventbridge-max-calls", s.eventbridge.max_calls,
                   "with --eventbridge: PutEvents calls in flight at once, each on a\n"
                   "keep-alive connection (default 8)"),
  };
  rest.insert(rest.end(), std::make_move_iterator(eventbridge.begin()),
              std::make_move_iterator(eventbridge.end()));
  Table sqs = {
      flags::text("--sqs", "QUEUE_URL", s.sqs.queue_url,
                  "Amazon SQS queue to publish to instead of --brokers (a FIFO queue:\n"
                  "MessageGroupId = the key, MessageDeduplicationId = the event id;\n"
                  "docs/aws.md); the progress record in --progress-table (SQS cannot be\n"
                  "read back)"),
      flags::text("--sqs-dlq", "QUEUE_URL", s.sqs.dlq_queue_url,
                  "SQS dead-letter queue for --on-error dlq with --sqs (required then)"),

      flags::duration("--sqs-timeout", s.sqs.timeout,
                      "with --sqs: a call's deadline, and the longest wait for an answer\n"
                      "while records wait before the relay rewinds and sends again what SQS\n"
                      "has not acknowledged (default 30s)",
                      {milliseconds(100), Below::kInvalid}),
      flags::count("--sqs-max-calls", s.sqs.max_calls,
                   "with --sqs: SendMessageBatch calls in flight at once, each on a\n"
                   "keep-alive connection (default 8)"),
  };
  rest.insert(rest.end(), std::make_move_iterator(sqs.begin()), std::make_move_iterator(sqs.end()));
  rest.push_back(noting(
      progress_table_flag(o.progress_table,
                          "with --sqs or --eventbridge: the PostgreSQL table of the relay's\n"
                          "progress record, made when missing (default outbox_relay_progress,\n"
                          "in the --table's schema; docs/aws.md)"),
      o.progress_table_given));
  // One region and endpoint for whichever AWS sink runs (check_sink() refuses them without one).
  Table aws = {
      {"--aws-region", "REGION",
       "with --sqs or --eventbridge: the AWS region that signs the requests\n"
       "(default: AWS_REGION, AWS_DEFAULT_REGION, the profile's, else the queue\n"
       "URL's or the bus ARN's)",
       [&s](const std::string&, const std::string& v) {
         s.sqs.region = v;
         s.eventbridge.region = v;
       }},
      {"--aws-endpoint", "URL",
       "with --sqs or --eventbridge: the service's endpoint (default:\n"
       "AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL_EVENTS, then AWS_ENDPOINT_URL,\n"
       "else SQS's queue URL's scheme and host, EventBridge's regional endpoint)",
       [&s](const std::string&, const std::string& v) {
         s.sqs.endpoint_url = v;
         s.eventbridge.endpoint_url = v;
       }},
  };
  rest.insert(rest.end(), std::make_move_iterator(aws.begin()), std::make_move_iterator(aws.end()));
  rest.push_back(help_flag(o.help));
  rest.push_back(flags::stop("--version", o.version, "print the version"));
  table.insert(table.end(), std::make_move_iterator(rest.begin()),
               std::make_move_iterator(rest.end()));
  return table;
}

Table setup_flags(SetupOptions& o) {
  Table table = {
      pg_flag(o.conninfo),
      slot_flag(o.slot),
      publication_flag(o.publication),
      noting(flags::table("--table", o.schema, o.table,
                          "outbox table (default public.outbox; none with --messages alone)"),
             o.table_given),
      flags::on("--create-table", o.create_table, "create the outbox table if it does not exist"),
      flags::on("--failover", o.failover,
                "create the slot as a failover slot (PostgreSQL 17+); refused unless the\n"
                "primary's synchronized_standby_slots protects it (docs/failover.md)"),
      named(flags::name("--messages", o.message_prefix,
                        "install outbox.emit(), which emits messages with this prefix for\n"
                        "`outbox-relay --messages PREFIX`; without --table no table is needed\n"
                        "and the publication is created empty; revokes EXECUTE on\n"
                        "pg_logical_emit_message from PUBLIC (needs a superuser)"),
            "PREFIX"),
      Flag("--message-writer", "ROLE",
           "with --messages: a role that may emit messages (EXECUTE on\n"
           "pg_logical_emit_message and outbox.emit); repeatable",
           [&o](const std::string& flag, const std::string& value) {
             if (value.empty()) throw flags::rejected(flag, "must not be empty");
             o.message_writers.push_back(value);
           })
          .argv_only(),
  };
  Table nats = nats_flags(o.nats,
                          "NATS JetStream server (nats:// or tls://) on which to create, or\n"
                          "check, the --nats-stream that `run --nats` publishes into");
  table.insert(table.end(), std::make_move_iterator(nats.begin()),
               std::make_move_iterator(nats.end()));
  Table stream = {
      flags::name("--nats-stream", o.nats_stream,
                  "with --nats: create this JetStream stream (file storage) capturing the\n"
                  "subjects --topic renders and --dlq-topic; an existing one is checked,\n"
                  "not changed (docs/jetstream.md)"),
      noting(flags::duration("--nats-duplicate-window", o.nats_duplicate_window,
                             "the stream's duplicate window: re-sent events within it are\n"
                             "stored once (default 2m; an existing stream needs at least it)",
                             {std::chrono::seconds(1), Below::kIsBelow}),
             o.stream_setting_given),
      noting(flags::topic_template("--topic", o.topic_template,
                                   "the relay's topic template, whose subjects the stream\n"
                                   "captures (default 'outbox.event.${aggregatetype}':\n"
                                   "outbox.event.>)"),
             o.stream_setting_given),
      noting(flags::name("--dlq-topic", o.dlq_subject,
                         "the relay's dead-letter subject, also captured (default outbox.dlq)"),
             o.stream_setting_given),
      flags::text("--sqs", "QUEUE_URL", o.sqs.queue_url,
                  "the Amazon SQS queue `run --sqs` publishes to: checked, never created\n"
                  "(it exists and the credentials may read it; FIFO or standard;\n"
                  "content-based deduplication; MaximumMessageSize: docs/aws.md)"),
      flags::text("--sqs-dlq", "QUEUE_URL", o.sqs.dlq_queue_url,
                  "with --sqs: the relay's dead-letter queue (run --sqs-dlq), checked too"),
      flags::text("--eventbridge", "BUS", o.eventbridge.bus,
                  "the Amazon EventBridge event bus (a name or an ARN) `run --eventbridge`\n"
                  "publishes to: checked (DescribeEventBus), never created"),
      flags::text("--eventbridge-dlq", "BUS", o.eventbridge.dlq_bus,
                  "with --eventbridge: the relay's dead-letter bus (run --eventbridge-dlq),\n"
                  "checked too"),
      progress_table_flag(o.progress_table,
                          "create the PostgreSQL table of the relay's progress record that\n"
                          "`run --sqs` or --eventbridge keeps (a TABLE alone is in the --table's\n"
                          "schema; the relay's default: outbox_relay_progress; docs/aws.md)"),
      help_flag(o.help),
  };
  Table aws = aws_endpoint_flags(o.sqs, o.eventbridge);
  stream.insert(stream.end() - 2, std::make_move_iterator(aws.begin()),
                std::make_move_iterator(aws.end()));
  table.insert(table.end(), std::make_move_iterator(stream.begin()),
               std::make_move_iterator(stream.end()));
  return table;
}

Table status_flags(StatusOptions& o) {
  Table table = {
      pg_flag(o.conninfo),
      slot_flag(o.slot),
      publication_flag(o.publication, "publication the relay reads (default outbox_relay)"),
      flags::table("--table", o.schema, o.table,
                   "outbox table; inserts into its partitions count too (default public.outbox)"),
      flags::on("--json", o.json, "one JSON object instead of the table"),
      flags::text("--standby", "CONNINFO", o.standby,
                  "a standby: unhealthy unless it holds a synced, persistent copy of the\n"
                  "failover slot (docs/failover.md); default for a failover slot: the\n"
                  "standby among the hosts of a multi-host --pg"),
      flags::size("--max-retained", o.max_retained_bytes,
                  "unhealthy when the slot retains more WAL than this (default 1GiB)"),
      flags::count("--max-pending", o.max_pending,
                   "unhealthy when more than N events are pending (default: no limit)"),
      flags::duration("--max-age", o.max_age,
                      "unhealthy when the oldest pending event committed longer ago than\n"
                      "this, e.g. 5m (default: no limit)"),
      flags::count("--scan-limit", o.scan_limit,
                   "read at most about N changes (pgoutput messages) when counting;\n"
                   "past it the counts are lower bounds, shown as \">= N\" (default 100000)"),
  };
  Table record = progress_record_flags(o.progress,
                                       "Kafka bootstrap servers holding the relay's progress "
                                       "record: shown,\nand unhealthy when the slot is confirmed "
                                       "past it (or it is missing\nwhile the record is not)");
  table.insert(table.end(), std::make_move_iterator(record.begin()),
               std::make_move_iterator(record.end()));
  table.push_back(help_flag(o.help));
  return table;
}

Table drop_flags(DropOptions& o) {
  return {
      pg_flag(o.conninfo),
      slot_flag(o.slot),
      publication_flag(o.publication),
      flags::on("--yes", o.yes, "really drop (refuses without it)").argv_only(),
      help_flag(o.help),
  };
}

Table prune_flags(PruneOptions& o) {
  Table table = {
      pg_flag(o.conninfo),
      slot_flag(o.slot, "logical replication slot the relay uses (default outbox_relay)"),
      flags::table("--table", o.schema, o.table, "outbox table (default public.outbox)"),
      flags::duration("--older-than", o.older_than, "retention, e.g. 7d, 12h, 30m [required]")
          .require("the retention, e.g. 7d; rows younger are kept"),
      flags::name("--column-time", o.column_time,
                  "timestamp column of the outbox the retention is measured on\n"
                  "(default created_at; prune refuses when the table has no such column)"),
      flags::count("--batch", o.batch, "rows per DELETE transaction (default 1000)"),
      flags::duration("--pause", o.pause, "pause between two batches (default 100ms)"),
      flags::on("--dry-run", o.dry_run, "only count what would be deleted or dropped"),
  };
  Table record = progress_record_flags(o.progress,
                                       "Kafka bootstrap servers holding the relay's progress "
                                       "record: prune\nrefuses when the slot is confirmed past it "
                                       "[required: this, --nats or\n--without-progress-record]");
  table.insert(table.end(), std::make_move_iterator(record.begin()),
               std::make_move_iterator(record.end()));
  table.push_back(flags::on("--without-progress-record", o.without_progress_record,
                            "trust the slot alone (a slot made anew after a loss would let\n"
                            "rows never delivered be deleted)")
                      .argv_only());
  table.push_back(help_flag(o.help));
  return table;
}
namespace {

const CommandWord kCommands[] = {
    {"run", Command::kRun, "relay events (the default)"},
    {"setup", Command::kSetup,
     "create the publication and the slot (and the table with --create-table)"},
    {"status", Command::kStatus,
     "show the slot's state and the pending events; exit 1 when it is missing,\n"
     "lost, retains too much WAL, or the backlog exceeds --max-pending/--max-age"},
    {"drop", Command::kDrop, "drop the slot and the publication (needs --yes)"},
    {"reconcile", Command::kReconcile,
     "list (and with --repair publish) outbox rows of a time window missing from Kafka"},
    {"prune", Command::kPrune,
     "delete outbox rows past a retention that the slot certainly confirmed"},
};

}  // namespace

std::span<const CommandWord> command_words() { return kCommands; }

Table reconcile_table(ReconcileOptions& o) {
  Table table = {
      pg_flag(o.conninfo),
      // Required unless --nats (check_reconcile).
      flags::text("--brokers", "HOST:PORT[,...]", o.brokers,
                  "Kafka bootstrap servers [required unless --nats]"),
      flags::text("--column-time", "NAME", o.column_time,
                  "the rows' time column (timestamptz; timestamp is read in the\n"
                  "server's time zone) [required]")
          .require("the rows' time column, e.g. created_at"),
      flags::time_bound("--since", o.since,
                        "window start, inclusive: 2h (two hours ago), 7d, or\n"
                        "2026-11-30T10:00:00Z (no offset: UTC) [required]")
          .require("an age such as 2h, or a timestamp"),
      flags::time_bound("--until", o.until,
                        "window end, exclusive (default: now). With a relay running, end\n"
                        "the window a little in the past (e.g. --until 1m) so that events\n"
                        "still on their way are not reported"),
      flags::on("--repair", o.repair,
                "publish the missing events, then exit 0 if all were acknowledged")
          .argv_only(),
      flags::duration("--margin", o.margin,
                      "read Kafka from records stamped since - margin (default 1h); records\n"
                      "are stamped with their commit time, at or after the time column\n"
                      "when it is set by the database clock in the inserting transaction;\n"
                      "with --column-timestamp the topics are read from their beginning"),
      flags::duration("--timeout", o.timeout,
                      "longest wait for Kafka without progress (default 60s)",
                      {std::chrono::milliseconds(1), flags::Below::kPositive})
          .defer(),
      flags::properties_file(
          "--kafka-config", o.kafka_config, o.warnings,
          "librdkafka properties from a file (PROPERTY=VALUE lines, # comments,\n"
          "as kcat -F); -X overrides it"),
      flags::on("--unsafe-kafka-config", o.unsafe_kafka_config,
                "accept librdkafka properties that run a command or load code")
          .argv_only(),
      flags::property("-X", o.properties,
                      "librdkafka property for the consumer and the producer, repeatable"),
  };
  Table nats = nats_flags(o.nats,
                          "NATS JetStream servers (nats:// or tls://) to read the stored ids\n"
                          "from, and with --repair publish to, instead of Kafka (the streams\n"
                          "capturing the subjects; messages stored since - margin)");
  table.insert(table.end(), std::make_move_iterator(nats.begin()),
               std::make_move_iterator(nats.end()));
  Table aws = {
      flags::text("--sqs", "QUEUE_URL", o.sqs.queue_url,
                  "the Amazon SQS queue `run --sqs` publishes to, instead of Kafka: it\n"
                  "cannot be read back, so nothing is compared and --repair (required)\n"
                  "sends every row of the window again, as the relay sends it"),
      flags::text("--eventbridge", "BUS", o.eventbridge.bus,
                  "the Amazon EventBridge bus `run --eventbridge` publishes to, instead\n"
                  "of Kafka: as --sqs, --repair sends the whole window again"),
  };
  Table endpoint = aws_endpoint_flags(o.sqs, o.eventbridge);
  aws.insert(aws.end(), std::make_move_iterator(endpoint.begin()),
             std::make_move_iterator(endpoint.end()));
  table.insert(table.end(), std::make_move_iterator(aws.begin()),
               std::make_move_iterator(aws.end()));
  table.push_back(help_flag(o.help));
  // The relay's mapping rows (run's), so that a repaired record is built as the relay builds it.
  Table mapping =
      flags::mapping_flags(o.mapper,
                           "outbox table (default public.outbox); repeatable, as the relay's:\n"
                           "every table's window is checked, mapped alike");
  const auto after_repair =
      std::find_if(table.begin(), table.end(), [](const Flag& f) { return f.name == "--repair"; });
  table.insert(after_repair + 1, std::make_move_iterator(mapping.begin()),
               std::make_move_iterator(mapping.end()));
  return table;
}

// The tables for the reference pages (reference.cpp).
void visit_table(Command command, const std::function<void(const Table&)>& visit) {
  CommandLine storage;
  switch (command) {
    case Command::kRun:
      visit(run_flags(storage.run));
      return;
    case Command::kSetup:
      visit(setup_flags(storage.setup));
      return;
    case Command::kStatus:
      visit(status_flags(storage.status));
      return;
    case Command::kDrop:
      visit(drop_flags(storage.drop));
      return;
    case Command::kReconcile:
      visit(reconcile_table(storage.reconcile));
      return;
    case Command::kPrune:
      visit(prune_flags(storage.prune));
      return;
  }
}

}  // namespace outbox::app::flags
