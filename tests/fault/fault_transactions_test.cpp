// Transactions that stay open across a relay crash: a long transaction is written while other
// connections commit around it, the relay is killed (SIGKILL) and restarted, and only then does
// the long transaction commit (and another, open as long, rolls back). The server decodes the
// long transaction from the slot's restart point, which it held back; the relay must deliver it
// whole, after every transaction that committed before it, and nothing of the rolled-back one.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "fault_fixture.hpp"

namespace outbox_test::fault {
namespace {

constexpr int kAggregates = 5;

TEST_F(FaultTest, LongTransactionOpenAcrossRelayCrash) {
  create_outbox_table();
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  auto commit = [&](std::int64_t first_seq, int size) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, kAggregates, first_seq, size,
                                   false));
  };

  // Seq is commit order (per aggregate, first deliveries must follow it): the long transaction
  // commits after everything numbered below 100,000 and before what follows 200,000.
  PgClient long_txn(conninfo_);
  PgClient doomed(conninfo_);
  long_txn.exec("BEGIN");
  doomed.exec("BEGIN");
  long_txn.exec(
      Workload::insert_sql(qualified_table(), aggregatetype_, kAggregates, 100001, 100, false));
  doomed.exec(
      Workload::insert_sql(qualified_table(), aggregatetype_, kAggregates, 300001, 50, true));
  for (int t = 0; t < 20; ++t) commit(1 + t * 50, 50);
  DistinctIds first(1000);
  ASSERT_TRUE(reader.read_until(std::ref(first), 60s))
      << first.count() << " of the 1,000 events committed around the open transactions";

  relay->kill9();
  // While no relay runs: more of the long transaction, and more committed around it.
  long_txn.exec(
      Workload::insert_sql(qualified_table(), aggregatetype_, kAggregates, 100101, 100, false));
  for (int t = 0; t < 10; ++t) commit(1001 + t * 50, 50);
  relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  for (int t = 0; t < 5; ++t) commit(1501 + t * 50, 50);
  long_txn.exec("COMMIT");
  doomed.exec("ROLLBACK");
  for (int t = 0; t < 5; ++t) commit(200001 + t * 50, 50);
  const Lsn after = pg_->current_wal_lsn();

  const auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), 2200u);
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 120s))
      << all.count() << " of " << rows.size() << " events in Kafka within 120 s";
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s));
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.ghosts, 0u) << "events of the transaction rolled back after the crash";
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  // At least once: only what was acknowledged and not yet confirmed at the kill is sent again,
  // at most the 1,000 events committed before it. The long transaction, delivered only after
  // the restart, never twice.
  EXPECT_LE(check.duplicates, 1000u);
  std::unordered_map<std::string, int> long_txn_copies;
  for (const Record& record : reader.records()) {
    auto id = record.headers.find("id");
    if (id == record.headers.end()) continue;
    auto row = rows.find(id->second);
    if (row != rows.end() && row->second.seq > 100000 && row->second.seq <= 100200) {
      ++long_txn_copies[id->second];
    }
  }
  EXPECT_EQ(long_txn_copies.size(), 200u);
  for (const auto& [id, copies] : long_txn_copies) {
    EXPECT_EQ(copies, 1) << "event " << id << " of the long transaction delivered " << copies
                         << " times";
  }
  EXPECT_TRUE(relay->is_running()) << "exit " << relay->wait_exit(0ms).value_or(-1);
}

}  // namespace
}  // namespace outbox_test::fault
