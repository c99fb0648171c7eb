// The flags of the outbox shapes: --additional-placement (Debezium's
// table.fields.additional.placement, repeatable or as its comma-separated list),
// --column-timestamp and --tombstone-on-empty-payload; bad values exit 2 naming the flag.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

using mapping::Placement;

std::vector<std::string> run_with(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--pg", "x", "--brokers", "k:1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(ShapeFlags, DefaultsLeaveTheRecordAsDebeziumsDefault) {
  const CommandLine cl = parse_command_line(run_with({}));
  EXPECT_TRUE(cl.run.relay.mapper.additional_placements.empty());
  EXPECT_TRUE(cl.run.relay.mapper.column_timestamp.empty());
  EXPECT_FALSE(cl.run.relay.mapper.tombstone_on_empty_payload);
}

TEST(ShapeFlags, AdditionalPlacementsInOrderRepeatedOrCommaSeparated) {
  const CommandLine cl = parse_command_line(run_with({"--additional-placement", "tenant:header",
                                                      "--additional-placement=type:HEADER:"
                                                      "eventType,shard:partition"}));
  const auto& p = cl.run.relay.mapper.additional_placements;
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].column, "tenant");
  EXPECT_EQ(p[0].kind, Placement::Kind::kHeader);
  EXPECT_EQ(p[0].alias, "tenant");
  EXPECT_EQ(p[1].column, "type");
  EXPECT_EQ(p[1].kind, Placement::Kind::kHeader);
  EXPECT_EQ(p[1].alias, "eventType");
  EXPECT_EQ(p[2].column, "shard");
  EXPECT_EQ(p[2].kind, Placement::Kind::kPartition);
}

TEST(ShapeFlags, BadPlacementsExitTwoNamingTheFlag) {
  const std::string form = "--additional-placement: expected COLUMN:header|partition[:ALIAS], got ";
  EXPECT_EQ(error_of(run_with({"--additional-placement", "tenant"})), form + "'tenant'");
  EXPECT_EQ(error_of(run_with({"--additional-placement", ":header"})), form + "':header'");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:header:"})), form + "'a:header:'");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:header:b:c"})),
            form + "'a:header:b:c'");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:header,"})), form + "''");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:footer"})),
            "--additional-placement: unknown placement 'footer' (expected header or partition)");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:envelope"})),
            "--additional-placement: 'a:envelope': envelope placement is not supported (the "
            "record value is the payload column as it is)");
  EXPECT_EQ(error_of(run_with({"--additional-placement", "a:partition", "--additional-placement",
                               "b:partition"})),
            "--additional-placement: a second partition placement ('b:partition' after column "
            "a): one column chooses the partition");
  EXPECT_EQ(error_of(run_with({"--additional-placement"})),
            "--additional-placement: missing value");
}

TEST(ShapeFlags, TimestampColumnAndTombstones) {
  const CommandLine cl = parse_command_line(
      run_with({"--column-timestamp", "occurred_at", "--tombstone-on-empty-payload"}));
  EXPECT_EQ(cl.run.relay.mapper.column_timestamp, "occurred_at");
  EXPECT_TRUE(cl.run.relay.mapper.tombstone_on_empty_payload);
  EXPECT_EQ(error_of(run_with({"--tombstone-on-empty-payload=yes"})),
            "--tombstone-on-empty-payload: takes no value");
  EXPECT_EQ(error_of(run_with({"--column-timestamp"})), "--column-timestamp: missing value");
}

TEST(ShapeFlags, TableIsRepeatable) {
  CommandLine cl = parse_command_line(run_with({}));
  EXPECT_EQ(cl.run.relay.mapper.schema, "public");
  EXPECT_EQ(cl.run.relay.mapper.table, "outbox");
  EXPECT_TRUE(cl.run.relay.mapper.more_tables.empty());
  cl = parse_command_line(
      run_with({"--table", "billing.outbox", "--table", "shipping.outbox", "--table=outbox"}));
  EXPECT_EQ(cl.run.relay.mapper.schema, "billing");
  EXPECT_EQ(cl.run.relay.mapper.table, "outbox");
  EXPECT_EQ(cl.run.relay.mapper.more_tables, (std::vector<std::pair<std::string, std::string>>{
                                                 {"shipping", "outbox"}, {"public", "outbox"}}));
  EXPECT_EQ(error_of(run_with({"--table", "a.x", "--table", "b.x", "--table", "a.x"})),
            "--table: table a.x given twice");
  // A bad table is reported even when a good one follows.
  EXPECT_EQ(error_of(run_with({"--table", "a.b.c", "--table", "good"})),
            "--table: expected SCHEMA.TABLE or TABLE, got 'a.b.c'");
  EXPECT_EQ(error_of(run_with({"--table", "good", "--table", "."})),
            "--table: expected SCHEMA.TABLE or TABLE, got '.'");
}

TEST(ShapeFlags, HelpListsThem) {
  const std::string u = usage();
  for (const char* flag : {"--additional-placement COLUMN:header|partition[:ALIAS]",
                           "--column-timestamp NAME", "--tombstone-on-empty-payload"}) {
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace outbox::app
