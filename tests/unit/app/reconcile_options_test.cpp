// The flags of `outbox-relay reconcile` and its time bounds, and a row read back under those
// flags mapped as the relay maps it. The rest of reconcile:
// tests/unit/lifecycle/reconcile_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <variant>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"
#include "outbox/lifecycle/reconcile.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::app {
namespace {

using namespace std::chrono_literals;
using lifecycle::insert_of;
using lifecycle::ReconcileTable;
using lifecycle::relation_of;

const std::vector<std::string> kBase = {
    "reconcile", "--pg", "x", "--brokers", "k:1", "--column-time", "created_at", "--since", "2h"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> args = kBase;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(ReconcileFlags, DefaultsAreTheRelays) {
  const CommandLine cl = parse_command_line(kBase);
  ASSERT_EQ(cl.command, Command::kReconcile);
  const ReconcileOptions& o = cl.reconcile;
  EXPECT_EQ(o.conninfo, "x");
  EXPECT_EQ(o.brokers, "k:1");
  EXPECT_EQ(o.column_time, "created_at");
  ASSERT_TRUE(o.since.ago);
  EXPECT_EQ(*o.since.ago, 2h);
  EXPECT_FALSE(o.until);
  EXPECT_FALSE(o.repair);
  EXPECT_EQ(o.mapper.schema, "public");
  EXPECT_EQ(o.mapper.table, "outbox");
  EXPECT_EQ(o.mapper.topic_template, "outbox.event.${aggregatetype}");
  EXPECT_EQ(o.mapper.column_id, "id");
  EXPECT_EQ(o.mapper.column_aggregateid, "aggregateid");
  EXPECT_EQ(o.mapper.column_type, "type");
  EXPECT_EQ(o.mapper.column_payload, "payload");
  EXPECT_EQ(o.margin, 1h);
  EXPECT_EQ(o.timeout, 60s);
}

TEST(ReconcileFlags, AllFlags) {
  const CommandLine cl = parse_command_line(with({"--until",
                                                  "2026-11-30T10:00:00Z",
                                                  "--repair",
                                                  "--table",
                                                  "app.events",
                                                  "--topic",
                                                  "ev.${kind}",
                                                  "--column-id",
                                                  "event_id",
                                                  "--column-aggregateid",
                                                  "agg",
                                                  "--column-type",
                                                  "t",
                                                  "--column-payload",
                                                  "body",
                                                  "--margin",
                                                  "5m",
                                                  "--timeout",
                                                  "10s",
                                                  "-X",
                                                  "security.protocol=plaintext",
                                                  "-Xclient.id=r"}));
  const ReconcileOptions& o = cl.reconcile;
  ASSERT_TRUE(o.until);
  EXPECT_FALSE(o.until->ago);
  EXPECT_EQ(o.until->epoch_us, 1'796'032'800'000'000);
  EXPECT_TRUE(o.repair);
  EXPECT_EQ(o.mapper.schema, "app");
  EXPECT_EQ(o.mapper.table, "events");
  EXPECT_EQ(o.mapper.topic_template, "ev.${kind}");
  EXPECT_EQ(o.mapper.column_id, "event_id");
  EXPECT_EQ(o.mapper.column_aggregateid, "agg");
  EXPECT_EQ(o.mapper.column_type, "t");
  EXPECT_EQ(o.mapper.column_payload, "body");
  EXPECT_EQ(o.margin, 5min);
  EXPECT_EQ(o.timeout, 10s);
  ASSERT_EQ(o.properties.size(), 2u);
  EXPECT_EQ(o.properties[0],
            (std::pair<std::string, std::string>{"security.protocol", "plaintext"}));
  EXPECT_EQ(o.properties[1], (std::pair<std::string, std::string>{"client.id", "r"}));
}

TEST(ReconcileFlags, ErrorsNameTheFlag) {
  EXPECT_EQ(error_of({"reconcile", "--brokers", "k:1", "--column-time", "c", "--since", "1h"}),
            "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--column-time", "c", "--since", "1h"}),
            "--brokers: required (HOST:PORT[,...]), or --nats, --sqs or --eventbridge");
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--brokers", "k:1", "--column-time", "c"}),
            "--since: required (an age such as 2h, or a timestamp)");
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--brokers", "k:1", "--since", "1h"}),
            "--column-time: required (the rows' time column, e.g. created_at)");
  EXPECT_EQ(error_of(with({"--since", "yesterday"})).rfind("--since: invalid time 'yesterday'", 0),
            0u);
  EXPECT_EQ(error_of(with({"--until", "3h"})), "--until: 3h is not after --since 2h");
  EXPECT_EQ(error_of(with({"--since", "2026-11-30", "--until", "2026-11-29"})),
            "--until: 2026-11-29 is not after --since 2026-11-30");
  EXPECT_EQ(error_of(with({"--topic", "a.${"})).rfind("--topic: ", 0), 0u);
  EXPECT_EQ(error_of(with({"--table", "a.b.c"})),
            "--table: expected SCHEMA.TABLE or TABLE, got 'a.b.c'");
  EXPECT_EQ(error_of(with({"--margin", "soon"})).rfind("--margin: invalid duration", 0), 0u);
  EXPECT_EQ(error_of(with({"--timeout", "0"})), "--timeout: must be positive");
  EXPECT_EQ(error_of(with({"-X", "novalue"})),
            "-X: expected PROPERTY=VALUE (the value is not shown: it may hold a secret)");
  EXPECT_EQ(error_of(with({"--slot", "s"})), "unknown flag --slot (see --help)");
  EXPECT_EQ(error_of(with({"--repair=yes"})), "--repair: takes no value");
}

// --nats instead of --brokers: the ids are read from JetStream and the repair published there
// (run --nats's gap repair); Kafka's settings are refused with it, NATS's need it.
TEST(ReconcileFlags, NatsInsteadOfBrokers) {
  const std::vector<std::string> base = {"reconcile", "--pg", "x",      "--column-time", "c",
                                         "--since",   "1h",   "--nats", "nats://n:4222"};
  const CommandLine cl = parse_command_line(base);
  EXPECT_EQ(cl.reconcile.nats.urls, "nats://n:4222");
  EXPECT_TRUE(cl.reconcile.brokers.empty());
  const auto plus = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  EXPECT_EQ(error_of(plus({"--brokers", "k:1"})), "--nats: cannot be used with --brokers");
  EXPECT_EQ(error_of(plus({"-X", "client.id=r"})),
            "--nats: cannot be used with -X or --kafka-config (Kafka settings)");
  EXPECT_EQ(error_of(plus({"--nats-tls-cert", "c.pem"})),
            "--nats-tls-cert: needs --nats-tls-cert and --nats-tls-key together");
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--brokers", "k:1", "--column-time", "c", "--since",
                      "1h", "--nats-nkey", "seed"}),
            "--nats-nkey: needs --nats");
}

// --sqs or --eventbridge instead of --brokers: they cannot be read back, so reconcile only sends
// the window again, with --repair (run --gap-repair-column's repair for these sinks).
TEST(ReconcileFlags, SqsAndEventBridgeOnlyResendTheWindow) {
  const std::vector<std::string> base = {"reconcile", "--pg",    "x",  "--column-time",
                                         "c",         "--since", "1h", "--repair"};
  const auto plus = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const CommandLine sqs = parse_command_line(
      plus({"--sqs", "https://sqs.eu-west-1.amazonaws.com/1/q.fifo", "--aws-region", "eu-west-1"}));
  EXPECT_EQ(sqs.reconcile.sqs.queue_url, "https://sqs.eu-west-1.amazonaws.com/1/q.fifo");
  EXPECT_EQ(sqs.reconcile.sqs.region, "eu-west-1");
  EXPECT_TRUE(sqs.reconcile.resend());
  const CommandLine eb =
      parse_command_line(plus({"--eventbridge", "orders", "--aws-endpoint", "http://m:1"}));
  EXPECT_EQ(eb.reconcile.eventbridge.bus, "orders");
  EXPECT_EQ(eb.reconcile.eventbridge.endpoint_url, "http://m:1");
  EXPECT_TRUE(eb.reconcile.resend());
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--column-time", "c", "--since", "1h", "--sqs",
                      "https://sqs.eu-west-1.amazonaws.com/1/q"}),
            "--sqs: needs --repair (it cannot be read back: nothing can be compared, the whole "
            "window is sent again)");
  EXPECT_EQ(error_of(plus({"--eventbridge", "orders", "--brokers", "k:1"})),
            "--eventbridge: cannot be used with --brokers or --nats (one destination)");
  EXPECT_EQ(error_of(plus(
                {"--sqs", "https://sqs.eu-west-1.amazonaws.com/1/q", "--eventbridge", "orders"})),
            "--sqs: cannot be used with --eventbridge (one destination)");
  EXPECT_EQ(error_of(plus({"--sqs", "https://sqs.eu-west-1.amazonaws.com/1/q", "-X", "a=b"})),
            "--sqs: cannot be used with -X or --kafka-config (Kafka settings)");
}

TEST(ReconcileFlags, HelpNeedsNothingElse) {
  const CommandLine cl = parse_command_line({"reconcile", "--help"});
  EXPECT_TRUE(cl.reconcile.help);
  EXPECT_NE(usage(Command::kReconcile).find("--column-time NAME"), std::string::npos);
  EXPECT_NE(usage().find("reconcile"), std::string::npos);
}

TEST(TimeBound, Ages) {
  for (const auto& [text, micros] :
       std::vector<std::pair<std::string, std::int64_t>>{{"500ms", 500'000},
                                                         {"90s", 90'000'000},
                                                         {"30m", 1'800'000'000},
                                                         {"30min", 1'800'000'000},
                                                         {"2h", 7'200'000'000},
                                                         {"7d", 604'800'000'000},
                                                         {"0s", 0}}) {
    const TimeBound b = parse_time_bound("--since", text);
    ASSERT_TRUE(b.ago) << text;
    EXPECT_EQ(b.ago->count(), micros) << text;
    EXPECT_EQ(b.resolve(10'000'000'000'000), 10'000'000'000'000 - micros) << text;
  }
}

TEST(TimeBound, Timestamps) {
  // 2026-11-30T10:00:00Z is 1796032800 s after the epoch.
  constexpr std::int64_t k = 1'796'032'800'000'000;
  for (const auto& [text, micros] : std::vector<std::pair<std::string, std::int64_t>>{
           {"2026-11-30T10:00:00Z", k},
           {"2026-11-30T10:00:00", k},
           {"2026-11-30 10:00:00", k},
           {"2026-11-30T10:00", k},
           {"2026-11-30t10:00z", k},
           {"2026-11-30T11:00:00+01:00", k},
           {"2026-11-30T11:00:00+0100", k},
           {"2026-11-30T11:00:00+01", k},
           {"2026-11-30T07:30:00-02:30", k},
           {"2026-11-30T10:00:00.25Z", k + 250'000},
           {"2026-11-30T10:00:00.1234567Z", k + 123'456},
           {"2026-11-30", k - 36'000'000'000},
           {"1970-01-01T00:00:00Z", 0},
           {"2024-02-29T00:00:00Z", 1'709'164'800'000'000}}) {
    const TimeBound b = parse_time_bound("--until", text);
    EXPECT_FALSE(b.ago) << text;
    EXPECT_EQ(b.epoch_us, micros) << text;
    EXPECT_EQ(b.resolve(42), micros) << text;
  }
}

TEST(TimeBound, Rejects) {
  for (const std::string text :
       {"", "2", "2x", "h", "-1h", "2026-11-31", "2026-02-29", "2026-13-01", "2026-11-30T24:00",
        "2026-11-30T10:60", "2026-11-30T10:00:61", "2026-11-30T10", "2026-11-30T10:00:00.",
        "2026-11-30T10:00:00+25:00", "2026-11-30T10:00:00 UTC", "26-11-30", "2026/11/30",
        "99999999999999999999s", "1000000d"}) {
    try {
      parse_time_bound("--since", text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--since: invalid time '" + text + "'", 0), 0u)
          << e.what();
    }
  }
}

TEST(TimeBound, FormatUtcRoundTrips) {
  EXPECT_EQ(format_utc(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_utc(1'796'032'800'250'001), "2026-11-30T10:00:00.250001Z");
  EXPECT_EQ(format_utc(-1), "1969-12-31T23:59:59.999999Z");
  for (std::int64_t us : {std::int64_t{0}, std::int64_t{1'709'164'800'123'456},
                          std::int64_t{4'102'444'799'999'999}}) {
    EXPECT_EQ(parse_time_bound("--since", format_utc(us)).epoch_us, us);
  }
}

// A row read back from the table, as pgoutput's text would give it, maps through the relay's
// Mapper to the relay's record: placements (a boolean's 't'), partition, timestamp column, bytea
// payload from its hex text, CloudEvents attributes and trace context.
TEST(Rows, MapAsTheRelayMapsThem) {
  const CommandLine cl = parse_command_line(with(
      {"--additional-placement", "urgent:header:X-Urgent,shard:partition", "--column-timestamp",
       "occurred_at", "--format", "cloudevents", "--column-traceparent", "tp"}));
  const ReconcileOptions& o = cl.reconcile;
  ReconcileTable t{"public",
                   "outbox",
                   16385,
                   {"id", "aggregatetype", "aggregateid", "type", "payload", "urgent", "shard",
                    "occurred_at", "tp", "created_at"},
                   {2950, 25, 25, 25, 17, 16, 23, 1184, 25, 1184}};
  mapping::Mapper mapper(o.mapper);
  mapper.on_relation(relation_of(t), true);
  const std::vector<std::optional<std::string>> row = {
      "0b6c2b3e-4c43-4f1e-9d1e-3f3b4a1c2d5e",
      "Order",
      "agg-1",
      "Created",
      "\\x00ff41",
      "t",
      "3",
      "2021-03-04 05:06:07.891234+00",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "2021-03-04 05:06:07+00"};
  const mapping::MapResult r = mapper.map_insert(insert_of(t, row), 1'700'000'000'000'000);
  const auto* ev = std::get_if<mapping::Event>(&r);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->topic, "outbox.event.Order");
  EXPECT_EQ(ev->key, std::optional<std::string_view>("agg-1"));
  EXPECT_EQ(ev->value, std::optional<std::string_view>(std::string_view("\x00\xff"
                                                                        "A",
                                                                        3)));
  EXPECT_EQ(ev->partition, std::optional<std::int32_t>(3));
  EXPECT_EQ(ev->timestamp_ms, std::optional<std::int64_t>(1'614'834'367'891));
  std::vector<std::string> names;
  for (const auto& h : ev->headers) names.emplace_back(h.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time",
                                      "ce_subject", "content-type", "traceparent", "X-Urgent"}));
  EXPECT_EQ(ev->headers.back().value, std::optional<std::string_view>("t"));

  // A NULL payload is the relay's mapping error, with the row's id.
  std::vector<std::optional<std::string>> bad = row;
  bad[4] = std::nullopt;
  const mapping::MapResult e = mapper.map_insert(insert_of(t, bad), 0);
  const auto* err = std::get_if<mapping::MapError>(&e);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->id, "0b6c2b3e-4c43-4f1e-9d1e-3f3b4a1c2d5e");
  EXPECT_EQ(err->column, "payload");
}

TEST(ReconcileFlags, TheRelaysMappingFlags) {
  const CommandLine cl = parse_command_line(with({"--table",
                                                  "a.one",
                                                  "--table",
                                                  "two",
                                                  "--additional-placement",
                                                  "tenant:header",
                                                  "--column-timestamp",
                                                  "occurred_at",
                                                  "--tombstone-on-empty-payload",
                                                  "--require-json",
                                                  "--format",
                                                  "cloudevents",
                                                  "--ce-source",
                                                  "/s/${aggregatetype}",
                                                  "--content-type",
                                                  "application/x-protobuf",
                                                  "--column-traceparent",
                                                  "tp",
                                                  "--column-tracestate",
                                                  "ts"}));
  const auto& m = cl.reconcile.mapper;
  EXPECT_EQ(m.schema, "a");
  EXPECT_EQ(m.table, "one");
  EXPECT_EQ(m.more_tables, (std::vector<std::pair<std::string, std::string>>{{"public", "two"}}));
  ASSERT_EQ(m.additional_placements.size(), 1u);
  EXPECT_EQ(m.additional_placements[0].alias, "tenant");
  EXPECT_EQ(m.column_timestamp, "occurred_at");
  EXPECT_TRUE(m.tombstone_on_empty_payload);
  EXPECT_TRUE(m.require_json);
  EXPECT_EQ(m.format, mapping::Format::kCloudEvents);
  EXPECT_EQ(m.ce_source, "/s/${aggregatetype}");
  EXPECT_EQ(m.content_type, "application/x-protobuf");
  EXPECT_EQ(m.column_traceparent, "tp");
  EXPECT_EQ(m.column_tracestate, "ts");
  // The same checks as run's.
  EXPECT_EQ(error_of(with({"--ce-source", "/x"})), "--ce-source: needs --format cloudevents");
  EXPECT_EQ(error_of(with({"--column-tracestate", "ts"})).rfind("--column-tracestate: needs", 0),
            0u);
  EXPECT_EQ(error_of(with({"--table", "t", "--table", "t"})),
            "--table: table public.t given twice");
  EXPECT_EQ(error_of(with({"--format", "json"})).rfind("--format: unknown format 'json'", 0), 0u);
}

TEST(ReconcileFlags, MappingFlagsFromTheEnvironmentAsRuns) {
  const std::map<std::string, std::string> vars = {
      {"OUTBOX_RELAY_FORMAT", "cloudevents"},
      {"OUTBOX_RELAY_COLUMN_TIMESTAMP", "occurred_at"},
      {"OUTBOX_RELAY_TOMBSTONE_ON_EMPTY_PAYLOAD", "true"},
      {"OUTBOX_RELAY_TABLE", "app.events"},
      {"OUTBOX_RELAY_ADDITIONAL_PLACEMENT", "tenant:header"}};  // argv only, as for run
  const Environment env = [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  const auto m = parse_command_line(with({"--column-timestamp", "cli_at"}), env).reconcile.mapper;
  EXPECT_EQ(m.format, mapping::Format::kCloudEvents);
  EXPECT_EQ(m.column_timestamp, "cli_at");  // the command line wins
  EXPECT_TRUE(m.tombstone_on_empty_payload);
  EXPECT_EQ(m.table, "events");
  EXPECT_TRUE(m.additional_placements.empty());
  const auto run = parse_command_line({"--pg", "x", "--brokers", "k:1"}, env).run.relay.mapper;
  EXPECT_EQ(run.format, m.format);
  EXPECT_EQ(run.table, m.table);
  EXPECT_TRUE(run.additional_placements.empty());
}

TEST(ReconcileFlags, HelpListsTheMappingFlags) {
  const std::string help = usage(Command::kReconcile);
  for (const char* flag :
       {"--additional-placement", "--column-timestamp", "--tombstone-on-empty-payload", "--format",
        "--ce-source", "--content-type", "--column-traceparent", "--column-tracestate",
        "--require-json"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace outbox::app
