// Transaction shapes an application produces and the other tests do not: writers on several
// connections whose WAL order differs from their commit order; a rollback to a savepoint and a
// subtransaction aborted by an exception handler inside a committed transaction; a business
// table and the outbox written in one transaction; one transaction larger than
// --max-inflight-bytes. In each, Kafka holds every committed event once, in commit order per
// aggregate, nothing rolled back, and the slot is confirmed past the last commit.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class TransactionShapes : public E2eTest {
 protected:
  TransactionShapes() : E2eTest({"txn", {"TxnOrder", "TxnCustomer"}, OUTBOX_TEST_LOG_DIR}) {}

  // An insert of event `seq` (payload {"seq": seq}) of aggregate `key`, as SQL text.
  std::string insert(int seq, const std::string& key, int type = 0) const {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[type] +
           "', '" + key + "', 'Event', '{\"seq\": " + std::to_string(seq) + "}');";
  }

  // Every committed row in Kafka once, nothing else, each aggregate in commit (seq) order, and
  // the slot confirmed past `after`. Returns the records in Kafka order.
  std::vector<Record> expect_exactly_the_committed_rows(Lsn after, std::chrono::seconds timeout) {
    const auto rows = committed_rows();
    KafkaReader reader(brokers_, topics_);
    reader.set_keep_values(true);
    DistinctIds all(rows.size());
    EXPECT_TRUE(reader.read_until(std::ref(all), timeout))
        << all.count() << " of " << rows.size() << " committed events in Kafka";
    EXPECT_TRUE(expect_confirmed_reaches(after, 60s));
    EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
    EXPECT_EQ(reader.records().size(), rows.size()) << "each committed event exactly once";
    const Problems problems = check_committed_in_order(reader, rows);
    EXPECT_EQ(problems.count(), 0u) << problems.describe();
    std::vector<Record> out;
    for (const Record* r : in_kafka_order(reader.records())) out.push_back(*r);
    return out;
  }

  // The seq of each record, in Kafka order, for the records of one topic.
  static std::vector<int> seqs_of(const std::vector<Record>& records, const std::string& topic) {
    std::vector<int> out;
    for (const auto& r : records) {
      if (r.topic != topic) continue;
      const auto at = r.value.find("\"seq\": ");
      out.push_back(at == std::string::npos ? -1 : std::stoi(r.value.substr(at + 7)));
    }
    return out;
  }
};

// Four connections with a transaction open each, inserting in turn (WAL order T0, T1, T2, T3,
// T0, ...), committing in the order T3, T1, T0, T2. pgoutput sends whole transactions in commit
// order: Kafka must have T3's events, then T1's, T0's, T2's, each in its insert order, although
// their inserts are interleaved in the WAL. One aggregate, so one partition and one order.
TEST_F(TransactionShapes, ConcurrentWritersInCommitOrderNotWalOrder) {
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  constexpr int kWriters = 4;
  constexpr int kPerTransaction = 5;
  const std::vector<int> commit_order = {3, 1, 0, 2};
  std::vector<int> rank(kWriters);
  for (int r = 0; r < kWriters; ++r) rank[commit_order[r]] = r;
  std::vector<std::unique_ptr<PgClient>> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.push_back(std::make_unique<PgClient>(conninfo_));
    writers.back()->exec("BEGIN");
  }
  // Event j of writer w gets seq rank(w) * 100 + j: seq order is commit order.
  for (int j = 0; j < kPerTransaction; ++j) {
    for (int w = 0; w < kWriters; ++w) writers[w]->exec(insert(rank[w] * 100 + j, "same"));
  }
  // A second aggregate written by the last committer first: it must not wait for the others.
  writers[2]->exec(insert(1000, "other"));
  for (const int w : commit_order) writers[w]->exec("COMMIT");
  const Lsn after = pg_->current_wal_lsn();

  const auto records = expect_exactly_the_committed_rows(after, 60s);
  std::vector<int> expected;
  for (int r = 0; r < kWriters; ++r) {
    for (int j = 0; j < kPerTransaction; ++j) expected.push_back(r * 100 + j);
  }
  std::vector<int> same;
  for (const auto& r : records) {
    if (r.key == "same") same.push_back(seqs_of({r}, r.topic).at(0));
  }
  EXPECT_EQ(same, expected) << "aggregate 'same' not in commit order";
  expect_graceful_stop(relay);
}

// Inside one committed transaction: an insert rolled back to a savepoint, one in a released
// savepoint, and one in a PL/pgSQL block whose exception handler aborts its subtransaction.
// Only the events that survived the commit reach Kafka, in their order.
TEST_F(TransactionShapes, SavepointRollbackAndAbortedSubtransaction) {
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const std::string aborted_block = "DO $$ BEGIN BEGIN " + insert(-3, "a") +
                                    " RAISE EXCEPTION 'undo'; EXCEPTION WHEN raise_exception THEN "
                                    "NULL; END; END $$;";
  pg_->exec("BEGIN;" + insert(1, "a") + "SAVEPOINT s1;" + insert(-1, "a") + insert(-2, "a") +
            "ROLLBACK TO SAVEPOINT s1;" + insert(2, "a") + "SAVEPOINT s2;" + insert(3, "a") +
            "RELEASE SAVEPOINT s2;" + aborted_block + insert(4, "a") + "SAVEPOINT s3;" +
            insert(-4, "a") + "ROLLBACK TO SAVEPOINT s3;" + "COMMIT;");
  // A transaction rolled back as a whole after a savepoint, then one more event.
  pg_->exec("BEGIN;" + insert(-5, "a") + "SAVEPOINT s;" + insert(-6, "a") + "RELEASE s; ROLLBACK;");
  pg_->exec(insert(5, "a"));
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_EQ(pg_->scalar("SELECT count(*) FROM " + qualified_table()), "5");

  const auto records = expect_exactly_the_committed_rows(after, 60s);
  EXPECT_EQ(seqs_of(records, topics_[0]), (std::vector<int>{1, 2, 3, 4, 5}));
  expect_graceful_stop(relay);
}

// The outbox pattern itself: the business change and its event in one transaction, the business
// table also in the publication (so the relay sees and skips its changes). Committed: the event
// arrives once and the business rows are untouched by the relay; rolled back: neither.
TEST_F(TransactionShapes, BusinessTableAndOutboxInOneTransaction) {
  create_outbox_table();
  const std::string orders = "public.orders_" + suffix_;
  pg_->exec("CREATE TABLE " + orders + " (id bigint PRIMARY KEY, status text NOT NULL)");
  extra_tables_.push_back(orders);
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() + ", " +
            orders + " WITH (publish = 'insert, update, delete')");
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  for (int order = 1; order <= 3; ++order) {
    const std::string id = std::to_string(order);
    pg_->exec("BEGIN; INSERT INTO " + orders + " VALUES (" + id + ", 'placed');" +
              insert(order * 10, "order-" + id) + "UPDATE " + orders +
              " SET status = 'paid' WHERE id = " + id + ";" +
              insert(order * 10 + 1, "order-" + id) + "COMMIT;");
  }
  pg_->exec("BEGIN; INSERT INTO " + orders + " VALUES (4, 'placed');" + insert(40, "order-4") +
            "ROLLBACK;");
  pg_->exec("BEGIN; DELETE FROM " + orders + " WHERE id = 3;" + insert(32, "order-3") + "COMMIT;");
  const Lsn after = pg_->current_wal_lsn();

  const auto records = expect_exactly_the_committed_rows(after, 60s);
  EXPECT_EQ(records.size(), 7u);
  EXPECT_EQ(pg_->scalar("SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM " + orders),
            "1:paid,2:paid");
  // The business changes were in the stream and skipped, each counted by kind.
  std::map<std::string, std::string> samples;
  const bool counted = wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        return sample_value(samples,
                            "outbox_relay_skipped_changes_total{reason=\"other_table\"}") == 3.0;
      },
      10s, 200ms);
  EXPECT_TRUE(counted) << "other_table skips: "
                       << samples["outbox_relay_skipped_changes_total{reason=\"other_table\"}"];
  EXPECT_EQ(sample_value(samples, "outbox_relay_skipped_changes_total{reason=\"update\"}"), 3.0);
  EXPECT_EQ(sample_value(samples, "outbox_relay_skipped_changes_total{reason=\"delete\"}"), 1.0);
  expect_graceful_stop(relay);
}

// One transaction of about 8 MiB of events, eight times --max-inflight-bytes (and more events
// than --max-inflight-events): the relay reads what the bounds allow, waits for
// acknowledgements, reads on, and never confirms the transaction before its last event is
// acknowledged. Under both delivery modes (exactly-once: a Kafka transaction carries whole
// PostgreSQL transactions, so this one fills a Kafka transaction larger than the bound).
class LargeTransaction : public TransactionShapes,
                         public ::testing::WithParamInterface<std::string> {};

TEST_P(LargeTransaction, LargerThanMaxInflightBytesEndToEnd) {
  create_outbox_table();
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay(
      {"--delivery", GetParam(), "--max-inflight-bytes", "1MiB", "--max-inflight-events", "2000"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kEvents = 8000;  // about 1 KiB each
  pg_->exec("BEGIN; INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) SELECT '" + aggregatetypes_[0] +
            "', 'agg-' || (g % 7), 'Event', jsonb_build_object('seq', g, 'pad', repeat('x', "
            "1000)) FROM generate_series(1, " +
            std::to_string(kEvents) + ") AS g");
  const Lsn before_commit = pg_->current_wal_insert_lsn();
  pg_->exec("COMMIT");
  const Lsn after = pg_->current_wal_lsn();

  // Until the last event is in Kafka, the slot stays before the commit. Each round takes the
  // slot's position first and then reads Kafka to its end: whatever the slot had confirmed is in
  // Kafka by then. (Reading Kafka first and the slot after is a race in exactly-once mode, where
  // the whole transaction becomes visible at once: the slot can move between the two reads.)
  {
    KafkaReader reader(brokers_, {topics_[0]});
    reader.set_keep_values(false);
    DistinctIds all(kEvents);
    std::string early;
    bool arrived = false;
    const auto deadline = Clock::now() + 180s;
    while (!arrived && Clock::now() < deadline) {
      const auto confirmed = pg_->slot_confirmed_flush(slot_);
      ASSERT_TRUE(reader.read_to_end(30s))
          << "Kafka's end not reached within 30 s: "
          << (reader.errors().empty() ? std::string("-") : reader.errors().back());
      arrived = all(reader.records());
      if (!arrived && early.empty() && confirmed && *confirmed > before_commit) {
        early = format_lsn(*confirmed) + " with " + std::to_string(all.count()) + " of " +
                std::to_string(kEvents) + " events in Kafka";
      }
      if (!arrived) reader.read_for(200ms);
    }
    ASSERT_TRUE(arrived) << all.count() << " of " << kEvents << " events in Kafka within 180 s:\n"
                         << tail_file(relay.log_path(), 10);
    EXPECT_TRUE(early.empty()) << "the slot was confirmed past the transaction's commit at "
                               << early;
  }
  const auto records = expect_exactly_the_committed_rows(after, 60s);
  EXPECT_EQ(records.size(), static_cast<std::size_t>(kEvents));
  EXPECT_TRUE(relay.is_running()) << "exit " << relay.wait_exit(0ms).value_or(-1);
  // The bound was reached: the relay stopped reading while the transaction was in flight.
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  EXPECT_GT(sample_value(samples, "outbox_relay_backpressure_seconds_total").value_or(-1), 0)
      << "never backpressured: the transaction did not exceed the bounds";
  EXPECT_EQ(sample_value(samples, "outbox_relay_events_in_flight"), 0.0);
  expect_graceful_stop(relay);
}

INSTANTIATE_TEST_SUITE_P(Delivery, LargeTransaction,
                         ::testing::Values("at-least-once", "exactly-once"), [](const auto& info) {
                           return info.param == "at-least-once" ? std::string("AtLeastOnce")
                                                                : std::string("ExactlyOnce");
                         });

}  // namespace
}  // namespace outbox_test
