// `outbox-relay reconcile` as an operator uses it after a lost slot: the relay relays part of the
// outbox, its slot is dropped, more rows are committed meanwhile; reconcile must list exactly
// those rows, --repair must publish them with the relay's record shape and per-aggregate order
// without duplicating what Kafka already had, and a second reconcile must find nothing. A window
// test checks that --since/--until exclude the rows outside them, with ages and timestamps.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/kafka_admin.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// The value of `key=` in a key=value line ("" when absent); quoted values are unquoted.
std::string field(const std::string& line, const std::string& key) {
  const std::string needle = " " + key + "=";
  auto at = (" " + line).find(needle);
  if (at == std::string::npos) return "";
  at += needle.size() - 1;  // position in `line`
  if (at < line.size() && line[at] == '"') {
    std::string out;
    for (std::size_t i = at + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  return line.substr(at, line.find(' ', at) - at);
}

// Lines of `text` starting with `prefix` + " ".
std::vector<std::string> lines_of(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix + " ", 0) == 0) out.push_back(line);
  }
  return out;
}

std::set<std::string> ids_of(const std::vector<std::string>& lines) {
  std::set<std::string> out;
  for (const auto& l : lines) out.insert(field(l, "id"));
  return out;
}

// The end-to-end fixture with two aggregate types and an outbox with a created_at column; the
// relay confirms every 200 ms and serves no metrics.
class ReconcileIntegration : public E2eTest {
 protected:
  ReconcileIntegration() : E2eTest({"rec", {"RecOrder", "RecCustomer"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    status_interval_ = "200ms";
    metrics_addr_ = "off";
    pg_->exec("CREATE TABLE public." + table_ +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb,"
              " created_at timestamptz NOT NULL DEFAULT clock_timestamp())");
  }

  // Runs `outbox-relay reconcile <common flags> <extra>` to its end (120 s at most).
  CommandResult reconcile(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "reconcile",        "--pg",          conninfo_,    "--brokers", brokers_, "--table",
        "public." + table_, "--column-time", "created_at", "--timeout", "30s"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string n = "reconcile_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 120s);
  }

  // `transactions` transactions of `per_transaction` events each, seq numbers from `first_seq`;
  // aggregate types alternate, aggregate ids cycle over 5 per type. `created_at` is an SQL
  // expression of g (the seq) or empty for the column's default.
  void insert_events(int transactions, int per_transaction, int first_seq,
                     const std::string& created_at = "") {
    for (int t = 0; t < transactions; ++t) {
      const int from = first_seq + t * per_transaction;
      pg_->query("INSERT INTO public." + table_ + " (aggregatetype, aggregateid, type, payload" +
                     (created_at.empty() ? "" : ", created_at") + ") SELECT (ARRAY['" +
                     aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                     "'])[g % 2 + 1], 'agg-' || (g % 10), 'Created' || (g % 3),"
                     " jsonb_build_object('seq', g, 'pad', repeat('x', (g % 7)::int))" +
                     (created_at.empty() ? "" : ", " + created_at) +
                     " FROM generate_series($1::bigint, $2::bigint) AS g ORDER BY g",
                 {std::to_string(from), std::to_string(from + per_transaction - 1)});
    }
  }

  std::set<std::string> ids_where(const std::string& condition) {
    std::set<std::string> out;
    for (const auto& row :
         pg_->query("SELECT id::text FROM public." + table_ + " WHERE " + condition)) {
      out.insert(*row[0]);
    }
    return out;
  }

  struct OutboxRow {
    std::string aggregatetype, aggregateid, type, payload;
    int seq = 0;
  };
  std::map<std::string, OutboxRow> rows_by_id() {
    std::map<std::string, OutboxRow> out;
    for (const auto& r : pg_->query("SELECT id::text, aggregatetype, aggregateid, type,"
                                    " payload::text, (payload->>'seq')::int FROM public." +
                                    table_)) {
      out[*r[0]] = {*r[1], *r[2], *r[3], r[4].value_or(""), std::stoi(*r[5])};
    }
    return out;
  }

  std::int64_t records_in_kafka() {
    std::int64_t total = 0;
    for (const auto& topic : topics_) {
      try {
        total += topic_end_offset_sum(brokers_, topic);
      } catch (const std::runtime_error&) {
        // The topic does not exist: nothing in it.
      }
    }
    return total;
  }

  int commands_ = 0;
};

// After a lost slot: the rows committed while no relay read the slot are exactly what reconcile
// lists; --repair publishes them as the relay would have, in commit order per aggregate, and
// duplicates nothing; a second reconcile exits 0.
TEST_F(ReconcileIntegration, ListsAndRepairsWhatALostSlotMissed) {
  constexpr int kRelayed = 30;  // 10 transactions x 3
  constexpr int kMissed = 24;   // 8 transactions x 3

  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  insert_events(10, 3, 0);
  const std::set<std::string> relayed = ids_where("(payload->>'seq')::int < 30");
  ASSERT_EQ(relayed.size(), static_cast<std::size_t>(kRelayed));
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_EQ(relay.terminate(30s), 0);
  // The slot is lost: whatever is committed from now on never reaches the relay.
  pg_->drop_slot_if_exists(slot_);
  const std::int64_t before_repair = records_in_kafka();
  ASSERT_EQ(before_repair, kRelayed);

  insert_events(8, 3, kRelayed);
  const std::set<std::string> missed = ids_where("(payload->>'seq')::int >= 30");
  ASSERT_EQ(missed.size(), static_cast<std::size_t>(kMissed));

  // 1. The listing: exactly the missed rows, exit 1.
  CommandResult listed = reconcile({"--since", "10m"});
  ASSERT_EQ(listed.exit_code, 1) << listed.out << listed.err;
  EXPECT_EQ(ids_of(lines_of(listed.out, "missing")), missed) << listed.out;
  const auto rows = rows_by_id();
  for (const auto& line : lines_of(listed.out, "missing")) {
    const OutboxRow& row = rows.at(field(line, "id"));
    EXPECT_EQ(field(line, "aggregateid"), row.aggregateid) << line;
    EXPECT_EQ(field(line, "topic"), "outbox.event." + row.aggregatetype) << line;
    EXPECT_FALSE(field(line, "time").empty()) << line;
  }
  const auto summary = lines_of(listed.out, "summary");
  ASSERT_EQ(summary.size(), 1u) << listed.out;
  EXPECT_EQ(field(summary[0], "rows_scanned"), std::to_string(kRelayed + kMissed));
  EXPECT_EQ(field(summary[0], "topics_read"), "2");
  EXPECT_EQ(field(summary[0], "records_read"), std::to_string(kRelayed));
  EXPECT_EQ(field(summary[0], "missing"), std::to_string(kMissed));
  EXPECT_EQ(records_in_kafka(), kRelayed) << "listing alone must not publish";

  // 2. The repair: every missed event sent and acknowledged, exit 0.
  CommandResult repaired = reconcile({"--since", "10m", "--repair"});
  ASSERT_EQ(repaired.exit_code, 0) << repaired.out << repaired.err;
  EXPECT_EQ(ids_of(lines_of(repaired.out, "repaired")), missed) << repaired.out;
  const auto repair_summary = lines_of(repaired.out, "summary");
  ASSERT_EQ(repair_summary.size(), 1u);
  EXPECT_EQ(field(repair_summary[0], "repaired"), std::to_string(kMissed));
  EXPECT_EQ(field(repair_summary[0], "failed"), "0");

  // Kafka now holds every event once: what the relay sent and what the repair sent.
  EXPECT_EQ(records_in_kafka(), kRelayed + kMissed);
  KafkaReader reader(brokers_, topics_);
  ASSERT_TRUE(reader.read_until(
      [&](const auto& records) { return records.size() >= kRelayed + kMissed; }, 60s))
      << reader.records().size() << " records";
  std::map<std::string, int> copies;
  // Per aggregate (topic and key): the seq numbers in offset order.
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::int64_t, int>>> order;
  for (const Record& r : reader.records()) {
    const std::string id = r.headers.count("id") ? r.headers.at("id") : "";
    ++copies[id];
    ASSERT_TRUE(rows.count(id)) << "record with unknown id '" << id << "' in " << r.topic;
    const OutboxRow& row = rows.at(id);
    // The relay's record shape, for relayed and repaired records alike.
    EXPECT_EQ(r.topic, "outbox.event." + row.aggregatetype) << id;
    EXPECT_EQ(r.key, std::optional<std::string>(row.aggregateid)) << id;
    EXPECT_EQ(r.value, row.payload) << id;
    EXPECT_EQ(r.headers.count("type") ? r.headers.at("type") : "(none)", row.type) << id;
    EXPECT_EQ(r.headers.size(), 2u) << id;
    ASSERT_TRUE(reader.partition_count(r.topic)) << r.topic;
    EXPECT_EQ(r.partition, java_partition(row.aggregateid, *reader.partition_count(r.topic)))
        << id << " key " << row.aggregateid;
    order[{r.topic, row.aggregateid}].push_back({r.offset, row.seq});
  }
  for (const auto& id : relayed) EXPECT_EQ(copies[id], 1) << "relayed " << id;
  for (const auto& id : missed) EXPECT_EQ(copies[id], 1) << "repaired " << id;
  EXPECT_EQ(copies.size(), static_cast<std::size_t>(kRelayed + kMissed));
  for (auto& [aggregate, events] : order) {
    std::sort(events.begin(), events.end());
    for (std::size_t i = 1; i < events.size(); ++i) {
      EXPECT_LT(events[i - 1].second, events[i].second)
          << aggregate.first << " key " << aggregate.second << ": seq " << events[i].second
          << " at offset " << events[i].first << " after seq " << events[i - 1].second;
    }
  }

  // 3. Nothing missing any more.
  CommandResult again = reconcile({"--since", "10m"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_TRUE(lines_of(again.out, "missing").empty()) << again.out;
  const auto again_summary = lines_of(again.out, "summary");
  ASSERT_EQ(again_summary.size(), 1u);
  EXPECT_EQ(field(again_summary[0], "missing"), "0");
  EXPECT_EQ(field(again_summary[0], "records_read"), std::to_string(kRelayed + kMissed));
}

// Only rows whose time is in [--since, --until) are checked and repaired, whether the bounds are
// ages or timestamps; rows outside stay missing for a wider window.
TEST_F(ReconcileIntegration, WindowExcludesRowsOutsideIt) {
  // seq 0-3: 3 hours ago; 10-14: 30 minutes ago; 20-22: 2 minutes ago.
  insert_events(1, 4, 0, "now() - interval '3 hours' + g * interval '1 ms'");
  insert_events(1, 5, 10, "now() - interval '30 minutes' + g * interval '1 ms'");
  insert_events(1, 3, 20, "now() - interval '2 minutes' + g * interval '1 ms'");
  const std::set<std::string> inside = ids_where("(payload->>'seq')::int BETWEEN 10 AND 14");
  const std::set<std::string> outside = ids_where("(payload->>'seq')::int NOT BETWEEN 10 AND 14");
  ASSERT_EQ(inside.size(), 5u);
  ASSERT_EQ(outside.size(), 7u);

  CommandResult by_age = reconcile({"--since", "2h", "--until", "10m"});
  ASSERT_EQ(by_age.exit_code, 1) << by_age.out << by_age.err;
  EXPECT_EQ(ids_of(lines_of(by_age.out, "missing")), inside) << by_age.out;
  ASSERT_EQ(lines_of(by_age.out, "summary").size(), 1u);
  EXPECT_EQ(field(lines_of(by_age.out, "summary")[0], "rows_scanned"), "5");

  const auto bound = [&](const std::string& interval) {
    return *pg_->scalar("SELECT to_char((now() - interval '" + interval +
                        "') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
  };
  CommandResult by_time = reconcile({"--since", bound("1 hour"), "--until", bound("5 minutes")});
  ASSERT_EQ(by_time.exit_code, 1) << by_time.out << by_time.err;
  EXPECT_EQ(ids_of(lines_of(by_time.out, "missing")), inside) << by_time.out;

  CommandResult repaired = reconcile({"--since", "2h", "--until", "10m", "--repair"});
  ASSERT_EQ(repaired.exit_code, 0) << repaired.out << repaired.err;
  EXPECT_EQ(ids_of(lines_of(repaired.out, "repaired")), inside) << repaired.out;
  EXPECT_EQ(records_in_kafka(), 5);

  CommandResult same_window = reconcile({"--since", "2h", "--until", "10m"});
  EXPECT_EQ(same_window.exit_code, 0) << same_window.out << same_window.err;

  // The wider window still lacks exactly the rows outside the repaired one.
  CommandResult wider = reconcile({"--since", "4h"});
  ASSERT_EQ(wider.exit_code, 1) << wider.out << wider.err;
  EXPECT_EQ(ids_of(lines_of(wider.out, "missing")), outside) << wider.out;
  ASSERT_EQ(lines_of(wider.out, "summary").size(), 1u);
  EXPECT_EQ(field(lines_of(wider.out, "summary")[0], "records_read"), "5");
}

// A row the relay could not map (NULL payload) is reported, not repaired, and keeps the exit
// code at 1; the rest of the window is repaired.
TEST_F(ReconcileIntegration, UnmappableRowsAreReportedNotRepaired) {
  insert_events(1, 3, 0);
  pg_->exec("UPDATE public." + table_ + " SET payload = NULL WHERE (payload->>'seq')::int = 1");
  const std::set<std::string> bad = ids_where("payload IS NULL");
  const std::set<std::string> good = ids_where("payload IS NOT NULL");
  ASSERT_EQ(bad.size(), 1u);

  CommandResult r = reconcile({"--since", "10m", "--repair"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(ids_of(lines_of(r.out, "unmappable")), bad) << r.out;
  EXPECT_NE(r.out.find("reason=\"column payload is NULL\""), std::string::npos) << r.out;
  EXPECT_EQ(ids_of(lines_of(r.out, "repaired")), good) << r.out;
  EXPECT_EQ(records_in_kafka(), 2);
}

}  // namespace
}  // namespace outbox_test
