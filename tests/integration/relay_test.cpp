// End-to-end story of the relay as a user sees it: rows committed to the outbox table show up in
// Kafka once each, in commit order per aggregate, with the
// documented topic, key, value, headers and timestamp; rolled-back rows never show up; the slot's
// confirmed position follows what Kafka acknowledged and no further.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix). The same
// story through a kill -9 of the relay and a stopped broker is in tests/fault/fault_e2e_test.cpp.

#include "relay_fixture.hpp"

namespace outbox_test {
namespace {

// `conninfo` with keyword=value added, for both forms libpq takes (a later keyword wins).
std::string with_conninfo_param(const std::string& conninfo, const std::string& keyword,
                                const std::string& value) {
  const bool uri = conninfo.rfind("postgresql://", 0) == 0 || conninfo.rfind("postgres://", 0) == 0;
  if (!uri) return conninfo + " " + keyword + "=" + value;
  return conninfo + (conninfo.find('?') == std::string::npos ? "?" : "&") + keyword + "=" + value;
}

// 1,000 transactions of 10 events over 50 aggregates and 3 aggregate types, 100 rolled-back
// transactions between them: every committed event arrives exactly once, correctly shaped, in
// commit order per aggregate; no rolled-back one does; the slot confirms all of it.
TEST_F(RelayIntegration, EndToEnd) {
  constexpr int kTransactions = 1000;
  constexpr int kEventsPerTransaction = 10;
  constexpr int kEvents = kTransactions * kEventsPerTransaction;

  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  // Wall-clock interval around each event's COMMIT, for the timestamp check (seq is 1-based).
  std::vector<std::int64_t> before_commit_ms(kEvents + 1);
  std::vector<std::int64_t> after_commit_ms(kEvents + 1);
  const auto started = Clock::now();
  for (int t = 0; t < kTransactions; ++t) {
    std::string sql = "BEGIN;";
    for (int e = 1; e <= kEventsPerTransaction; ++e) {
      const int seq = t * kEventsPerTransaction + e;
      const int aggregate = (seq * 7) % kAggregates;
      sql += "INSERT INTO " + qualified_table() +
             " (aggregatetype, aggregateid, type, payload) VALUES ('" +
             aggregatetypes_[aggregate % kAggregateTypes] + "', 'agg-" + std::to_string(aggregate) +
             "', 'Event" + std::to_string(seq % 4) + "', '{\"seq\": " + std::to_string(seq) +
             "}');";
    }
    sql += "COMMIT;";
    const auto before = wall_clock_ms();
    pg_->exec(sql);
    const auto after = wall_clock_ms();
    for (int e = 1; e <= kEventsPerTransaction; ++e) {
      before_commit_ms[t * kEventsPerTransaction + e] = before;
      after_commit_ms[t * kEventsPerTransaction + e] = after;
    }
    if (t % 10 == 5) {
      pg_->exec("BEGIN; INSERT INTO " + qualified_table() +
                " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
                "', 'agg-" + std::to_string(t % kAggregates) +
                "', 'Ghost', '{\"rolledback\": true}'); ROLLBACK;");
    }
  }
  const Lsn lsn_after_inserts = pg_->current_wal_lsn();
  std::cout << "inserted " << kEvents << " events in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()
            << " ms\n";

  auto rows = committed_rows();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(kEvents));

  KafkaReader reader(brokers_, topics_);
  DistinctIds all_ids(kEvents);
  const bool all_arrived = reader.read_until(std::ref(all_ids), 120s);
  ASSERT_TRUE(all_arrived) << all_ids.count() << " of " << kEvents
                           << " events reached Kafka within 120 s; reader errors: "
                           << reader.errors().size();
  std::cout << "all " << kEvents << " events in Kafka after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()
            << " ms\n";

  // Publish first, confirm after: once everything is in Kafka the slot catches up with the WAL.
  expect_confirmed_reaches(lsn_after_inserts, 30s);
  // Anything extra (a duplicate, a ghost) is in Kafka by now: read to the end of the topics.
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();

  EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(kEvents))
      << "each committed event exactly once";
  Problems problems;
  std::unordered_map<std::string, int> deliveries;
  std::map<std::string, std::int64_t> last_seq_by_aggregate;
  std::map<std::string, std::int32_t> partition_by_aggregate;
  for (const Record* record : in_kafka_order(reader.records())) {
    if (record->value.find("rolledback") != std::string::npos) {
      problems.add("rolled-back event in Kafka: " + describe(*record));
      continue;
    }
    auto id = record->headers.find("id");
    if (id == record->headers.end()) {
      problems.add("no id header: " + describe(*record));
      continue;
    }
    auto row = rows.find(id->second);
    if (row == rows.end()) {
      problems.add("id header names no committed row: " + describe(*record));
      continue;
    }
    ++deliveries[id->second];
    check_record_matches_row(*record, row->second, reader, problems);
    const auto seq = row->second.seq;
    if (!record->create_time || record->timestamp_ms < before_commit_ms[seq] - kTimestampSlackMs ||
        record->timestamp_ms > after_commit_ms[seq] + kTimestampSlackMs) {
      problems.add("timestamp " + std::to_string(record->timestamp_ms) +
                   " is not the commit time, committed between " +
                   std::to_string(before_commit_ms[seq]) + " and " +
                   std::to_string(after_commit_ms[seq]) + ": " + describe(*record));
    }
    const auto& aggregate = row->second.aggregateid;
    auto [partition, first] = partition_by_aggregate.emplace(aggregate, record->partition);
    if (!first && partition->second != record->partition) {
      problems.add("aggregate " + aggregate + " spread over partitions: " + describe(*record));
    }
    auto last = last_seq_by_aggregate.find(aggregate);
    if (last != last_seq_by_aggregate.end() && last->second >= seq) {
      problems.add("aggregate " + aggregate + ": seq " + std::to_string(seq) + " after " +
                   std::to_string(last->second) + " (not commit order): " + describe(*record));
    }
    last_seq_by_aggregate[aggregate] = seq;
  }
  for (const auto& [id, row] : rows) {
    auto it = deliveries.find(id);
    if (it == deliveries.end()) {
      problems.add("committed event seq " + std::to_string(row.seq) + " id " + id +
                   " not in Kafka");
    } else if (it->second != 1) {
      problems.add("event id " + id + " delivered " + std::to_string(it->second) + " times");
    }
  }
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(last_seq_by_aggregate.size(), static_cast<std::size_t>(kAggregates));

  expect_graceful_stop(relay);
}

// The relay reads the WAL over TLS (sslmode=require): events of 100 bytes to 40 KiB, larger than
// a TLS record (16 KiB) and than libpq's initial buffer, all arrive once, intact and in order,
// each burst before the next is committed, and the slot confirms them.
TEST_F(RelayIntegration, Tls) {
  constexpr int kBursts = 8;
  constexpr int kEventsPerBurst = 12;
  constexpr int kPadSizes[] = {100, 9000, 17000, 40000};

  create_outbox_table();
  const std::string plain_conninfo = conninfo_;
  conninfo_ = with_conninfo_param(conninfo_, "sslmode", "require");
  RelayProcess& relay = start_relay();
  conninfo_ = plain_conninfo;
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  EXPECT_EQ(pg_->scalar("SELECT s.ssl::text FROM pg_replication_slots r JOIN pg_stat_ssl s ON "
                        "s.pid = r.active_pid WHERE r.slot_name = $1",
                        {slot_}),
            std::optional<std::string>("true"))
      << "the relay's replication connection does not use TLS";

  KafkaReader reader(brokers_, {topics_[0]});
  int seq = 0;
  for (int burst = 0; burst < kBursts; ++burst) {
    std::string sql = "BEGIN;";
    for (int e = 0; e < kEventsPerBurst; ++e) {
      ++seq;
      sql += "INSERT INTO " + qualified_table() +
             " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
             "', 'agg-" + std::to_string(seq % 3) + "', 'Event', jsonb_build_object('seq', " +
             std::to_string(seq) + ", 'pad', repeat('x', " + std::to_string(kPadSizes[seq % 4]) +
             ")));";
      // Half of the bursts are one transaction, the others one transaction per event.
      if (burst % 2 == 1) sql += "COMMIT; BEGIN;";
    }
    pg_->exec(sql + "COMMIT;");
    DistinctIds burst_ids(static_cast<std::size_t>(seq));
    ASSERT_TRUE(reader.read_until(std::ref(burst_ids), 20s))
        << burst_ids.count() << " of " << seq << " events in Kafka 20 s after burst " << burst;
  }
  const Lsn lsn_after_inserts = pg_->current_wal_lsn();
  expect_confirmed_reaches(lsn_after_inserts, 30s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();

  auto rows = committed_rows();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(seq));
  const Problems problems = check_committed_in_order(reader, rows);
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(seq)) << "each event exactly once";

  expect_graceful_stop(relay);
}

// A mistyped flag is rejected at once with exit code 2 and one line on stderr naming it.
TEST_F(RelayIntegration, BadFlag) {
  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {"bad_value", {"--status-interval", "banana"}, "status-interval"},
      {"unknown_flag", {"--frobnicate", "yes"}, "frobnicate"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> args = {"--pg", conninfo_, "--brokers", brokers_};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const std::string stderr_path = log_path(c.what + "_stderr");
    relays_.push_back(std::make_unique<RelayProcess>(relay_bin_, args, log_path(c.what + "_stdout"),
                                                     stderr_path));
    const auto exit_code = relays_.back()->wait_exit(10s);
    ASSERT_TRUE(exit_code.has_value()) << "relay still running 10 s after a bad flag";
    EXPECT_EQ(*exit_code, 2);
    const std::string err = read_file(stderr_path);
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(line);
    }
    EXPECT_EQ(lines.size(), 1u) << "stderr:\n" << err;
    EXPECT_NE(err.find(c.flag), std::string::npos) << "stderr does not name " << c.flag << ":\n"
                                                   << err;
  }
}

// With --no-create the relay must not create a missing slot: it stops with an error naming it.
TEST_F(RelayIntegration, NoCreate) {
  create_outbox_table();
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() +
            " WITH (publish = 'insert')");
  RelayProcess& relay = start_relay({"--no-create"});
  const auto exit_code = relay.wait_exit(30s);
  ASSERT_TRUE(exit_code.has_value()) << "relay still running 30 s after starting on a missing slot";
  EXPECT_EQ(*exit_code, 1) << "README (exit codes): a start-up failure is exit 1";
  EXPECT_NE(read_file(relay.log_path()).find(slot_), std::string::npos)
      << "the error does not name the slot " << slot_;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "--no-create created the slot";
}

}  // namespace
}  // namespace outbox_test
