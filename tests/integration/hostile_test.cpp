// Hostile values from the outbox (issue 25), against the real PostgreSQL and Kafka: an outbox row
// whose aggregate type renders the relay's own checkpoint topic (or dead-letter topic) is refused
// as poison, so the exactly-once checkpoint stays intact and the relay still starts; and a row
// whose placed header is larger than any record Kafka takes is dead-lettered under
// --on-error dlq in a compact dead-letter record, after which the next event still arrives; so is
// one whose dead-letter record the broker refuses as too large for the dead-letter topic.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_admin.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class HostileIntegration : public E2eTest {
 protected:
  HostileIntegration() : E2eTest({"hostile", {"Order", "Cp"}, OUTBOX_TEST_LOG_DIR}) {}

  std::string insert_sql(const std::string& aggregatetype, const std::string& key, int seq,
                         const std::string& extra_columns = "",
                         const std::string& extra_values = "") const {
    return "INSERT INTO " + qualified_table() + " (aggregatetype, aggregateid, type, payload" +
           extra_columns + ") VALUES ('" + aggregatetype + "', '" + key +
           "', 'T', '{\"seq\": " + std::to_string(seq) + "}'" + extra_values + ")";
  }

  std::vector<Record> read_topic(const std::string& topic, std::size_t count) {
    KafkaReader reader(brokers_, {topic});
    reader.read_until([&](const std::vector<Record>& r) { return r.size() >= count; }, 30s);
    EXPECT_TRUE(reader.read_to_end()) << "topic " << topic << " could not be read to its end";
    return reader.records();
  }
};

std::string header_or(const Record& r, const std::string& name) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? "(none)" : it->second;
}

// Exactly-once with the checkpoint topic under the topic template: a row rendering it stops the
// relay (exit 3, --on-error fail) before anything reaches the checkpoint topic; a relay started
// again reads its checkpoint (no bad value there) and stops at the same row.
TEST_F(HostileIntegration, ARowForTheCheckpointTopicIsPoisonAndTheCheckpointStaysIntact) {
  create_outbox_table();
  const std::vector<std::string> args = {"--delivery", "exactly-once", "--checkpoint-topic",
                                         topics_[1]};
  RelayProcess& relay = start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(insert_sql(aggregatetypes_[0], "o-1", 1));
  const std::optional<std::string> system_id =
      pg_->scalar("SELECT system_identifier::text FROM pg_control_system()");
  ASSERT_TRUE(system_id);
  // The relay's own checkpoint key, as an attacker would write it.
  pg_->exec(insert_sql(aggregatetypes_[1], *system_id + "/" + slot_, 2));
  const std::optional<int> code = relay.wait_exit(60s);
  ASSERT_TRUE(code) << "the relay did not stop";
  EXPECT_EQ(*code, 3);
  EXPECT_NE(read_file(relay.log_path()).find("checkpoint topic (--checkpoint-topic)"),
            std::string::npos)
      << read_file(relay.log_path());
  for (const Record& r : read_topic(topics_[1], 1)) {
    EXPECT_EQ(r.headers.count("id"), 0u) << "an event in the checkpoint topic: " << describe(r);
    EXPECT_NE(r.value, "{\"seq\": 2}") << describe(r);
  }
  RelayProcess& again = start_relay(args);
  const std::optional<int> again_code = again.wait_exit(60s);
  ASSERT_TRUE(again_code);
  EXPECT_EQ(*again_code, 3) << "stopped at the row again, not at a bad checkpoint";
  EXPECT_NE(read_file(again.log_path()).find("event=checkpoint_read"), std::string::npos)
      << read_file(again.log_path());
}

// --on-error dlq: the row is dead-lettered (its error names the checkpoint topic), the next event
// arrives, and a relay started again reads its checkpoint and streams.
TEST_F(HostileIntegration, UnderDlqARowForTheCheckpointTopicIsDeadLettered) {
  create_outbox_table();
  const std::string dlq = "outbox.dlq." + suffix_;
  const std::vector<std::string> args = {
      "--delivery", "exactly-once",       "--on-error", "dlq", "--dlq-topic",
      dlq,          "--checkpoint-topic", topics_[1]};
  // Created beforehand: a topic auto-created inside a Kafka transaction can hold its commit (and
  // so the stop sequence) for long on a busy broker.
  ASSERT_NO_THROW(create_topic(brokers_, dlq, 1, 1));
  ASSERT_NO_THROW(create_topic(brokers_, topics_[0], 1, 1));
  RelayProcess& relay = start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(insert_sql(aggregatetypes_[1], "x", 1));
  pg_->exec(insert_sql(aggregatetypes_[0], "o-1", 2));
  const std::vector<Record> dead = read_topic(dlq, 1);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_NE(header_or(dead[0], "outbox.error").find("checkpoint topic"), std::string::npos)
      << describe(dead[0]);
  const std::vector<Record> good = read_topic(topics_[0], 1);
  ASSERT_EQ(good.size(), 1u);
  EXPECT_EQ(good[0].value, "{\"seq\": 2}");
  expect_graceful_stop(relay);
  RelayProcess& again = start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(again));
  EXPECT_NE(read_file(again.log_path()).find("event=checkpoint_read"), std::string::npos);
  expect_graceful_stop(again);
}

// Topic auto-creation off (the relay's producer with allow.auto.create.topics=false, so that the
// broker answers for a missing topic as one with auto.create.topics.enable=false does): an event
// whose topic does not exist is poison, as operating.md says. Under --on-error fail the relay
// stops with exit 3 naming the error and the slot stays before the event: once the topic is
// created, the next start delivers it.
TEST_F(HostileIntegration, AnEventForATopicThatDoesNotExistStopsTheRelayWithoutAutoCreation) {
  create_outbox_table();
  ASSERT_NO_THROW(create_topic(brokers_, topics_[0], 1, 1));
  const std::vector<std::string> args = {"-X", "allow.auto.create.topics=false", "-X",
                                         "topic.metadata.propagation.max.ms=2000"};
  RelayProcess& relay = start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(insert_sql(aggregatetypes_[0], "o-1", 1));
  ASSERT_EQ(read_topic(topics_[0], 1).size(), 1u);
  pg_->exec(insert_sql(aggregatetypes_[1], "c-1", 2));  // topics_[1] does not exist
  const std::optional<int> code = relay.wait_exit(60s);
  ASSERT_TRUE(code) << "the relay did not stop";
  EXPECT_EQ(*code, 3) << read_file(relay.log_path());
  EXPECT_NE(read_file(relay.log_path()).find("UNKNOWN_TOPIC"), std::string::npos)
      << read_file(relay.log_path());
  // The slot stayed before the event: once the topic exists, the next start delivers it.
  ASSERT_NO_THROW(create_topic(brokers_, topics_[1], 1, 1));
  RelayProcess& again = start_relay(args);
  const std::vector<Record> delivered = read_topic(topics_[1], 1);
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].value, "{\"seq\": 2}");
  expect_graceful_stop(again);
}

// A placed header of 2 MB: the record is larger than message.max.bytes, and so would be its
// dead-letter record with the header in it. It is dead-lettered compact (no value, no placed
// header, outbox.truncated), the slot moves past it and the next event arrives.
TEST_F(HostileIntegration, OversizedHeaderValuesAreDeadLettered) {
  create_outbox_table(", big text");
  const std::string dlq = "outbox.dlq." + suffix_;
  RelayProcess& relay = start_relay(
      {"--on-error", "dlq", "--dlq-topic", dlq, "--additional-placement", "big:header"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(insert_sql(aggregatetypes_[0], "huge", 1, ", big", ", repeat('x', 2000000)"));
  pg_->exec(insert_sql(aggregatetypes_[0], "fine", 2, ", big", ", 'small'"));
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> dead = read_topic(dlq, 1);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].key, "huge");
  EXPECT_FALSE(dead[0].headers.contains("big")) << "the placed header is left out";
  EXPECT_NE(header_or(dead[0], "outbox.truncated").find("too large"), std::string::npos)
      << describe(dead[0]);
  const std::vector<Record> good = read_topic(topics_[0], 1);
  ASSERT_EQ(good.size(), 1u);
  EXPECT_EQ(good[0].key, "fine");
  EXPECT_EQ(header_or(good[0], "big"), "small");
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// The broker, not the producer, refuses the dead-letter record as too large: the dead-letter
// topic's max.message.bytes (10,000) is below the producer's message.max.bytes. A row rendering
// the dead-letter topic with a 96 KB payload of random hex (so that compression does not bring
// it under the limit) is poison; its dead-letter record (the value kept) is refused by the broker,
// so it goes again compact (no value, outbox.truncated), the relay goes on, the next event arrives,
// and the slot is confirmed past both.
TEST_F(HostileIntegration, DeadLetterRecordTheBrokerRefusesAsTooLargeGoesCompact) {
  create_outbox_table();
  const std::string dlq = topics_[1];
  ASSERT_NO_THROW(create_topic(brokers_, dlq, 1, 1, {{"max.message.bytes", "10000"}}));
  ASSERT_NO_THROW(create_topic(brokers_, topics_[0], 1, 1));
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--dlq-topic", dlq});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[1] +
            "', 'big', 'T', jsonb_build_object('pad', (SELECT string_agg(md5(random()::text), '')"
            " FROM generate_series(1, 3000))))");
  // The next event is committed once the compact record is stored: committed earlier, it may be
  // acknowledged before the refusal and then sent again by the rewind (at-least-once allows it,
  // and this test would count it twice).
  const std::vector<Record> dead = read_topic(dlq, 1);
  ASSERT_EQ(dead.size(), 1u) << "exactly one dead-letter record";
  pg_->exec(insert_sql(aggregatetypes_[0], "fine", 2));
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> good = read_topic(topics_[0], 1);
  ASSERT_EQ(good.size(), 1u) << tail_file(relay.log_path(), 20);
  EXPECT_EQ(good[0].key, "fine");
  EXPECT_EQ(dead[0].key, "big");
  EXPECT_TRUE(dead[0].null_value) << "the value is left out: " << describe(dead[0]);
  EXPECT_NE(header_or(dead[0], "outbox.truncated").find("too large"), std::string::npos)
      << describe(dead[0]);
  EXPECT_NE(header_or(dead[0], "outbox.error").find("dead-letter topic"), std::string::npos)
      << describe(dead[0]);
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  EXPECT_TRUE(relay.is_running()) << tail_file(relay.log_path(), 20);
  EXPECT_NE(read_file(relay.log_path()).find("event=dead_letter_refused"), std::string::npos);
  expect_graceful_stop(relay);
}

// VmRSS of a process in KiB (/proc/PID/status), -1 when unreadable.
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Bounds (issue 25): a writer choosing a distinct aggregate id for each event that is
// dead-lettered (here rows rendering the dead-letter topic, each with a 1 KB aggregateid) fills
// the parked set. Past its bound (100,000 keys or 64 MiB of them) every aggregate is parked and the
// set freed, so the relay's memory stops growing: its RSS after 200,000 such rows is within 16 MiB
// of its RSS after 100,000 (the previous binary grew by 110 MB), every row is dead-lettered, and
// the slot is confirmed past them all.
TEST_F(HostileIntegration, ManyParkedAggregatesKeepTheMemoryBounded) {
  create_outbox_table();
  const std::string dlq = topics_[1];
  ASSERT_NO_THROW(create_topic(brokers_, dlq, 1, 1));
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--dlq-topic", dlq});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kRows = 100'000;
  const auto insert_rows = [&](int first) {
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload) SELECT '" + aggregatetypes_[1] +
              "', 'k' || g || repeat('x', 1000), 'T', '{}' FROM generate_series(" +
              std::to_string(first) + ", " + std::to_string(first + kRows - 1) + ") g");
    return expect_confirmed_reaches(pg_->current_wal_lsn(), 300s);
  };
  ASSERT_TRUE(insert_rows(0)) << tail_file(relay.log_path(), 20);
  const long rss_100k = rss_kib(relay.pid());
  ASSERT_TRUE(insert_rows(kRows)) << tail_file(relay.log_path(), 20);
  const long rss_200k = rss_kib(relay.pid());
  ASSERT_GT(rss_100k, 0);
  RecordProperty("rss_kib_after_100k", std::to_string(rss_100k));
  RecordProperty("rss_kib_after_200k", std::to_string(rss_200k));
  EXPECT_LT(rss_200k - rss_100k, 16 * 1024)
      << "RSS " << rss_100k << " KiB after 100,000 parked aggregates, " << rss_200k
      << " KiB after 200,000";
  EXPECT_NE(read_file(relay.log_path()).find("event=all_aggregates_parked"), std::string::npos);
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  const std::optional<double> parked = sample_value(samples, "outbox_relay_parked_aggregates");
  ASSERT_TRUE(parked);
  EXPECT_LE(*parked, 100'001.0) << "the parked set is bounded";
  EXPECT_EQ(topic_end_offset_sum(brokers_, dlq), 2 * kRows) << "every row is dead-lettered";
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// An outbox writer choosing ever new aggregate types: librdkafka keeps state for every topic the
// process produced to (about 17-23 KB each, measured), so --max-topics bounds the distinct topics;
// an event rendering one more is poison, here dead-lettered. After the first 1,000 rows (200
// topics, 800 refused), 3,000 more of new types do not grow the relay (the previous binary grew by
// about 23 KB per topic, and had no such flag), every refused row is dead-lettered with
// TOO_MANY_TOPICS, and the slot is confirmed past them all.
TEST_F(HostileIntegration, ManyDistinctTopicsKeepTheMemoryBounded) {
  create_outbox_table();
  const std::string dlq = topics_[1];
  ASSERT_NO_THROW(create_topic(brokers_, dlq, 1, 1));
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay =
      start_relay({"--on-error", "dlq", "--dlq-topic", dlq, "--max-topics", "200"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto insert_rows = [&](int first, int last) {
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload) SELECT '" + aggregatetypes_[0] +
              "-' || g, 'k' || g, 'T', '{}' FROM generate_series(" + std::to_string(first) + ", " +
              std::to_string(last) + ") g");
    return expect_confirmed_reaches(pg_->current_wal_lsn(), 90s);
  };
  ASSERT_TRUE(insert_rows(1, 1000)) << tail_file(relay.log_path(), 20);
  const long rss_1k = rss_kib(relay.pid());
  ASSERT_TRUE(insert_rows(1001, 4000)) << tail_file(relay.log_path(), 20);
  const long rss_4k = rss_kib(relay.pid());
  ASSERT_GT(rss_1k, 0);
  RecordProperty("rss_kib_after_1k", std::to_string(rss_1k));
  RecordProperty("rss_kib_after_4k", std::to_string(rss_4k));
  EXPECT_LT(rss_4k - rss_1k, 8 * 1024)
      << "RSS " << rss_1k << " KiB after 1,000 distinct types, " << rss_4k << " KiB after 4,000";
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  EXPECT_EQ(sample_value(samples, "outbox_relay_delivery_errors_total{reason=\"TOO_MANY_TOPICS\"}"),
            3800.0);
  EXPECT_GE(topic_end_offset_sum(brokers_, dlq), 3800) << "every refused row is dead-lettered";
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
