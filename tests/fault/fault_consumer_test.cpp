// The consumer side of at-least-once (issue 11, part 4), as a user would check it: the relay is
// killed -9 again and again while events are committed, so Kafka holds duplicates; the example
// consumer (examples/consumer, the inbox pattern) is itself killed -9 and restarted mid-stream;
// yet its effects are exactly once: every committed event applied once, nothing else applied,
// each aggregate's events applied in commit order.
//
// The consumer's tables live in a schema of their own (search_path in its conninfo), dropped in
// TearDown. OUTBOX_FAULT_SCALE=0.1 shrinks the workload for local runs. Also here: its bad flags.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fault_fixture.hpp"
#include "outbox_test/kafka_admin.hpp"

namespace outbox_test::fault {
namespace {

constexpr int kPartitions = 3;

// The offsets a consumer group committed, read with a handle of that group that never joins it.
class GroupOffsets {
 public:
  GroupOffsets(const std::string& brokers, const std::string& group) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char error[512];
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), error, sizeof error);
    rd_kafka_conf_set(conf, "group.id", group.c_str(), error, sizeof error);
    rk_.reset(rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error));
    if (!rk_) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(std::string("GroupOffsets: ") + error);
    }
  }
  // Sum of the committed offsets over the topic's partitions (none committed counts 0); -1 when
  // the coordinator does not answer.
  std::int64_t committed_sum(const std::string& topic, int partitions) {
    std::unique_ptr<rd_kafka_topic_partition_list_t,
                    decltype(&rd_kafka_topic_partition_list_destroy)>
        list(rd_kafka_topic_partition_list_new(partitions), &rd_kafka_topic_partition_list_destroy);
    for (int p = 0; p < partitions; ++p)
      rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
    if (rd_kafka_committed(rk_.get(), list.get(), 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    std::int64_t sum = 0;
    for (int i = 0; i < list->cnt; ++i) sum += std::max<std::int64_t>(list->elems[i].offset, 0);
    return sum;
  }

 private:
  struct Deleter {
    void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
  };
  std::unique_ptr<rd_kafka_t, Deleter> rk_;
};

class ConsumerTest : public FaultTest {
 protected:
  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    schema_ = "consumer_" + suffix_;
    group_ = "example_consumer_" + suffix_;
    ASSERT_NO_THROW(pg_->exec("CREATE SCHEMA " + schema_));
  }

  void TearDown() override {
    for (auto& consumer : consumers_) {
      if (consumer->is_running() && !consumer->terminate(15s)) consumer->kill9();
    }
    if (HasFailure()) {
      for (auto& consumer : consumers_) {
        std::cerr << "---- consumer log " << consumer->log_path() << " (last lines) ----\n"
                  << tail_file(consumer->log_path(), 40);
      }
    }
    if (pg_ && reconnect_pg(60s)) {
      try {
        pg_->exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "cleanup: " << e.what();
      }
    }
    FaultTest::TearDown();
  }

  // The example consumer on topic_, its tables in schema_.
  RelayProcess& start_consumer() {
    const std::string pg = conninfo_ + " options='-csearch_path=" + schema_ + "'";
    const std::string n = std::to_string(consumers_.size() + 1);
    consumers_.push_back(std::make_unique<RelayProcess>(
        OUTBOX_CONSUMER_BIN,
        std::vector<std::string>{"--brokers", brokers_, "--pg", pg, "--topic", topic_, "--group",
                                 group_},
        log_path("consumer" + n)));
    return *consumers_.back();
  }

  std::int64_t count(const std::string& sql) { return std::stoll(pg_->scalar(sql).value_or("-1")); }
  std::int64_t applied() { return count("SELECT count(*) FROM " + schema_ + ".applied_events"); }

  // Lines `needle` in all the consumers' logs.
  std::size_t in_consumer_logs(const std::string& needle) {
    std::size_t n = 0;
    for (auto& consumer : consumers_) n += count_in_file(consumer->log_path(), needle);
    return n;
  }

  std::string schema_;
  std::string group_;
  std::vector<std::unique_ptr<RelayProcess>> consumers_;
};

TEST_F(ConsumerTest, ExampleConsumerAppliesOnceUnderCrashLoop) {
  constexpr int kRelayKills = 5;
  const int events = scaled(20000, 2000);
  const std::uint64_t seed = static_cast<std::uint64_t>(wall_clock_ms());
  std::cout << "seed " << seed << "\n";
  RecordProperty("seed", std::to_string(seed));
  figure("events", events);

  create_outbox_table();
  // The topic exists before the consumer subscribes (the relay would create it on first use).
  create_topic(brokers_, topic_, kPartitions, 1);
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  RelayProcess* consumer = &start_consumer();
  const std::string applied_table = schema_ + ".applied_events";
  ASSERT_TRUE(wait_until(
      [&] { return pg_->scalar("SELECT to_regclass($1)::text", {applied_table}).has_value(); },
      30s))
      << "the consumer did not create its tables:\n"
      << tail_file(consumer->log_path(), 10);

  Workload& load = start_workload(plan_mixed(events, 500, 0.05, seed), 20s, 100);
  // Relay kills at random moments of the workload's progress; the consumer is killed at a third
  // and two thirds of it, each time once it has applied something since its start.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> at(1, events - 1);
  std::vector<std::pair<std::int64_t, bool>> moments;  // (committed events, kill the consumer)
  for (int i = 0; i < kRelayKills; ++i) moments.emplace_back(at(rng), false);
  moments.emplace_back(events / 3, true);
  moments.emplace_back(events * 2 / 3, true);
  std::sort(moments.begin(), moments.end());
  int relay_kills = 0;
  int consumer_kills = 0;
  std::int64_t applied_at_start = 0;
  for (const auto& [moment, kill_consumer] : moments) {
    ASSERT_TRUE(load.wait_committed(moment, 120s)) << "workload stalled before " << moment;
    reader.read_for(10ms);
    if (kill_consumer) {
      ASSERT_TRUE(wait_until([&] { return applied() > applied_at_start; }, 60s))
          << "the consumer applied nothing:\n"
          << tail_file(consumer->log_path(), 10);
      ASSERT_TRUE(consumer->is_running())
          << "consumer exited with " << consumer->wait_exit(0ms).value_or(-1);
      consumer->kill9();
      ++consumer_kills;
      applied_at_start = applied();
      consumer = &start_consumer();
    } else {
      ASSERT_TRUE(relay->is_running())
          << "relay exited by itself with " << relay->wait_exit(0ms).value_or(-1);
      relay->kill9();
      ++relay_kills;
      relay = &start_relay();
    }
  }
  figure("relay_kills", relay_kills);
  figure("consumer_kills", consumer_kills);
  load.join();
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  const auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(events));

  // What Kafka holds: every event, some more than once.
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 300s))
      << all.count() << " of " << rows.size() << " events in Kafka within 300 s";
  ASSERT_TRUE(expect_confirmed_reaches(lsn_after_load, 60s));
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  figure("records_in_kafka", static_cast<std::int64_t>(check.records));
  figure("duplicates_in_kafka", static_cast<std::int64_t>(check.duplicates));

  // The consumer reads to the end of the topic: its group's committed offsets reach the end of
  // every partition (nothing more is coming: the slot confirmed everything committed).
  const auto after_load = Clock::now();
  const std::int64_t end = topic_end_offset_sum(brokers_, topic_);
  EXPECT_EQ(end, static_cast<std::int64_t>(check.records));
  GroupOffsets offsets(brokers_, group_);
  std::int64_t committed = -1;
  EXPECT_TRUE(wait_until(
      [&] { return (committed = offsets.committed_sum(topic_, kPartitions)) >= end; }, 300s, 500ms))
      << "the consumer group committed " << committed << " of " << end << " offsets in 300 s:\n"
      << tail_file(consumer->log_path(), 10);
  figure("ms_until_consumer_at_end_after_load", ms_since(after_load));
  expect_graceful_stop(*consumer);

  // Exactly-once effects, read from the consumer's tables.
  const std::string applied_events = schema_ + ".applied_events";
  const std::string outbox = qualified_table();
  const std::int64_t applied_rows = applied();
  figure("applied_rows", applied_rows);
  EXPECT_EQ(applied_rows, events) << "applied rows vs committed events";
  EXPECT_EQ(count("SELECT count(DISTINCT event_id) FROM " + applied_events), events);
  EXPECT_EQ(count("SELECT count(*) FROM " + schema_ + ".processed_events"), events);
  EXPECT_EQ(count("SELECT count(*) FROM " + outbox + " o WHERE NOT EXISTS (SELECT 1 FROM " +
                  applied_events + " a WHERE a.event_id = o.id)"),
            0)
      << "committed events never applied";
  EXPECT_EQ(count("SELECT count(*) FROM " + applied_events + " a WHERE NOT EXISTS (SELECT 1 FROM " +
                  outbox +
                  " o WHERE o.id = a.event_id AND o.aggregateid = a.aggregate_id AND "
                  "o.payload = a.payload::jsonb)"),
            0)
      << "applied events that are not a committed event (id, key and payload)";
  // Per aggregate, the order of application is commit (seq) order.
  EXPECT_EQ(count("SELECT count(*) FROM (SELECT o.seq, lag(o.seq) OVER (PARTITION BY "
                  "a.aggregate_id ORDER BY a.position) AS previous FROM " +
                  applied_events + " a JOIN " + outbox +
                  " o ON o.id = a.event_id) s WHERE previous >= seq"),
            0)
      << "events of an aggregate applied out of commit order";

  // The inbox did the work: every duplicate in Kafka reached the consumer after its original
  // (same key, same partition) and was skipped; its own crashes add replays of applied records.
  const auto skipped = static_cast<std::int64_t>(in_consumer_logs("event=duplicate_skipped"));
  figure("duplicates_skipped_by_consumer", skipped);
  EXPECT_GE(skipped, static_cast<std::int64_t>(check.duplicates));
  EXPECT_TRUE(relay->is_running());
}

// A user who gets the command line wrong is told which flag, with exit code 2, before anything
// connects.
TEST(ExampleConsumer, BadFlagsExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "missing --brokers"},
      {{"--brokers", "b", "--pg", "p", "--topic", "t"}, "missing --group"},
      {{"--brokers", "b", "--pg", "p", "--group", "g"}, "missing --topic"},
      {{"--brokers", "b", "--pg"}, "--pg needs a value"},
      {{"--brokers", "b", "--pg", "p", "--group", "g", "--topic", "a,,b"}, "empty topic name"},
      {{"--brokers", "b", "--bogus", "x"}, "unknown flag --bogus"},
  };
  const std::string dir = std::string(OUTBOX_TEST_LOG_DIR) + "/ExampleConsumer.BadFlags_";
  for (const auto& [args, message] : cases) {
    const CommandResult r =
        run_to_end(OUTBOX_CONSUMER_BIN, args, dir + "out.log", dir + "err.log", 10s);
    EXPECT_EQ(r.exit_code, 2) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << "stderr: " << r.err;
    EXPECT_NE(r.err.find("usage:"), std::string::npos) << "stderr: " << r.err;
  }
}

}  // namespace
}  // namespace outbox_test::fault
