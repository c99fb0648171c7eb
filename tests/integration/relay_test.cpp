// End-to-end story of the relay as a user sees it: rows committed to the outbox table show up in
// Kafka once each (or again after a crash, never lost), in commit order per aggregate, with the
// documented topic, key, value, headers and timestamp; rolled-back rows never show up; the slot's
// confirmed position follows what Kafka acknowledged and no further.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include "relay_fixture.hpp"

namespace outbox_test {
namespace {

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
  // Anything extra (a duplicate, a ghost) would be in Kafka by now; read what else is there.
  reader.read_for(1s);

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

// The broker hangs (SIGSTOP) while events are committed: the slot must not confirm them, the relay
// waits without burning CPU, and once the broker is back they all arrive and the slot catches up.
TEST_F(RelayIntegration, BrokerStopped) {
  constexpr int kTransactions = 20;
  constexpr int kEventsPerTransaction = 10;
  const std::string pid_file = [] {
    try {
      return require_env("OUTBOX_KAFKA_PID_FILE");
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      return std::string();
    }
  }();
  ASSERT_FALSE(pid_file.empty());
  pid_t kafka_pid = 0;
  {
    std::ifstream in(pid_file);
    in >> kafka_pid;
  }
  ASSERT_GT(kafka_pid, 0) << "no pid in OUTBOX_KAFKA_PID_FILE=" << pid_file;
  ASSERT_EQ(::kill(kafka_pid, 0), 0)
      << "Kafka process " << kafka_pid << " from " << pid_file << " is not running";

  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const std::string insert_prefix = "INSERT INTO " + qualified_table() +
                                    " (aggregatetype, aggregateid, type, payload) VALUES ('" +
                                    aggregatetypes_[0] + "', ";
  auto insert_sql = [&](int seq) {
    // One aggregate, so one partition: librdkafka's busy-poll needs a partition holding all
    // five requests in flight.
    return insert_prefix + "'agg-0', 'Event', '{\"seq\": " + std::to_string(seq) + "}');";
  };

  // Caught up: a first event is in Kafka and confirmed, so the producer is connected and the
  // topic exists before the broker stops.
  KafkaReader reader(brokers_, {topics_[0]});
  pg_->exec(insert_sql(0));
  const Lsn lsn_warm = pg_->current_wal_lsn();
  ASSERT_TRUE(reader.read_until([](const auto& records) { return !records.empty(); }, 60s))
      << "first event did not reach Kafka";
  expect_confirmed_reaches(lsn_warm, 30s);
  ASSERT_FALSE(HasFailure());

  const double cpu_before_stop = process_cpu_seconds(relay.pid());
  ASSERT_EQ(::kill(kafka_pid, SIGSTOP), 0);
  // Whatever happens below, the broker must run again for the other tests.
  ScopeGuard resume_broker([kafka_pid] { ::kill(kafka_pid, SIGCONT); });
  const auto stopped_at = Clock::now();

  // Upper bound for the first new transaction's commit position: the WAL insert position after
  // its rows, before its COMMIT. The relay may confirm keepalive positions up to there (nothing
  // of ours is in flight yet), never this transaction's end.
  pg_->exec("BEGIN");
  for (int e = 1; e <= kEventsPerTransaction; ++e) pg_->exec(insert_sql(e));
  const Lsn before_first_commit = pg_->current_wal_insert_lsn();
  pg_->exec("COMMIT");
  // The others one every 150 ms: a stream that keeps arriving while nothing is acknowledged.
  auto next_commit = Clock::now();
  for (int t = 1; t < kTransactions; ++t) {
    next_commit += 150ms;
    std::this_thread::sleep_until(next_commit);
    std::string sql = "BEGIN;";
    for (int e = 1; e <= kEventsPerTransaction; ++e)
      sql += insert_sql(t * kEventsPerTransaction + e);
    pg_->exec(sql + "COMMIT;");
  }
  const Lsn lsn_after_inserts = pg_->current_wal_lsn();

  // Five status intervals with the broker down: nothing acknowledged, nothing confirmed.
  std::optional<Lsn> confirmed;
  const bool confirmed_too_far = wait_until(
      [&] {
        confirmed = pg_->slot_confirmed_flush(slot_);
        return !relay.is_running() || !confirmed || *confirmed > before_first_commit;
      },
      5s, 100ms);
  EXPECT_FALSE(confirmed_too_far) << "slot " << slot_ << " confirmed "
                                  << (confirmed ? format_lsn(*confirmed) : "(none)")
                                  << " past the first unacknowledged commit at "
                                  << format_lsn(before_first_commit)
                                  << " (relay running: " << relay.is_running() << ")";
  ASSERT_TRUE(relay.is_running()) << "the relay must ride out a stopped broker";
  // Waiting for a broker costs next to nothing: librdkafka alone would busy-poll a core.
  const double stopped_seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  const double cpu_while_stopped = process_cpu_seconds(relay.pid()) - cpu_before_stop;
  EXPECT_LT(cpu_while_stopped, 0.3 * stopped_seconds)
      << "the relay used " << cpu_while_stopped << " CPU seconds in " << stopped_seconds
      << " s of a stopped broker";
  std::cout << "relay CPU while the broker was stopped: " << cpu_while_stopped << " s in "
            << stopped_seconds << " s\n";
  ::kill(kafka_pid, SIGCONT);
  std::cout << "slot confirmed " << (confirmed ? format_lsn(*confirmed) : "(none)")
            << " while the broker was stopped; first commit after "
            << format_lsn(before_first_commit) << ", last commit before "
            << format_lsn(lsn_after_inserts) << "\n";
  std::cout
      << "broker stopped for "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopped_at).count()
      << " ms\n";

  const std::size_t expected = 1 + kTransactions * kEventsPerTransaction;
  DistinctIds all_ids(expected);
  ASSERT_TRUE(reader.read_until(std::ref(all_ids), 120s))
      << all_ids.count() << " of " << expected << " events in Kafka within 120 s of SIGCONT";
  expect_confirmed_reaches(lsn_after_inserts, 30s);

  auto rows = committed_rows();
  ASSERT_EQ(rows.size(), expected);
  const Problems problems = check_committed_in_order(reader, rows);
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(reader.records().size(), expected) << "the idempotent producer adds no duplicates";

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
  reader.read_for(1s);

  auto rows = committed_rows();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(seq));
  const Problems problems = check_committed_in_order(reader, rows);
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(seq)) << "each event exactly once";

  expect_graceful_stop(relay);
}

// The relay is killed with SIGKILL halfway through 50,000 events and restarted on the same slot:
// nothing is lost, duplicates are faithful copies (same key, value, headers and commit-time
// timestamp, so consumers can drop them by id), and first deliveries keep commit order.
TEST_F(RelayIntegration, KillNine) {
  constexpr int kTransactions = 1000;
  constexpr int kEventsPerTransaction = 50;
  constexpr int kEvents = kTransactions * kEventsPerTransaction;
  constexpr auto kInsertDuration = std::chrono::milliseconds(8000);

  create_outbox_table();
  RelayProcess& first_relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(first_relay));

  // Commits go on from another connection while the relay streams and gets killed.
  const Lsn slot_start = pg_->slot_confirmed_flush(slot_).value_or(0);
  std::atomic<int> committed_transactions{0};
  std::exception_ptr insert_error;
  std::jthread inserter([&](std::stop_token stop) {
    try {
      PgClient pg(conninfo_);
      const std::string sql =
          "INSERT INTO " + qualified_table() +
          " (aggregatetype, aggregateid, type, payload)"
          " SELECT (ARRAY['" +
          aggregatetypes_[0] + "', '" + aggregatetypes_[1] + "', '" + aggregatetypes_[2] +
          "'])[(g * 7 % " + std::to_string(kAggregates) +
          ") % 3 + 1],"
          " 'agg-' || (g * 7 % " +
          std::to_string(kAggregates) +
          "), 'Event' || (g % 4),"
          " jsonb_build_object('seq', g) FROM generate_series($1::bigint, $2::bigint) AS g"
          " ORDER BY g";
      // A steady commit rate (a load shape, not a wait): the whole load takes about
      // kInsertDuration, so the kill lands while commits go on, as in production. Unpaced, the
      // server commits 50,000 rows faster than a status interval.
      auto next_commit = Clock::now();
      for (int t = 0; t < kTransactions && !stop.stop_requested(); ++t) {
        std::this_thread::sleep_until(next_commit);
        next_commit += kInsertDuration / kTransactions;
        pg.query(sql, {std::to_string(t * kEventsPerTransaction + 1),
                       std::to_string((t + 1) * kEventsPerTransaction)});
        ++committed_transactions;
      }
    } catch (...) {
      insert_error = std::current_exception();
    }
  });
  ScopeGuard stop_inserter([&] { inserter.request_stop(); });

  KafkaReader reader(brokers_, topics_);
  DistinctIds half(kEvents / 2);
  ASSERT_TRUE(reader.read_until(std::ref(half), 120s))
      << "only " << half.count() << " events in Kafka within 120 s";
  // A restart from the slot's very first position would prove little. A busy relay confirms what
  // Kafka acknowledged every status interval (1 s), not only when idle, or WAL piles up.
  std::optional<Lsn> confirmed_at_kill;
  ASSERT_TRUE(wait_until(
      [&] {
        confirmed_at_kill = pg_->slot_confirmed_flush(slot_);
        return confirmed_at_kill && *confirmed_at_kill > slot_start;
      },
      30s, 20ms))
      << "slot " << slot_ << " still confirmed at its start " << format_lsn(slot_start) << " with "
      << half.count() << " events in Kafka";
  first_relay.kill9();
  std::cout << "killed the relay with " << half.count() << " distinct events in Kafka, "
            << committed_transactions * kEventsPerTransaction << " committed, slot confirmed at "
            << format_lsn(*confirmed_at_kill) << " (created at " << format_lsn(slot_start) << ")\n";

  // The walsender of the killed relay lets go of the slot once it sees the connection gone.
  ASSERT_TRUE(wait_until([&] { return !pg_->slot_active(slot_); }, 30s))
      << "slot " << slot_ << " still active 30 s after the relay was killed";
  const auto restarted_at = Clock::now();
  RelayProcess& second_relay = start_relay();

  inserter.join();
  if (insert_error) std::rethrow_exception(insert_error);
  const Lsn lsn_after_inserts = pg_->current_wal_lsn();
  auto rows = committed_rows();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(kEvents));

  DistinctIds all_ids(kEvents);
  ASSERT_TRUE(reader.read_until(std::ref(all_ids), 180s))
      << all_ids.count() << " of " << kEvents << " events in Kafka within 180 s of the restart";
  std::cout
      << "all events in Kafka "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - restarted_at).count()
      << " ms after the restart\n";
  expect_confirmed_reaches(lsn_after_inserts, 30s);
  reader.read_for(1s);

  Problems problems;
  std::unordered_map<std::string, const Record*> first_delivery;
  std::map<std::string, std::int64_t> last_first_seq_by_aggregate;
  std::size_t duplicates = 0;
  for_each_committed_record(
      reader, rows, problems,
      [&](const Record& record, const std::string& id, const OutboxRow& row) {
        auto [original, first] = first_delivery.emplace(id, &record);
        if (!first) {
          ++duplicates;
          const Record& copy = *original->second;
          if (copy.value != record.value || copy.key != record.key || copy.topic != record.topic ||
              copy.headers != record.headers || copy.timestamp_ms != record.timestamp_ms) {
            problems.add("duplicate differs from its original " + describe(copy) + ": " +
                         describe(record));
          }
          return;
        }
        check_record_matches_row(record, row, reader, problems);
        auto last = last_first_seq_by_aggregate.find(row.aggregateid);
        if (last != last_first_seq_by_aggregate.end() && last->second >= row.seq) {
          problems.add("first deliveries not in commit order: seq " + std::to_string(row.seq) +
                       " after " + std::to_string(last->second) + ": " + describe(record));
        }
        last_first_seq_by_aggregate[row.aggregateid] = row.seq;
      });
  EXPECT_EQ(first_delivery.size(), static_cast<std::size_t>(kEvents)) << "no committed event lost";
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  std::cout << "duplicates after kill -9 and restart: " << duplicates << "\n";
  RecordProperty("duplicates", static_cast<int>(duplicates));

  expect_graceful_stop(second_relay);
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
  EXPECT_NE(*exit_code, 0);
  EXPECT_NE(read_file(relay.log_path()).find(slot_), std::string::npos)
      << "the error does not name the slot " << slot_;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "--no-create created the slot";
}

}  // namespace
}  // namespace outbox_test
