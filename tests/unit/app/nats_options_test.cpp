// The JetStream flags of `run`: one sink, Kafka (--brokers) or NATS JetStream (--nats), each
// refused with the other's settings in one line (exit 2); the NATS settings land in
// RelayConfig::nats, which makes the relay publish to JetStream instead of Kafka.
#include <gtest/gtest.h>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

TEST(NatsOptions, NatsReplacesBrokers) {
  CommandLine cl = parse_command_line(
      {"--pg", "x", "--nats", "nats://127.0.0.1:4222", "--nats-nkey", "/etc/relay.nk"});
  EXPECT_EQ(cl.run.sinks.nats.urls, "nats://127.0.0.1:4222");
  EXPECT_EQ(cl.run.sinks.nats.nkey_seed_file, "/etc/relay.nk");
  EXPECT_TRUE(cl.run.sinks.kafka.brokers.empty());
}

TEST(NatsOptions, KafkaSettingsAreRefusedWithNats) {
  const std::vector<std::string> base = {"--pg", "x", "--nats", "nats://a:4222,nats://b:4222"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--brokers", "k:1"}, "--brokers"},
      {{"--delivery", "exactly-once"}, "--delivery exactly-once"},
      {{"-X", "linger.ms=5"}, "-X"},
  };
  for (const auto& [extra, named] : cases) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(error_of(args), "--nats: cannot be used with " + named +
                                  " (a Kafka setting; JetStream drops re-sent events by "
                                  "Nats-Msg-Id instead)");
  }
}

TEST(NatsOptions, NatsSettingsNeedNats) {
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--nats-creds", "/etc/relay.creds"}),
            "--nats-creds: needs --nats");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--nats-tls-ca", "ca.pem"}),
            "--nats-tls-ca: needs --nats");
  EXPECT_EQ(
      error_of({"--pg", "x", "--nats", "nats://a:1", "--nats-creds", "a", "--nats-nkey", "b"}),
      "--nats-creds: cannot be used with --nats-nkey (one identity)");
  EXPECT_EQ(error_of({"--pg", "x", "--nats", "tls://a:1", "--nats-tls-cert", "c.pem"}),
            "--nats-tls-cert: needs --nats-tls-cert and --nats-tls-key together");
}

TEST(NatsOptions, BrokersStaysRequiredWithoutNats) {
  EXPECT_EQ(error_of({"--pg", "x"}), "--brokers: required (HOST:PORT[,...])");
  CommandLine cl = parse_command_line({"--pg", "x", "--brokers", "k:1"});
  EXPECT_TRUE(cl.run.sinks.nats.urls.empty());
}

}  // namespace
}  // namespace outbox::app

namespace outbox::app {
namespace {

// setup --nats --nats-stream: the stream's subjects follow from the topic template (a `>` after
// the literal tokens before the first column: a column value may hold dots), plus the
// dead-letter subject unless already captured.
TEST(NatsSetupOptions, StreamSubjectsFromTheTopicTemplate) {
  using V = std::vector<std::string>;
  EXPECT_EQ(nats_stream_subjects("outbox.event.${aggregatetype}", "outbox.dlq"),
            (V{"outbox.event.>", "outbox.dlq"}));
  EXPECT_EQ(nats_stream_subjects("outbox.${aggregatetype}.events", "outbox.dlq"), (V{"outbox.>"}));
  EXPECT_EQ(nats_stream_subjects("app.orders-${aggregatetype}", "dead"), (V{"app.>", "dead"}));
  EXPECT_EQ(nats_stream_subjects("orders", "outbox.dlq"), (V{"orders", "outbox.dlq"}));
  EXPECT_THROW(nats_stream_subjects("${aggregatetype}.events", "outbox.dlq"),
               std::invalid_argument);
}

TEST(NatsSetupOptions, SubjectCapture) {
  EXPECT_TRUE(nats::subject_captures("outbox.>", "outbox.event.>"));
  EXPECT_TRUE(nats::subject_captures("outbox.>", "outbox.dlq"));
  EXPECT_TRUE(nats::subject_captures("outbox.*.>", "outbox.event.>"));
  EXPECT_FALSE(nats::subject_captures("outbox.event.*", "outbox.event.>"));
  EXPECT_FALSE(nats::subject_captures("outbox.>", "outbox"));
  EXPECT_FALSE(nats::subject_captures("outbox.event", "outbox.event.>"));
  EXPECT_TRUE(nats::subject_captures("outbox.dlq", "outbox.dlq"));
}

TEST(NatsSetupOptions, Flags) {
  CommandLine cl =
      parse_command_line({"setup", "--pg", "x", "--nats", "nats://a:4222", "--nats-stream",
                          "OUTBOX", "--nats-duplicate-window", "10m"});
  EXPECT_EQ(cl.setup.nats.urls, "nats://a:4222");
  EXPECT_EQ(cl.setup.nats_stream, "OUTBOX");
  EXPECT_EQ(cl.setup.nats_duplicate_window, std::chrono::minutes(10));
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--nats", "nats://a:4222"}),
            "--nats: needs --nats-stream NAME (the stream setup creates or checks)");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--nats-stream", "OUTBOX"}),
            "--nats-stream: needs --nats");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--nats-duplicate-window", "5m"}),
            "--nats-duplicate-window: needs --nats --nats-stream (it shapes the JetStream "
            "stream)");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--nats", "nats://a:1", "--nats-stream", "S", "--topic",
                      "${aggregatetype}"})
                .rfind("--topic: topic template \"${aggregatetype}\" starts with a column", 0),
            0u);
}

}  // namespace
}  // namespace outbox::app
