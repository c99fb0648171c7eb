// The relay's end-to-end story (tests/integration/relay_test.cpp) through faults: the broker hangs
// (SIGSTOP) while events are committed, and the relay is killed with SIGKILL halfway through a
// workload and restarted. Same table shape, topics and checks as the integration tests: every
// committed event arrives, correctly shaped, in commit order per aggregate; the slot confirms
// only what Kafka acknowledged.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts (OUTBOX_KAFKA_PID_FILE names the broker process BrokerStopped stops and resumes).

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

constexpr int kAggregates = 50;

// User + system CPU seconds a process has used so far (/proc/PID/stat), -1 when unreadable.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close_paren + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  // After the command: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The integration tests' fixture shape (three aggregate types, seq in the payload), logs under
// tests/fault.
class RelayFault : public E2eTest {
 protected:
  RelayFault() : E2eTest({"ft", {"Order", "Customer", "Invoice"}, OUTBOX_TEST_LOG_DIR}) {}
};

// The broker hangs (SIGSTOP) while events are committed: the slot must not confirm them, the relay
// waits without burning CPU, and once the broker is back they all arrive and the slot catches up.
TEST_F(RelayFault, BrokerStopped) {
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

// The relay is killed with SIGKILL halfway through 50,000 events and restarted on the same slot:
// nothing is lost, duplicates are faithful copies (same key, value, headers and commit-time
// timestamp, so consumers can drop them by id), and first deliveries keep commit order.
TEST_F(RelayFault, KillNine) {
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
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();

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

}  // namespace
}  // namespace outbox_test
