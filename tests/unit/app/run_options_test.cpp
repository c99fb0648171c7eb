// Command-line flags of run: defaults, every flag, and one-line errors that name the flag.
#include <gtest/gtest.h>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

Options parse(std::vector<std::string> args) { return parse_options(args); }

TEST(RunOptions, DefaultsMatchDebeziumOutboxRouter) {
  Options o = parse({"--pg", "dbname=x", "--brokers", "k:9092"});
  EXPECT_EQ(o.relay.conninfo, "dbname=x");
  EXPECT_EQ(o.sinks.kafka.brokers, "k:9092");
  EXPECT_EQ(o.relay.slot, "outbox_relay");
  EXPECT_EQ(o.relay.publication, "outbox_relay");
  EXPECT_EQ(o.relay.mapper.schema, "public");
  EXPECT_EQ(o.relay.mapper.table, "outbox");
  EXPECT_EQ(o.relay.mapper.topic_template, "outbox.event.${aggregatetype}");
  EXPECT_EQ(o.relay.mapper.column_id, "id");
  EXPECT_EQ(o.relay.mapper.column_payload, "payload");
  EXPECT_TRUE(o.relay.create);
  EXPECT_EQ(o.relay.status_interval, std::chrono::seconds(10));
  EXPECT_EQ(o.relay.shutdown_timeout, std::chrono::seconds(30));
  EXPECT_EQ(o.relay.read_pause, std::chrono::microseconds(500));
  EXPECT_EQ(o.log_level, "info");
}

TEST(RunOptions, EveryFlagIsApplied) {
  Options o = parse({"--pg=host=h",
                     "--brokers",
                     "a:1,b:2",
                     "--slot",
                     "s",
                     "--publication",
                     "p",
                     "--table",
                     "app.events",
                     "--topic",
                     "t.${kind}",
                     "--no-create",
                     "--column-id",
                     "eid",
                     "--column-aggregatetype",
                     "kind",
                     "--column-aggregateid",
                     "agg",
                     "--column-type",
                     "etype",
                     "--column-payload",
                     "body",
                     "-X",
                     "linger.ms=1",
                     "-Xacks=all",
                     "--status-interval",
                     "500ms",
                     "--shutdown-timeout",
                     "1m",
                     "--read-pause",
                     "250us",
                     "--log-level",
                     "debug",
                     "--max-inflight-events",
                     "10",
                     "--max-inflight-bytes",
                     "2MiB",
                     "--require-json"});
  const auto& r = o.relay;
  EXPECT_EQ(r.conninfo, "host=h");
  EXPECT_EQ(o.sinks.kafka.brokers, "a:1,b:2");
  EXPECT_EQ(r.slot, "s");
  EXPECT_EQ(r.publication, "p");
  EXPECT_EQ(r.mapper.schema, "app");
  EXPECT_EQ(r.mapper.table, "events");
  EXPECT_EQ(r.mapper.topic_template, "t.${kind}");
  EXPECT_FALSE(r.create);
  EXPECT_EQ(r.mapper.column_id, "eid");
  EXPECT_EQ(r.mapper.column_aggregatetype, "kind");
  EXPECT_EQ(r.mapper.column_aggregateid, "agg");
  EXPECT_EQ(r.mapper.column_type, "etype");
  EXPECT_EQ(r.mapper.column_payload, "body");
  ASSERT_EQ(o.sinks.kafka.properties.size(), 2u);
  EXPECT_EQ(o.sinks.kafka.properties[0], (std::pair<std::string, std::string>{"linger.ms", "1"}));
  EXPECT_EQ(o.sinks.kafka.properties[1], (std::pair<std::string, std::string>{"acks", "all"}));
  EXPECT_EQ(r.status_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(r.shutdown_timeout, std::chrono::minutes(1));
  EXPECT_EQ(r.read_pause, std::chrono::microseconds(250));
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(r.max_inflight_events, 10u);
  EXPECT_EQ(r.max_inflight_bytes, 2u << 20);
  EXPECT_TRUE(r.mapper.require_json);
}

TEST(RunOptions, ReadPauseZeroReadsAtOnce) {
  EXPECT_EQ(parse({"--pg", "x", "--brokers", "k:1", "--read-pause", "0"}).relay.read_pause.count(),
            0);
  EXPECT_EQ(parse({"--pg", "x", "--brokers", "k:1", "--read-pause", "2ms"}).relay.read_pause,
            std::chrono::milliseconds(2));
}

TEST(RunOptions, TableWithoutSchemaIsPublic) {
  Options o = parse({"--pg", "x", "--brokers", "k:1", "--table", "events"});
  EXPECT_EQ(o.relay.mapper.schema, "public");
  EXPECT_EQ(o.relay.mapper.table, "events");
}

TEST(RunOptions, ErrorsNameTheFlag) {
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--status-interval", "banana"}),
            "--status-interval: invalid duration 'banana' (expected e.g. 500ms, 10s, 1m, 7d, at "
            "least 1ms)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--status-interval", "200us"}),
            "--status-interval: invalid duration '200us' (expected e.g. 500ms, 10s, 1m, 7d, at "
            "least 1ms)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--read-pause", "soon"}),
            "--read-pause: invalid duration 'soon' (expected e.g. 500ms, 10s, 1m, 7d)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--bogus"}),
            "unknown flag --bogus (see --help)");
  EXPECT_EQ(error_of({"--brokers", "k:1"}), "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(error_of({"--pg", "x"}), "--brokers: required (HOST:PORT[,...])");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--slot"}), "--slot: missing value");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "-X", "novalue"}),
            "-X: expected PROPERTY=VALUE (the value is not shown: it may hold a secret)");
  EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--topic", "a.${b"}).find("--topic:"),
            std::string::npos);
  EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--log-level", "loud"}).find("--log-level"),
            std::string::npos);
  EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--table", "a.b.c"}).find("--table"),
            std::string::npos);
  EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--max-inflight-bytes", "lots"})
                .find("--max-inflight-bytes"),
            std::string::npos);
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--no-create=yes"}),
            "--no-create: takes no value");
}

TEST(RunOptions, HelpListsEveryFlagWithDefault) {
  Options o = parse({"--help"});
  EXPECT_TRUE(o.help);
  std::string u = usage();
  for (const char* flag :
       {"--pg", "--brokers", "--slot", "--publication", "--table", "--topic", "--no-create",
        "--column-id", "--column-aggregatetype", "--column-aggregateid", "--column-type",
        "--column-payload", "-X", "--status-interval", "--read-pause", "--shutdown-timeout",
        "--log-level"}) {
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(u.find("default 10s"), std::string::npos);
}

}  // namespace
}  // namespace outbox::app
