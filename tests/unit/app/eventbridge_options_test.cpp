// The EventBridge flags of `run`: --eventbridge BUS instead of --brokers or --nats (one sink,
// each refused with another's settings in one line: exit 2), --delivery exactly-once refused (no
// transactions), bus names and ARNs checked, --eventbridge-dlq only with --on-error dlq; the
// settings land in SinkConfig::eventbridge, which makes the relay publish to EventBridge.
#include <gtest/gtest.h>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

TEST(EventBridgeOptions, EventBridgeReplacesBrokers) {
  CommandLine cl = parse_command_line(
      {"--pg", "x", "--eventbridge", "arn:aws:events:eu-west-1:123456789012:event-bus/orders",
       "--on-error", "dlq", "--eventbridge-dlq", "dead", "--eventbridge-timeout", "5s",
       "--eventbridge-max-calls", "3"});
  const auto& e = cl.run.sinks.eventbridge;
  EXPECT_EQ(e.bus, "arn:aws:events:eu-west-1:123456789012:event-bus/orders");
  EXPECT_EQ(e.dlq_bus, "dead");
  EXPECT_EQ(e.timeout, std::chrono::seconds(5));
  EXPECT_EQ(e.max_calls, 3u);
  EXPECT_TRUE(cl.run.sinks.kafka.brokers.empty());
  EXPECT_TRUE(cl.run.sinks.nats.urls.empty());
}

TEST(EventBridgeOptions, OneSinkAndNoTransactions) {
  const std::vector<std::string> base = {"--pg", "x", "--eventbridge", "orders"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--brokers", "k:1"},
       "--eventbridge: cannot be used with --brokers (a Kafka setting; one "
       "sink)"},
      {{"-X", "linger.ms=5"}, "--eventbridge: cannot be used with -X (a Kafka setting; one sink)"},
      {{"--delivery", "exactly-once"},
       "--eventbridge: cannot be used with --delivery exactly-once (EventBridge has no "
       "transactions: at-least-once only)"},
      {{"--nats", "nats://a:4222"}, "--eventbridge: cannot be used with --nats (one sink)"},
      {{"--messages", "outbox", "--gap-repair-column", "created_at"},
       "--gap-repair-column: needs --table (messages leave no rows to repair from)"},
  };
  for (const auto& [extra, error] : cases) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(error_of(args), error);
  }
}

TEST(EventBridgeOptions, BusesAndTheDeadLetterBusAreChecked) {
  EXPECT_EQ(error_of({"--pg", "x", "--eventbridge", "no spaces"}),
            "--eventbridge: \"no spaces\" is not an event bus name (letters, digits and . _ - /) "
            "nor an ARN");
  EXPECT_EQ(error_of({"--pg", "x", "--eventbridge", "arn:aws:sqs:eu-west-1:1:q"}),
            "--eventbridge: \"arn:aws:sqs:eu-west-1:1:q\" is not an event bus ARN "
            "(arn:aws:events:REGION:ACCOUNT:event-bus/NAME)");
  EXPECT_EQ(error_of({"--pg", "x", "--eventbridge", "orders", "--eventbridge-dlq", "dead"}),
            "--eventbridge-dlq: needs --on-error dlq");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--eventbridge-dlq", "dead"}),
            "--eventbridge-dlq: needs --eventbridge");
  EXPECT_EQ(error_of({"--pg", "x", "--eventbridge", "orders", "--eventbridge-timeout", "1ms"}),
            error_of({"--pg", "x", "--brokers", "k:1", "--eventbridge-timeout", "1ms"}));
  CommandLine cl =
      parse_command_line({"--pg", "x", "--eventbridge", "orders", "--on-error", "dlq"});
  EXPECT_EQ(cl.run.sinks.eventbridge.dlq_bus, "");  // dead letters on the same bus
}

}  // namespace
}  // namespace outbox::app
