// The outbox shapes a Debezium user brings along, end to end against the real PostgreSQL and
// Kafka: additional placements (headers, partition), the timestamp column, tombstones for empty
// payloads and bytea payloads, each with the poison case dead-lettered (--on-error dlq). Each test
// checks what a consumer sees: the records present, nothing extra, in order, the exact bytes.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/kafka_admin.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class ShapesIntegration : public E2eTest {
 protected:
  ShapesIntegration() : E2eTest({"sh", {"Order"}, OUTBOX_TEST_LOG_DIR}) {}

  // The default outbox columns with `payload_type`, a seq column, then `extra`.
  void create_table(const std::string& payload_type, const std::string& extra = "") {
    pg_->exec("CREATE TABLE " + qualified_table() +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text, type text NOT NULL, payload " +
              payload_type + ", seq int NOT NULL" + extra + ")");
  }
  std::string dlq_topic() const { return "outbox.dlq." + suffix_; }

  // seq -> id of the committed rows.
  std::map<int, std::string> ids_by_seq() {
    std::map<int, std::string> ids;
    for (const auto& r : pg_->query("SELECT seq, id::text FROM " + qualified_table())) {
      ids[std::stoi(r[0].value())] = r[1].value();
    }
    return ids;
  }

  // Reads the topic and the dead-letter topic until `count` records arrived, then to their end.
  std::vector<Record> read_all(std::size_t count, const std::vector<std::string>& topics) {
    KafkaReader reader(brokers_, topics);
    const bool arrived = reader.read_until(
        [&](const std::vector<Record>& records) { return records.size() >= count; }, 60s);
    EXPECT_TRUE(arrived) << reader.records().size() << " of " << count << " records in Kafka";
    EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
    std::vector<Record> out;
    for (const Record* r : in_kafka_order(reader.records())) out.push_back(*r);
    return out;
  }
};

std::string header_or(const Record& r, const std::string& name, const std::string& otherwise) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? otherwise : it->second;
}

// --additional-placement: headers carry the columns' text under their aliases (a NULL column: a
// header without value), an integer column chooses the partition (NULL: murmur2 of the key, as
// Java clients). A partition the topic does not have is poison: dead-lettered with the headers,
// and its aggregate's later event follows it.
TEST_F(ShapesIntegration, AdditionalPlacementHeadersAndPartition) {
  create_table("jsonb NOT NULL", ", tenant text, shard int");
  ASSERT_NO_THROW(create_topic(brokers_, topics_[0], 4, 1));
  RelayProcess& relay = start_relay(
      {"--additional-placement", "tenant:header", "--additional-placement",
       "type:header:eventType,shard:partition", "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  constexpr int kRows = 40;
  const auto insert = [&](int seq, const std::string& aggregate, const std::string& tenant,
                          const std::string& shard) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq, tenant, shard) VALUES ('" +
           aggregatetypes_[0] + "', '" + aggregate + "', 'T" + std::to_string(seq) +
           "', '{\"seq\": " + std::to_string(seq) + "}', " + std::to_string(seq) + ", " + tenant +
           ", " + shard + ");";
  };
  const auto tenant_of = [](int seq) {
    return seq % 7 == 0 ? std::string("NULL") : "'tenant-" + std::to_string(seq % 3) + "'";
  };
  const auto shard_of = [](int seq) {
    return seq % 10 == 9 ? std::string("NULL") : std::to_string(seq % 4);
  };
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= kRows; ++seq) {
    sql += insert(seq, "agg-" + std::to_string(seq % 5), tenant_of(seq), shard_of(seq));
    if (seq % 10 == 0) sql += "COMMIT; BEGIN;";
  }
  sql += "COMMIT;";
  pg_->exec(sql);
  (void)read_all(kRows, {topics_[0]});
  // The producer knows the topic has 4 partitions now: partition 17 is refused as it is produced.
  pg_->exec("BEGIN;" + insert(41, "agg-bad", "'tenant-x'", "17") +
            insert(42, "agg-bad", "NULL", "1") + insert(43, "agg-1", "'tenant-y'", "2") +
            "COMMIT;");
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(kRows + 3, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 30s);

  const auto ids = ids_by_seq();
  Problems problems;
  std::map<int, const Record*> by_seq;
  for (const Record& r : records) {
    int seq = 0;
    for (const auto& [s, id] : ids) {
      if (header_or(r, "id", "") == id) seq = s;
    }
    if (seq == 0 || by_seq.contains(seq)) {
      problems.add("unknown or repeated: " + describe(r));
      continue;
    }
    by_seq[seq] = &r;
  }
  ASSERT_EQ(by_seq.size(), static_cast<std::size_t>(kRows + 3)) << problems.describe();
  for (int seq = 1; seq <= kRows + 3; ++seq) {
    const Record& r = *by_seq[seq];
    const bool dead = seq == 41 || seq == 42;
    if (r.topic != (dead ? dlq_topic() : topics_[0])) problems.add("topic: " + describe(r));
    if (header_or(r, "eventType", "") != "T" + std::to_string(seq)) {
      problems.add("eventType header: " + describe(r));
    }
    if (header_or(r, "type", "") != "T" + std::to_string(seq)) problems.add("type: " + describe(r));
    const std::string tenant = seq > kRows ? (seq == 41   ? "'tenant-x'"
                                              : seq == 42 ? "NULL"
                                                          : "'tenant-y'")
                                           : tenant_of(seq);
    if (tenant == "NULL") {
      if (!r.null_headers.contains("tenant"))
        problems.add("tenant not a null header: " + describe(r));
    } else if (r.null_headers.contains("tenant") ||
               "'" + header_or(r, "tenant", "(none)") + "'" != tenant) {
      problems.add("tenant header != " + tenant + ": " + describe(r));
    }
    if (r.value != "{\"seq\": " + std::to_string(seq) + "}") problems.add("value: " + describe(r));
    if (dead) continue;
    const std::string shard = seq == 43 ? "2" : shard_of(seq);
    const std::int32_t expected = shard == "NULL" ? java_partition(*r.key, 4) : std::stoi(shard);
    if (r.partition != expected) {
      problems.add("partition != " + std::to_string(expected) + ": " + describe(r));
    }
  }
  const Record& poison = *by_seq[41];
  EXPECT_NE(header_or(poison, "outbox.error", "").find("partition"), std::string::npos)
      << describe(poison);
  EXPECT_EQ(header_or(poison, "outbox.original.topic", ""), topics_[0]);
  EXPECT_EQ(header_or(*by_seq[42], "outbox.error", "").rfind("parked", 0), 0u)
      << describe(*by_seq[42]);
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  expect_graceful_stop(relay);
}

// --column-timestamp: the record timestamp is the column's instant (any offset), the commit time
// when it is NULL; a time Kafka cannot carry (before 1970) is poison, dead-lettered.
TEST_F(ShapesIntegration, ColumnTimestamp) {
  create_table("jsonb NOT NULL", ", occurred_at timestamptz");
  RelayProcess& relay = start_relay(
      {"--column-timestamp", "occurred_at", "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto insert = [&](int seq, const std::string& aggregate, const std::string& at) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq, occurred_at) VALUES ('" +
           aggregatetypes_[0] + "', '" + aggregate + "', 'T', '{}', " + std::to_string(seq) + ", " +
           at + ");";
  };
  const std::int64_t before = wall_clock_ms();
  pg_->exec("BEGIN;" + insert(1, "a", "'2021-03-04 05:06:07.891234+00'") +
            insert(2, "b", "'2021-03-04 10:36:07.5+05:30'") + insert(3, "a", "NULL") +
            insert(4, "c", "'1960-01-01 00:00:00+00'") + insert(5, "c", "now()") +
            insert(6, "b", "'2020-01-01 00:00:00-08'") + "COMMIT;");
  const std::int64_t after = wall_clock_ms();
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(6, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 30s);
  const auto ids = ids_by_seq();
  ASSERT_EQ(records.size(), 6u);
  std::map<int, const Record*> by_seq;
  for (const Record& r : records) {
    for (const auto& [s, id] : ids) {
      if (header_or(r, "id", "") == id) by_seq[s] = &r;
    }
  }
  ASSERT_EQ(by_seq.size(), 6u);
  EXPECT_EQ(by_seq[1]->timestamp_ms, 1'614'834'367'891);
  EXPECT_EQ(by_seq[2]->timestamp_ms, 1'614'834'367'500);
  EXPECT_GE(by_seq[3]->timestamp_ms, before - 2000);  // the commit time
  EXPECT_LE(by_seq[3]->timestamp_ms, after + 2000);
  EXPECT_EQ(by_seq[6]->timestamp_ms, 1'577'865'600'000);
  for (const int seq : {1, 2, 3, 6}) {
    EXPECT_EQ(by_seq[seq]->topic, topics_[0]) << describe(*by_seq[seq]);
    EXPECT_TRUE(by_seq[seq]->create_time);
  }
  EXPECT_EQ(by_seq[4]->topic, dlq_topic());
  EXPECT_NE(header_or(*by_seq[4], "outbox.error", "").find("occurred_at"), std::string::npos)
      << describe(*by_seq[4]);
  EXPECT_EQ(by_seq[5]->topic, dlq_topic()) << "parked behind seq 4 of aggregate c";
  expect_graceful_stop(relay);
}

// --tombstone-on-empty-payload: a NULL payload becomes the key with a null value on a compacted
// topic, in the key's partition, after the aggregate's earlier events; a tombstone the broker
// refuses (NULL key on a compacted topic) is dead-lettered and the rest goes on.
TEST_F(ShapesIntegration, TombstoneOnEmptyPayload) {
  create_table("jsonb");
  ASSERT_NO_THROW(create_topic(brokers_, topics_[0], 3, 1, {{"cleanup.policy", "compact"}}));
  RelayProcess& relay = start_relay(
      {"--tombstone-on-empty-payload", "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto insert = [&](int seq, const std::string& aggregate, const std::string& payload) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetypes_[0] +
           "', " + aggregate + ", 'T', " + payload + ", " + std::to_string(seq) + ");";
  };
  pg_->exec("BEGIN;" + insert(1, "'k1'", "'{\"v\": 1}'") + insert(2, "'k2'", "'{\"v\": 2}'") +
            insert(3, "'k1'", "NULL") + "COMMIT;");
  // The refused tombstone makes the relay rewind to the confirmed position and send again what
  // was not confirmed (duplicates, never gaps): each step waits for the confirmation, so that
  // the test sees each record once.
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  pg_->exec("BEGIN;" + insert(4, "NULL", "NULL") + "COMMIT;");
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 60s));
  pg_->exec("BEGIN;" + insert(5, "'k2'", "NULL") + insert(6, "'k3'", "'{\"v\": 6}'") + "COMMIT;");
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(6, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 60s);
  const auto ids = ids_by_seq();
  std::map<int, const Record*> by_seq;
  for (const Record& r : records) {
    for (const auto& [s, id] : ids) {
      if (header_or(r, "id", "") == id) {
        EXPECT_FALSE(by_seq.contains(s)) << "twice: " << describe(r);
        by_seq[s] = &r;
      }
    }
  }
  ASSERT_EQ(by_seq.size(), 6u);
  for (const int seq : {3, 5}) {
    const Record& r = *by_seq[seq];
    EXPECT_EQ(r.topic, topics_[0]) << describe(r);
    EXPECT_TRUE(r.null_value) << describe(r);
    EXPECT_EQ(r.partition, java_partition(*r.key, 3)) << describe(r);
  }
  EXPECT_EQ(by_seq[3]->key, "k1");
  EXPECT_EQ(by_seq[5]->key, "k2");
  // Each key's tombstone comes after its event in the partition.
  EXPECT_LT(by_seq[1]->offset, by_seq[3]->offset);
  EXPECT_EQ(by_seq[1]->partition, by_seq[3]->partition);
  EXPECT_LT(by_seq[2]->offset, by_seq[5]->offset);
  EXPECT_FALSE(by_seq[1]->null_value);
  EXPECT_EQ(by_seq[1]->value, "{\"v\": 1}");
  EXPECT_EQ(by_seq[4]->topic, dlq_topic()) << describe(*by_seq[4]);
  EXPECT_TRUE(by_seq[4]->null_value);
  EXPECT_EQ(by_seq[6]->topic, topics_[0]);
  expect_graceful_stop(relay);
}

// A protobuf message (outbox.v1-like: 1 id string, 2 amount int64, 3 bytes blob), encoded by hand.
std::string protobuf_payload(int seq) {
  std::string out;
  const auto varint = [&](std::uint64_t v) {
    while (v >= 0x80) {
      out += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
  };
  const std::string id = "order-" + std::to_string(seq);
  varint((1 << 3) | 2);
  varint(id.size());
  out += id;
  varint((2 << 3) | 0);
  varint(static_cast<std::uint64_t>(seq) * 1'000'003);
  const std::string blob("\x00\xff\xfe\x80\x00", 5);
  varint((3 << 3) | 2);
  varint(blob.size());
  out += blob;
  return out;
}

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out += kDigits[static_cast<unsigned char>(c) >> 4];
    out += kDigits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

// A bytea payload goes out as its bytes: random bytes with NUL and invalid UTF-8, protobuf
// messages, an empty one, one TOASTed (100 KB); a dead-lettered one keeps its bytes too.
TEST_F(ShapesIntegration, ByteaPayloadIsSentAsRawBytes) {
  create_table("bytea NOT NULL", ", shard int");
  RelayProcess& relay = start_relay({"--additional-placement", "shard:partition", "--on-error",
                                     "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  std::mt19937 random(7);
  std::map<int, std::string> payloads;
  std::string sql = "BEGIN;";
  constexpr int kRows = 60;
  for (int seq = 1; seq <= kRows; ++seq) {
    std::string bytes;
    if (seq % 3 == 0) {
      bytes = protobuf_payload(seq);
    } else if (seq == 1) {
      bytes = "";
    } else {
      bytes.resize(seq == 2 ? 100'000 : random() % 600 + 1);
      for (char& c : bytes) c = static_cast<char>(random());
      bytes[0] = '\0';
      bytes[bytes.size() / 2] = static_cast<char>(0xc3);  // a UTF-8 lead byte without its follower
    }
    payloads[seq] = bytes;
    // seq 30: a negative partition is poison, dead-lettered with its bytes.
    sql += "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq, shard) VALUES ('" +
           aggregatetypes_[0] + "', 'agg-" + std::to_string(seq) + "', 'T', decode('" +
           to_hex(bytes) + "', 'hex'), " + std::to_string(seq) + ", " +
           (seq == 30 ? "-1" : "NULL") + ");";
    if (seq % 20 == 0) sql += "COMMIT; BEGIN;";
  }
  sql += "COMMIT;";
  pg_->exec(sql);
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(kRows, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 30s);
  const auto ids = ids_by_seq();
  std::map<std::string, int> seq_by_id;
  for (const auto& [s, id] : ids) seq_by_id[id] = s;
  Problems problems;
  std::map<int, int> seen;
  for (const Record& r : records) {
    const auto it = seq_by_id.find(header_or(r, "id", ""));
    if (it == seq_by_id.end()) {
      problems.add("not a committed row: " + describe(r));
      continue;
    }
    const int seq = it->second;
    ++seen[seq];
    if (r.value != payloads[seq] || r.null_value) {
      problems.add("seq " + std::to_string(seq) + ": value of " + std::to_string(r.value.size()) +
                   " bytes differs from the " + std::to_string(payloads[seq].size()) +
                   " bytes inserted");
    }
    if (r.topic != (seq == 30 ? dlq_topic() : topics_[0])) problems.add("topic: " + describe(r));
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kRows));
  for (const auto& [seq, n] : seen) {
    if (n != 1) problems.add("seq " + std::to_string(seq) + " " + std::to_string(n) + " times");
  }
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  expect_graceful_stop(relay);
}

// --table repeated: an outbox per schema, one slot, one walsender. Events of both tables come
// in one commit order (each aggregate's events in commit order whichever table they were
// written to), the publication the relay creates covers both, a poison row of the second table
// is dead-lettered naming it, and a publication that leaves the second table out is refused.
TEST_F(ShapesIntegration, SeveralTablesInOneCommitOrder) {
  create_table("jsonb NOT NULL");
  const std::string schema = "sh2_" + suffix_;
  const std::string second = schema + ".outbox";
  pg_->exec("CREATE SCHEMA " + schema + "; CREATE TABLE " + second + " (LIKE " + qualified_table() +
            " INCLUDING ALL)");
  extra_tables_.push_back(second);
  // relay_args() gives the first --table.
  RelayProcess& relay =
      start_relay({"--table", second, "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  constexpr int kTransactions = 150;
  const auto insert = [&](const std::string& table, int seq, const std::string& type) {
    return "INSERT INTO " + table + " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" +
           type + "', 'agg-" + std::to_string(seq % 7) +
           "', 'T', '{\"seq\": " + std::to_string(seq) + "}', " + std::to_string(seq) + ");";
  };
  int seq = 0;
  for (int t = 0; t < kTransactions; ++t) {
    std::string sql = "BEGIN;";
    // First table, second table, or both, in either order.
    if (t % 3 != 1) sql += insert(qualified_table(), ++seq, aggregatetypes_[0]);
    if (t % 3 != 0) sql += insert(second, ++seq, aggregatetypes_[0]);
    if (t % 3 == 2) sql += insert(qualified_table(), ++seq, aggregatetypes_[0]);
    pg_->exec(sql + "COMMIT;");
  }
  // A row of the second table whose topic Kafka would refuse: dead-lettered, naming its table.
  pg_->exec(insert(second, ++seq, "not a topic!"));
  const int kEvents = seq;
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(kEvents, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 30s);

  std::map<std::string, std::pair<int, std::string>> by_id;  // id -> seq, table
  for (const std::string& table : {qualified_table(), second}) {
    for (const auto& r : pg_->query("SELECT id::text, seq FROM " + table)) {
      by_id[r[0].value()] = {std::stoi(r[1].value()), table};
    }
  }
  ASSERT_EQ(by_id.size(), static_cast<std::size_t>(kEvents));
  Problems problems;
  std::map<int, int> seen;
  std::map<std::string, int> last_seq;  // by aggregate
  for (const Record& r : records) {
    const auto it = by_id.find(header_or(r, "id", ""));
    if (it == by_id.end()) {
      problems.add("not a committed row: " + describe(r));
      continue;
    }
    const auto [s, table] = it->second;
    ++seen[s];
    if (s == kEvents) {
      if (r.topic != dlq_topic() || header_or(r, "outbox.table", "") != second) {
        problems.add("poison row of " + second + ": " + describe(r));
      }
      continue;
    }
    if (r.topic != topics_[0] || r.value != "{\"seq\": " + std::to_string(s) + "}") {
      problems.add("record of seq " + std::to_string(s) + ": " + describe(r));
    }
    auto& last = last_seq[*r.key];
    if (last >= s)
      problems.add("not in commit order after seq " + std::to_string(last) + ": " + describe(r));
    last = s;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kEvents));
  for (const auto& [s, n] : seen) {
    if (n != 1) problems.add("seq " + std::to_string(s) + " " + std::to_string(n) + " times");
  }
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_catalog.pg_publication_tables WHERE pubname = $1",
                        {publication_}),
            "2");
  expect_graceful_stop(relay);

  // A publication without the second table hides its inserts: refused before streaming.
  const std::string partial = "sh_partial_" + suffix_;
  pg_->exec("CREATE PUBLICATION " + partial + " FOR TABLE " + qualified_table() +
            " WITH (publish = 'insert')");
  extra_publications_.push_back(partial);
  RelayProcess& refused = start_relay({"--table", second, "--publication", partial, "--no-create"});
  const auto code = refused.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "relay still running";
  EXPECT_EQ(*code, 5);
  const std::string log = read_file(refused.log_path());
  EXPECT_NE(log.find("does not publish table " + second), std::string::npos) << log;
}

}  // namespace
}  // namespace outbox_test
