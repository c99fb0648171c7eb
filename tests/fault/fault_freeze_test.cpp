// A broker that hangs must not cost the relay its conversation with PostgreSQL (issue 21): the
// broker is frozen (SIGSTOP) for several times the server's wal_sender_timeout, from the relay's
// start and during a steady load, in both delivery modes. Throughout, the relay keeps its
// replication connection (one walsender, the same pid, never a reconnect), confirms nothing it
// has not delivered, and after the thaw every event arrives (exactly once, read_committed, in
// exactly-once mode). And a graceful stop (SIGTERM) under load finishes the transaction at hand:
// stopped and restarted again and again, the relay sends nothing twice.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fault_fixture.hpp"
#include "outbox_test/http.hpp"

namespace outbox_test::fault {
namespace {

enum class Mode { kAtLeastOnce, kExactlyOnce };
enum class When { kFromStart, kUnderLoad };

struct FreezeCase {
  Mode mode;
  When when;
  const char* on_error = "dlq";  // BrokerFreezeWithTimeout's --on-error
};

class BrokerFreeze : public FaultTest, public ::testing::WithParamInterface<FreezeCase> {
 protected:
  static constexpr const char* kWalSenderTimeout = "5s";
  static constexpr auto kFreeze = 20s;  // four times wal_sender_timeout

  std::vector<std::string> mode_args() const {
    if (GetParam().mode == Mode::kExactlyOnce) return {"--delivery", "exactly-once"};
    return {};
  }
};

TEST_P(BrokerFreeze, RelayKeepsItsReplicationConnection) {
  const FreezeCase c = GetParam();
  ASSERT_GT(kafka_pid(), 0) << "Kafka is not running (OUTBOX_KAFKA_PID_FILE)";
  const std::string services_log = log_path("services");
  ScopeGuard broker_back([&] {
    if (kafka_pid() <= 0) kafka_up(services_log);
  });
  ScopeGuard reset_timeout([&] {
    if (reconnect_pg(30s)) set_wal_sender_timeout("");
  });
  ASSERT_NO_FATAL_FAILURE(set_wal_sender_timeout(kWalSenderTimeout));
  create_outbox_table();
  KafkaReader reader(brokers_, {topic_});

  const int transactions = scaled(300, 60);
  std::optional<BrokerPause> pause;
  RelayProcess* relay = nullptr;
  Workload* load = nullptr;
  std::size_t commits_at_freeze = 0;
  if (c.when == When::kFromStart) {
    // The broker hangs before the relay starts: it connects to PostgreSQL, starts the stream,
    // and (exactly-once) waits for the transaction coordinator on its worker thread. The slot
    // is made beforehand, as `setup` does: a relay that must create its slot first reads its
    // progress record in Kafka (a slot lost while the relay was down is never replaced
    // silently), so that one waits for the broker before streaming.
    pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
    pause.emplace();
    ASSERT_TRUE(pause->paused()) << "could not SIGSTOP the broker";
    relay = &start_relay(mode_args());
    ASSERT_TRUE(wait_until([&] { return walsender_pid().has_value(); }, 60s, 50ms))
        << "the relay never started its replication connection";
    load = &start_workload(plan_uniform(transactions, 5), 10s, 50);
  } else {
    relay = &start_relay(mode_args());
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
    load = &start_workload(plan_uniform(transactions, 5), 30s, 50);
    ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 20; }, 60s))
        << "nothing reached Kafka before the freeze";
    commits_at_freeze = load->commits().size();
    pause.emplace();
    ASSERT_TRUE(pause->paused()) << "could not SIGSTOP the broker";
  }
  const std::optional<std::string> first_pid = walsender_pid();
  ASSERT_TRUE(first_pid.has_value()) << "no walsender serves slot " << slot_;

  // The freeze: the walsender stays the same, the slot confirms nothing committed after the
  // freeze began.
  const SlotWatch watch = watch_slot(
      *load, commits_at_freeze, [&] { return !relay->is_running(); }, kFreeze, 100ms);
  pause->resume();
  ASSERT_FALSE(watch.ended) << "the relay exited during the freeze with "
                            << relay->wait_exit(0ms).value_or(-1);
  figure("walsender_samples", static_cast<std::int64_t>(watch.samples));
  ASSERT_NO_FATAL_FAILURE(expect_slot_held(watch, "during the freeze"));
  EXPECT_EQ(watch.walsender_pids, std::set<std::string>{*first_pid})
      << "the replication connection was dropped and made again during the freeze (walsender "
         "pids seen: "
      << watch.walsender_pids.size() << ")";
  EXPECT_EQ(watch.last_walsender, first_pid)
      << "the slot's walsender at the end of the fault is not the one from before it";

  // After the thaw: everything arrives, confirmed, on the same connection.
  load->join();
  DeliveryCheck check;
  ASSERT_NO_FATAL_FAILURE(expect_every_event_delivered(reader, 180s, check,
                                                       static_cast<std::size_t>(transactions) * 5));
  if (c.mode == Mode::kExactlyOnce) {
    EXPECT_EQ(check.duplicates, 0u) << "an event is visible twice to a read_committed consumer";
  }
  EXPECT_EQ(walsender_pid(), first_pid) << "the replication connection changed after the thaw";
  EXPECT_EQ(count_in_file(relay->log_path(), "event=reconnect"), 0u)
      << "the relay reconnected; see " << relay->log_path();
  EXPECT_TRUE(relay->is_running());
}

INSTANTIATE_TEST_SUITE_P(Cases, BrokerFreeze,
                         ::testing::Values(FreezeCase{Mode::kAtLeastOnce, When::kFromStart},
                                           FreezeCase{Mode::kAtLeastOnce, When::kUnderLoad},
                                           FreezeCase{Mode::kExactlyOnce, When::kFromStart},
                                           FreezeCase{Mode::kExactlyOnce, When::kUnderLoad}),
                         [](const auto& info) {
                           return std::string(info.param.mode == Mode::kExactlyOnce
                                                  ? "ExactlyOnce"
                                                  : "AtLeastOnce") +
                                  (info.param.when == When::kFromStart ? "FromStart" : "UnderLoad");
                         });

// A delivery timeout shorter than the freeze (-X message.timeout.ms=5000; librdkafka's own default
// is 5 minutes, the relay's none): the records in flight time out while the broker is frozen.
// That is the broker's state, not the records': the relay rewinds and sends them again, never
// exits (under --on-error fail it exited 3, "_MSG_TIMED_OUT"), and under --on-error dlq
// dead-letters and parks nothing (every aggregate with an event in flight was diverted). The rewind
// ends the old producers on a thread of their own: /healthz, served on the relay's io thread,
// answers throughout. The slot is confirmed past nothing undelivered, and after the thaw every
// event arrives in order (exactly once, read_committed, in exactly-once mode).
class BrokerFreezeWithTimeout : public BrokerFreeze {};

TEST_P(BrokerFreezeWithTimeout, RewindsAndDeliversEverything) {
  const FreezeCase c = GetParam();
  ASSERT_GT(kafka_pid(), 0) << "Kafka is not running (OUTBOX_KAFKA_PID_FILE)";
  const std::string services_log = log_path("services");
  ScopeGuard broker_back([&] {
    if (kafka_pid() <= 0) kafka_up(services_log);
  });
  create_outbox_table();
  KafkaReader reader(brokers_, {topic_});
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> args = mode_args();
  for (const char* a : {"-X", "message.timeout.ms=5000", "--on-error", c.on_error}) {
    args.push_back(a);
  }

  const int transactions = scaled(300, 60);
  RelayProcess& relay = start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  Workload& load = start_workload(plan_uniform(transactions, 5), 30s, 50);
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 20; }, 60s))
      << "nothing reached Kafka before the freeze";
  const std::size_t commits_at_freeze = load.commits().size();

  // /healthz through the freeze, on a thread of the test's own.
  HealthzWatch healthz(port);

  std::optional<BrokerPause> pause;
  pause.emplace();
  ASSERT_TRUE(pause->paused()) << "could not SIGSTOP the broker";
  const SlotWatch watch = watch_slot(
      load, commits_at_freeze, [&] { return !relay.is_running(); }, kFreeze, 100ms);
  pause->resume();
  healthz.stop();
  ASSERT_FALSE(watch.ended) << "the relay exited during the freeze with "
                            << relay.wait_exit(0ms).value_or(-1);
  ASSERT_NO_FATAL_FAILURE(expect_slot_held(watch, "during the freeze"));
  const std::size_t rewinds = count_in_file(relay.log_path(), "event=producer_rewind") +
                              count_in_file(relay.log_path(), "event=kafka_transaction_aborted");
  // In exactly-once mode the freeze may fall on a commit: every record of the Kafka transaction
  // acknowledged, its EndTxn unanswered. Then no record times out: the commit waits the freeze out
  // (kTxnTimeout, then called again) and passes after the thaw, which is right too. That case is
  // told by a commit that took longer than 10 s (outbox_relay_kafka_commit_seconds).
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  const double commits =
      sample_value(samples, "outbox_relay_kafka_commit_seconds_count").value_or(0);
  const double short_commits =
      sample_value(samples, "outbox_relay_kafka_commit_seconds_bucket{le=\"10\"}").value_or(0);
  const double commits_through_freeze = commits - short_commits;
  figure("rewinds", static_cast<std::int64_t>(rewinds));
  figure("commits_through_freeze", static_cast<std::int64_t>(commits_through_freeze));
  if (c.mode == Mode::kExactlyOnce) {
    EXPECT_GE(static_cast<double>(rewinds) + commits_through_freeze, 1.0)
        << "neither a delivery timed out nor a commit waited during a freeze four times "
           "message.timeout.ms; see "
        << relay.log_path();
  } else {
    EXPECT_GE(rewinds, 1u) << "no delivery timed out during a freeze four times "
                              "message.timeout.ms; see "
                           << relay.log_path();
  }
  figure("healthz_polls", healthz.polls());
  figure("healthz_slowest_ms", healthz.slowest_ms());
  EXPECT_GT(healthz.polls(), 10);
  EXPECT_EQ(healthz.unanswered(), 0)
      << "/healthz did not answer within 5 s " << healthz.unanswered() << " times of "
      << healthz.polls() << " during the freeze";

  load.join();
  DeliveryCheck check;
  ASSERT_NO_FATAL_FAILURE(expect_every_event_delivered(reader, 180s, check,
                                                       static_cast<std::size_t>(transactions) * 5));
  if (c.mode == Mode::kExactlyOnce) {
    EXPECT_EQ(check.duplicates, 0u) << "an event is visible twice to a read_committed consumer";
  }
  EXPECT_EQ(count_in_file(relay.log_path(), "event=dead_lettered"), 0u)
      << "a record that timed out was dead-lettered; see " << relay.log_path();
  EXPECT_EQ(count_in_file(relay.log_path(), "event=aggregate_parked"), 0u)
      << "an aggregate was parked for a timeout; see " << relay.log_path();
  EXPECT_TRUE(relay.is_running()) << "exit " << relay.wait_exit(0ms).value_or(-1);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BrokerFreezeWithTimeout,
    ::testing::Values(FreezeCase{Mode::kAtLeastOnce, When::kUnderLoad},
                      FreezeCase{Mode::kExactlyOnce, When::kUnderLoad},
                      FreezeCase{Mode::kAtLeastOnce, When::kUnderLoad, "fail"}),
    [](const auto& info) {
      return std::string(info.param.mode == Mode::kExactlyOnce ? "ExactlyOnce" : "AtLeastOnce") +
             (std::string(info.param.on_error) == "fail" ? "OnErrorFail" : "");
    });

// A rolling deploy: SIGTERM under a steady mixed load (transactions of 1 to 2,000 events), the
// relay restarted after each stop. Every stop exits 0, and nothing is sent twice: the stop reads
// to the end of the transaction at hand, delivers it, confirms it, and only then ends.
class GracefulStop : public FaultTest, public ::testing::WithParamInterface<Mode> {};

TEST_P(GracefulStop, SigtermUnderLoadResendsNothing) {
  constexpr int kStops = 6;
  const int events = scaled(60000, 6000);
  const std::uint64_t seed = static_cast<std::uint64_t>(wall_clock_ms());
  RecordProperty("seed", std::to_string(seed));
  std::vector<std::string> args;
  if (GetParam() == Mode::kExactlyOnce) args = {"--delivery", "exactly-once"};
  create_outbox_table();
  RelayProcess* relay = &start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  Workload& load = start_workload(plan_mixed(events, 2000, 0.0, seed), 40s, 100);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> at(1, events - 1);
  std::vector<std::int64_t> moments;
  for (int i = 0; i < kStops; ++i) moments.push_back(at(rng));
  std::sort(moments.begin(), moments.end());
  int stops = 0;
  for (const auto moment : moments) {
    ASSERT_TRUE(load.wait_committed(moment, 120s)) << "workload stalled before " << moment;
    reader.read_for(10ms);
    ASSERT_TRUE(relay->is_running())
        << "relay exited by itself with " << relay->wait_exit(0ms).value_or(-1);
    const auto code = relay->terminate(60s);
    ASSERT_TRUE(code.has_value()) << "the relay did not stop within 60 s of SIGTERM";
    EXPECT_EQ(*code, 0) << "a graceful stop exits 0; see " << relay->log_path();
    ++stops;
    relay = &start_relay(args);
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  }
  load.join();
  DeliveryCheck check;
  ASSERT_NO_FATAL_FAILURE(expect_every_event_delivered(reader, 300s, check));
  figure("stops", stops);
  EXPECT_EQ(check.duplicates, 0u) << "a graceful stop sent events again after the restart";
  EXPECT_TRUE(relay->is_running());
}

INSTANTIATE_TEST_SUITE_P(Modes, GracefulStop,
                         ::testing::Values(Mode::kAtLeastOnce, Mode::kExactlyOnce),
                         [](const auto& info) {
                           return info.param == Mode::kExactlyOnce ? "ExactlyOnce" : "AtLeastOnce";
                         });

}  // namespace
}  // namespace outbox_test::fault
