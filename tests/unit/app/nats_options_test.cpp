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
  EXPECT_EQ(cl.run.relay.nats.urls, "nats://127.0.0.1:4222");
  EXPECT_EQ(cl.run.relay.nats.nkey_seed_file, "/etc/relay.nk");
  EXPECT_TRUE(cl.run.relay.producer.brokers.empty());
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
  EXPECT_TRUE(cl.run.relay.nats.urls.empty());
}

}  // namespace
}  // namespace outbox::app
