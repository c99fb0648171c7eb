// The deployment files (deploy/: alert rules, dashboard, Kubernetes manifests; docker/compose.yaml)
// against a real relay: every metric, label and fixed label value their queries use is in its
// /metrics, and every path they probe or scrape answers 200 while it streams. The checking is
// tests/deploy/check_deploy.py (`live`), run on the relay this test starts against the real
// PostgreSQL and Kafka of scripts/test.sh.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class DeployMetrics : public E2eTest {
 protected:
  DeployMetrics() : E2eTest({"deploy", {"DeployOrder"}, OUTBOX_TEST_LOG_DIR}) {}
};

TEST_F(DeployMetrics, EveryQueriedMetricAndProbedPathIsReal) {
  constexpr int kEvents = 20;
  create_outbox_table();
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  // A backlog count every second, so that its series exist when the script scrapes; --standby
  // (here the primary itself: never ready) for the failover readiness series the rules query.
  RelayProcess& relay = start_relay({"--backlog-interval", "1s", "--standby", conninfo_});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  // Events, so that the per-topic and histogram series have samples.
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) SELECT '" + aggregatetypes_[0] +
            "', 'agg-' || g, 'Created', jsonb_build_object('seq', g)"
            " FROM generate_series(1, " +
            std::to_string(kEvents) + ") AS g");
  KafkaReader reader(brokers_, topics_);
  ASSERT_TRUE(
      reader.read_until([&](const auto& records) { return records.size() >= kEvents; }, 60s))
      << reader.records().size() << " of " << kEvents << " events in Kafka within 60 s";
  // The backlog count ran (ok) after the events: its gauges and counters are exposed.
  ASSERT_TRUE(wait_until(
      [&] {
        const auto samples = parse_samples(http_get(port, "/metrics").body);
        const auto ok = samples.find("outbox_relay_backlog_scans_total{result=\"ok\"}");
        return ok != samples.end() && std::stoull(ok->second) >= 2 &&
               samples.count("outbox_relay_oldest_pending_age_seconds") == 1 &&
               samples.count("outbox_relay_failover_ready") == 1;
      },
      30s, 200ms))
      << "no backlog count or failover readiness in /metrics within 30 s";

  const CommandResult check = run_to_end(
      OUTBOX_PYTHON,
      {OUTBOX_CHECK_DEPLOY, "live", "--relay", relay_bin_, "--port", std::to_string(port)},
      log_path("check_out"), log_path("check_err"), 60s);
  std::cerr << check.out;
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("check_deploy.py live: ok"), std::string::npos) << check.out;

  expect_graceful_stop(relay);
}

// deploy/kubernetes runs two replicas on one slot and probes readiness on /readyz and liveness on
// /healthz: the replica that holds the slot is ready, the other is alive but not ready, and says
// why; the alerts group them by the slot label of outbox_relay_info.
TEST_F(DeployMetrics, TheStandbyReplicaIsAliveButNotReady) {
  create_outbox_table();
  const std::uint16_t active_port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(active_port);
  RelayProcess& active = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(active));
  const std::uint16_t standby_port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(standby_port);
  RelayProcess& standby = start_relay();

  HttpResult ready;
  ASSERT_TRUE(wait_until(
      [&] {
        ready = http_get(standby_port, "/readyz");
        return ready.body.find("state standby") != std::string::npos || !standby.is_running();
      },
      60s, 100ms))
      << "standby /readyz: " << ready.status << " " << ready.body;
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_EQ(http_get(standby_port, "/healthz").status, 200);
  EXPECT_EQ(http_get(active_port, "/readyz").status, 200);
  EXPECT_EQ(http_get(active_port, "/healthz").status, 200);

  // What OutboxRelayNotStreaming joins: both carry the slot; exactly one streams.
  auto standby_samples = parse_samples(http_get(standby_port, "/metrics").body);
  auto active_samples = parse_samples(http_get(active_port, "/metrics").body);
  EXPECT_EQ(standby_samples["outbox_relay_state{state=\"standby\"}"], "1");
  EXPECT_EQ(standby_samples["outbox_relay_state{state=\"streaming\"}"], "0");
  EXPECT_EQ(active_samples["outbox_relay_state{state=\"streaming\"}"], "1");
  for (auto* samples : {&standby_samples, &active_samples}) {
    bool has_slot = false;
    for (const auto& [series, value] : *samples) {
      has_slot = has_slot ||
                 (series.rfind("outbox_relay_info{slot=\"" + slot_ + "\"", 0) == 0 && value == "1");
    }
    EXPECT_TRUE(has_slot) << "outbox_relay_info without slot=\"" << slot_ << "\"";
  }

  // The standby takes over when the active replica stops (a Recreate or a lost pod).
  expect_graceful_stop(active);
  EXPECT_TRUE(
      wait_until([&] { return http_get(standby_port, "/readyz").status == 200; }, 60s, 100ms))
      << "the standby did not become ready within 60 s of the active relay's stop\n"
      << tail_file(standby.log_path(), 20);
  expect_graceful_stop(standby);
}

}  // namespace
}  // namespace outbox_test
