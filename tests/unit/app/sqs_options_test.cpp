// The SQS flags of `run`: --sqs replaces --brokers; refused with another sink's settings and
// with --delivery exactly-once in one line (exit 2); --on-error dlq needs --sqs-dlq; the AWS
// settings need --sqs; a queue URL must be one. The settings land in RelayConfig::sqs.
#include <gtest/gtest.h>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

constexpr const char* kQueue = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo";

TEST(SqsOptions, SqsReplacesBrokers) {
  CommandLine cl = parse_command_line({"--pg", "x", "--sqs", kQueue, "--aws-region", "eu-west-1",
                                       "--aws-endpoint", "http://127.0.0.1:4566", "--sqs-timeout",
                                       "5s", "--sqs-max-calls", "4"});
  const auto& s = cl.run.sinks.sqs;
  EXPECT_EQ(s.queue_url, kQueue);
  EXPECT_EQ(s.region, "eu-west-1");
  EXPECT_EQ(s.endpoint_url, "http://127.0.0.1:4566");
  EXPECT_EQ(s.timeout, std::chrono::seconds(5));
  EXPECT_EQ(s.max_calls, 4u);
  EXPECT_TRUE(cl.run.sinks.kafka.brokers.empty());
}

TEST(SqsOptions, OtherSinksAndExactlyOnceAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--brokers", "k:1"},
       "--sqs: cannot be used with --brokers (a Kafka setting; a FIFO queue drops re-sent events "
       "by MessageDeduplicationId instead)"},
      {{"--delivery", "exactly-once"},
       "--sqs: cannot be used with --delivery exactly-once (a Kafka setting; a FIFO queue drops "
       "re-sent events by MessageDeduplicationId instead)"},
      {{"-X", "linger.ms=5"},
       "--sqs: cannot be used with -X (a Kafka setting; a FIFO queue drops re-sent events by "
       "MessageDeduplicationId instead)"},
      {{"--nats", "nats://a:1"}, "--sqs: cannot be used with --nats (one sink)"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args = {"--pg", "x", "--sqs", kQueue};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(error_of(args), message);
  }
}

TEST(SqsOptions, DeadLetterQueueGoesWithOnErrorDlq) {
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--on-error", "dlq"}),
            "--on-error: dlq with --sqs needs --sqs-dlq QUEUE_URL");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--sqs-dlq", kQueue}),
            "--sqs-dlq: needs --on-error dlq");
  CommandLine cl = parse_command_line(
      {"--pg", "x", "--sqs", kQueue, "--on-error", "dlq", "--sqs-dlq", std::string(kQueue) + "2"});
  EXPECT_EQ(cl.run.sinks.sqs.dlq_queue_url, std::string(kQueue) + "2");
}

TEST(SqsOptions, AwsSettingsNeedSqsAndUrlsMustBeQueueUrls) {
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--aws-region", "eu-west-1"}),
            "--aws-region: needs --sqs or --eventbridge");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--aws-endpoint", "http://a:1"}),
            "--aws-endpoint: needs --sqs or --eventbridge");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--eventbridge", "orders"}),
            "--sqs: cannot be used with --eventbridge (one sink)");
  // One region and endpoint for whichever AWS sink runs.
  CommandLine cl = parse_command_line({"--pg", "x", "--eventbridge", "orders", "--aws-region",
                                       "eu-west-1", "--aws-endpoint", "http://127.0.0.1:4566"});
  EXPECT_EQ(cl.run.sinks.eventbridge.region, "eu-west-1");
  EXPECT_EQ(cl.run.sinks.eventbridge.endpoint_url, "http://127.0.0.1:4566");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--sqs-dlq", kQueue}),
            "--sqs-dlq: needs --sqs");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", "orders.fifo"}),
            "--sqs: \"orders.fifo\" is not a queue URL "
            "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", "https://sqs.eu-west-1.amazonaws.com/"}),
            "--sqs: \"https://sqs.eu-west-1.amazonaws.com/\" is not a queue URL "
            "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--aws-endpoint", "localhost:4566"}),
            "--aws-endpoint: \"localhost:4566\" is not an http:// or https:// URL");
  // The gap repair sends the whole window again (SQS cannot be read back); messages leave no rows.
  EXPECT_EQ(parse_options({"--pg", "x", "--sqs", kQueue, "--gap-repair-column", "created_at"})
                .gap_repair_column,
            "created_at");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--messages", "outbox", "--gap-repair-column",
                      "created_at"}),
            "--gap-repair-column: needs --table (messages leave no rows to repair from)");
}

// --progress-table: where the progress record lives with --sqs and --eventbridge (a table of the
// database; TABLE alone: in the outbox table's schema, resolved when the sink is made).
TEST(SqsOptions, ProgressTable) {
  Options o = parse_options({"--pg", "x", "--sqs", kQueue});
  EXPECT_EQ(o.sinks.progress_table.schema, "");
  EXPECT_EQ(o.sinks.progress_table.table, "outbox_relay_progress");
  o = parse_options({"--pg", "x", "--sqs", kQueue, "--progress-table", "relay.progress"});
  EXPECT_EQ(o.sinks.progress_table.schema, "relay");
  EXPECT_EQ(o.sinks.progress_table.table, "progress");
  o = parse_options({"--pg", "x", "--sqs", kQueue, "--progress-table", "progress"});
  EXPECT_EQ(o.sinks.progress_table.schema, "");
  EXPECT_EQ(o.sinks.progress_table.table, "progress");
  EXPECT_EQ(error_of({"--pg", "x", "--sqs", kQueue, "--progress-table", "a.b.c"}),
            "--progress-table: expected SCHEMA.TABLE or TABLE, got 'a.b.c'");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--progress-table", "p"}),
            "--progress-table: needs --sqs or --eventbridge (Kafka and JetStream keep the "
            "progress record with the events)");
  // prune and status read it there.
  const auto prune = parse_command_line(
      {"prune", "--pg", "x", "--older-than", "1d", "--progress-table", "public.p"});
  ASSERT_TRUE(prune.prune.progress.where.pg_table.has_value());
  EXPECT_EQ(prune.prune.progress.where.pg_table->schema, "public");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--progress-table", "p",
                      "--brokers", "k:1"}),
            "--progress-table: one progress record: --brokers, --nats or --progress-table");
}

// setup --sqs / --eventbridge: the queue or bus (and its dead-letter one) that setup checks in the
// account, with the region and endpoint run takes; one sink; the values run would refuse.
TEST(SqsOptions, SetupChecksAQueueOrABus) {
  CommandLine cl = parse_command_line({"setup", "--pg", "x", "--sqs", kQueue, "--sqs-dlq",
                                       std::string(kQueue) + "2", "--aws-region", "eu-west-1",
                                       "--aws-endpoint", "http://127.0.0.1:4566"});
  EXPECT_EQ(cl.setup.sqs.queue_url, kQueue);
  EXPECT_EQ(cl.setup.sqs.dlq_queue_url, std::string(kQueue) + "2");
  EXPECT_EQ(cl.setup.sqs.region, "eu-west-1");
  EXPECT_EQ(cl.setup.sqs.endpoint_url, "http://127.0.0.1:4566");
  cl = parse_command_line(
      {"setup", "--pg", "x", "--eventbridge", "orders", "--eventbridge-dlq", "dead"});
  EXPECT_EQ(cl.setup.eventbridge.bus, "orders");
  EXPECT_EQ(cl.setup.eventbridge.dlq_bus, "dead");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--sqs-dlq", kQueue}), "--sqs-dlq: needs --sqs");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--eventbridge-dlq", "dead"}),
            "--eventbridge-dlq: needs --eventbridge");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--aws-region", "eu-west-1"}),
            "--aws-region: needs --sqs or --eventbridge");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--sqs", kQueue, "--eventbridge", "orders"}),
            "--sqs: cannot be used with --eventbridge (one sink)");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--eventbridge", "orders", "--nats", "nats://a:1",
                      "--nats-stream", "S"}),
            "--eventbridge: cannot be used with --nats (one sink)");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--sqs", "orders.fifo"}),
            "--sqs: \"orders.fifo\" is not a queue URL "
            "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--eventbridge", "arn:aws:sqs:x"})
                .rfind("--eventbridge: ", 0),
            0u);
}

}  // namespace
}  // namespace outbox::app
