// The flags of the table-less outbox: --messages PREFIX (alone: messages only; with --table: both)
// and --message-format; setup --messages. Bad values exit 2 naming the flag.
#include <gtest/gtest.h>

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

TEST(MessageFlags, ByDefaultNoMessages) {
  const auto& m = parse_command_line(run_with({})).run.relay.mapper;
  EXPECT_TRUE(m.message_prefix.empty());
  EXPECT_EQ(m.table, "outbox");
}

TEST(MessageFlags, MessagesAloneRelayNoTable) {
  const auto& m = parse_command_line(run_with({"--messages", "outbox"})).run.relay.mapper;
  EXPECT_EQ(m.message_prefix, "outbox");
  EXPECT_TRUE(m.table.empty());
  EXPECT_EQ(m.message_format, mapping::MessageFormat::kAuto);
}

TEST(MessageFlags, MessagesWithTableRelayBoth) {
  const auto& m = parse_command_line(run_with({"--messages", "ev", "--table", "app.outbox",
                                               "--message-format", "protobuf"}))
                      .run.relay.mapper;
  EXPECT_EQ(m.message_prefix, "ev");
  EXPECT_EQ(m.schema, "app");
  EXPECT_EQ(m.table, "outbox");
  EXPECT_EQ(m.message_format, mapping::MessageFormat::kProtobuf);
}

TEST(MessageFlags, TheTableFromTheEnvironmentCountsAsGiven) {
  const Environment env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "OUTBOX_RELAY_TABLE") return "public.events";
    return std::nullopt;
  };
  const CommandLine cl = parse_command_line(run_with({"--messages", "ev"}), env);
  EXPECT_EQ(cl.run.relay.mapper.table, "events");
}

TEST(MessageFlags, BadValuesNameTheFlag) {
  EXPECT_NE(error_of(run_with({"--message-format", "xml"})).find("--message-format"),
            std::string::npos);
  EXPECT_NE(error_of(run_with({"--messages", ""})).find("--messages"), std::string::npos);
  const std::string topic = error_of(run_with({"--messages", "ev", "--topic", "t.${tenant}"}));
  EXPECT_NE(topic.find("--topic"), std::string::npos) << topic;
  EXPECT_NE(topic.find("envelope"), std::string::npos) << topic;
  EXPECT_EQ(error_of(run_with({"--topic", "t.${tenant}"})), "no error") << "a column of the table";
  const std::string ce = error_of(run_with({"--messages", "ev", "--format", "cloudevents"}));
  EXPECT_NE(ce.find("--messages"), std::string::npos) << ce;
}

TEST(MessageFlags, SetupMessages) {
  const CommandLine alone = parse_command_line({"setup", "--pg", "x", "--messages", "ev"});
  EXPECT_EQ(alone.setup.message_prefix, "ev");
  EXPECT_FALSE(alone.setup.table_given);
  const CommandLine both =
      parse_command_line({"setup", "--pg", "x", "--messages", "ev", "--table", "t"});
  EXPECT_TRUE(both.setup.table_given);
}

}  // namespace
}  // namespace outbox::app
