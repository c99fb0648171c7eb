// The flags of --format cloudevents and of the trace context columns: defaults that leave the
// record as it was, values from the command line and from OUTBOX_RELAY_* variables, and bad values
// or combinations that exit 2 with one line naming the flag.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

std::vector<std::string> run_with(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--pg", "x", "--brokers", "k:1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

Environment env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(CloudEventsFlags, DefaultsAreTheDebeziumRecordWithoutTraceHeaders) {
  const auto& m = parse_command_line(run_with({})).run.relay.mapper;
  EXPECT_EQ(m.format, mapping::Format::kDebezium);
  EXPECT_TRUE(m.ce_source.empty());
  EXPECT_TRUE(m.content_type.empty());
  EXPECT_TRUE(m.column_traceparent.empty());
  EXPECT_TRUE(m.column_tracestate.empty());
}

TEST(CloudEventsFlags, CommandLine) {
  const CommandLine cl = parse_command_line(
      run_with({"--format", "cloudevents", "--ce-source", "urn:shop:${aggregatetype}",
                "--content-type=application/x-protobuf; proto=shop.OrderPaid",
                "--column-traceparent", "tp", "--column-tracestate", "ts"}));
  const auto& m = cl.run.relay.mapper;
  EXPECT_EQ(m.format, mapping::Format::kCloudEvents);
  EXPECT_EQ(m.ce_source, "urn:shop:${aggregatetype}");
  EXPECT_EQ(m.content_type, "application/x-protobuf; proto=shop.OrderPaid");
  EXPECT_EQ(m.column_traceparent, "tp");
  EXPECT_EQ(m.column_tracestate, "ts");
  // The trace columns work in the default format too.
  EXPECT_EQ(parse_command_line(run_with({"--column-traceparent", "tp"}))
                .run.relay.mapper.column_traceparent,
            "tp");
}

TEST(CloudEventsFlags, FromTheEnvironmentTheCommandLineWinning) {
  const Environment env = env_of({{"OUTBOX_RELAY_FORMAT", "cloudevents"},
                                  {"OUTBOX_RELAY_CE_SOURCE", "/env/${aggregatetype}"},
                                  {"OUTBOX_RELAY_CONTENT_TYPE", "text/plain"},
                                  {"OUTBOX_RELAY_COLUMN_TRACEPARENT", "tp"},
                                  {"OUTBOX_RELAY_COLUMN_TRACESTATE", "ts"}});
  auto m = parse_command_line(run_with({}), env).run.relay.mapper;
  EXPECT_EQ(m.format, mapping::Format::kCloudEvents);
  EXPECT_EQ(m.ce_source, "/env/${aggregatetype}");
  EXPECT_EQ(m.content_type, "text/plain");
  EXPECT_EQ(m.column_traceparent, "tp");
  EXPECT_EQ(m.column_tracestate, "ts");
  m = parse_command_line(run_with({"--ce-source", "/cli"}), env).run.relay.mapper;
  EXPECT_EQ(m.ce_source, "/cli");
  EXPECT_EQ(error_of(run_with({}), env_of({{"OUTBOX_RELAY_FORMAT", "json"}})),
            "OUTBOX_RELAY_FORMAT (--format): unknown format 'json' (expected debezium or "
            "cloudevents)");
}

TEST(CloudEventsFlags, BadValuesExitTwoNamingTheFlag) {
  EXPECT_EQ(error_of(run_with({"--format", "CloudEvents"})),
            "--format: unknown format 'CloudEvents' (expected debezium or cloudevents)");
  EXPECT_EQ(error_of(run_with({"--format", "cloudevents", "--ce-source", "/x/${oops"})),
            "--ce-source: topic template \"/x/${oops\": unterminated \"${\" at position 3");
  for (const std::string bad :
       {"json", "/json", "application/", "app lication/json", "application/json\n", ""}) {
    EXPECT_EQ(error_of(run_with({"--format", "cloudevents", "--content-type", bad})),
              "--content-type: invalid media type '" + bad +
                  "' (expected TYPE/SUBTYPE[;PARAMETER], e.g. application/x-protobuf)")
        << bad;
  }
  EXPECT_EQ(error_of(run_with({"--column-traceparent"})), "--column-traceparent: missing value");
}

TEST(CloudEventsFlags, CombinationsThatWouldDoNothingExitTwo) {
  EXPECT_EQ(error_of(run_with({"--ce-source", "/x"})), "--ce-source: needs --format cloudevents");
  EXPECT_EQ(error_of(run_with({"--content-type", "application/json"})),
            "--content-type: needs --format cloudevents");
  EXPECT_EQ(error_of(run_with({"--column-tracestate", "ts"})),
            "--column-tracestate: needs --column-traceparent (a tracestate is read only with its "
            "traceparent)");
  // --help is never refused for them.
  EXPECT_EQ(error_of({"--ce-source", "/x", "--help"}), "no error");
}

TEST(CloudEventsFlags, HelpListsThem) {
  const std::string u = usage();
  for (const char* flag :
       {"--format debezium|cloudevents", "--ce-source TEMPLATE", "--content-type MEDIA-TYPE",
        "--column-traceparent NAME", "--column-tracestate NAME"}) {
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace outbox::app
