// `outbox-relay reconcile` as an operator uses it after a lost slot: the relay relays part of the
// outbox, its slot is dropped, more rows are committed meanwhile; reconcile must list exactly
// those rows, --repair must publish them with the relay's record shape and per-aggregate order
// without duplicating what Kafka already had, and a second reconcile must find nothing. A window
// test checks that --since/--until exclude the rows outside them, with ages and timestamps.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

// ---- Repairs built by the relay's mapper -----------------------------------------------------

// The records of `topics` by their id header, once `count` arrived (60 s at most).
std::map<std::string, Record> records_by_id(const std::string& brokers,
                                            const std::vector<std::string>& topics,
                                            std::size_t count) {
  KafkaReader reader(brokers, topics);
  EXPECT_TRUE(reader.read_until(
      [&](const std::vector<Record>& records) { return records.size() >= count; }, 60s))
      << reader.records().size() << " of " << count << " records in " << topics.size() << " topics";
  std::map<std::string, Record> out;
  for (const Record& r : reader.records()) {
    const std::string id = r.headers.count("id") ? r.headers.at("id") : "";
    EXPECT_FALSE(out.count(id)) << "id " << id << " twice";
    out[id] = r;
  }
  return out;
}

std::string header_text(const Record& r) {
  std::string out;
  for (const auto& [name, value] : r.header_list) {
    out += name + "=" + (value ? "'" + *value + "'" : std::string("NULL")) + " ";
  }
  return out;
}

// The relay's record and the repaired one are the same but for the topic's prefix: key, value
// (bytes), headers (names, values, order), partition, timestamp (unless `timestamp` is false:
// the caller checks it).
void expect_same_record(const Record& relayed, const std::string& relayed_prefix,
                        const Record& repaired, const std::string& repaired_prefix, bool timestamp,
                        const std::string& id) {
  ASSERT_EQ(relayed.topic.rfind(relayed_prefix, 0), 0u) << relayed.topic;
  ASSERT_EQ(repaired.topic.rfind(repaired_prefix, 0), 0u) << repaired.topic;
  EXPECT_EQ(relayed.topic.substr(relayed_prefix.size()),
            repaired.topic.substr(repaired_prefix.size()))
      << id;
  EXPECT_EQ(relayed.key, repaired.key) << id;
  EXPECT_EQ(relayed.value, repaired.value) << id;
  EXPECT_EQ(relayed.null_value, repaired.null_value) << id;
  EXPECT_EQ(relayed.header_list, repaired.header_list)
      << id << "\nrelayed:  " << header_text(relayed) << "\nrepaired: " << header_text(repaired);
  // A null key without a partition placement: murmur2_random picks a partition at random, for
  // the relay as for the repair.
  if (relayed.key) {
    EXPECT_EQ(relayed.partition, repaired.partition) << id;
  }
  EXPECT_EQ(relayed.create_time, repaired.create_time) << id;
  if (timestamp) {
    EXPECT_EQ(relayed.timestamp_ms, repaired.timestamp_ms) << id;
  }
}

class ReconcileParity : public ReconcileIntegration {
 protected:
  // Topic templates: the relay's, and a fresh one for the repair (Kafka "lost" everything).
  std::string relayed_prefix() const { return "relayed." + suffix_ + "."; }
  std::string repaired_prefix() const { return "repaired." + suffix_ + "."; }
  std::vector<std::string> topics_with(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& a : aggregatetypes_) out.push_back(prefix + a);
    return out;
  }
  std::string dlq_topic() const { return "outbox.dlq." + suffix_; }

  // A table with the columns the mapping flags read; `payload` is its payload column's type.
  void create_shaped_table(const std::string& name, const std::string& payload) {
    pg_->exec("CREATE TABLE " + name +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text, type text, payload " +
              payload +
              ", seq int NOT NULL, tenant text, shard int, urgent boolean, occurred_at"
              " timestamptz, traceparent text, tracestate text,"
              " created_at timestamptz NOT NULL DEFAULT clock_timestamp())");
  }

  bool commit_timestamps() {
    return pg_->query("SHOW track_commit_timestamp").at(0).at(0) == std::optional("on");
  }
};

// --additional-placement (headers, including a boolean's 't', and the partition),
// --column-timestamp, a bytea payload (random bytes, an empty one): the repair sends the very
// records the relay sent. A NULL payload the relay dead-letters is reported as unmappable, with
// its id and the relay's reason, and not repaired.
TEST_F(ReconcileParity, RepairedRecordsAreTheRelays) {
  pg_->exec("DROP TABLE " + qualified_table());
  create_shaped_table(qualified_table(), "bytea");
  for (const auto& prefix : {relayed_prefix(), repaired_prefix()}) {
    for (const auto& topic : topics_with(prefix))
      ASSERT_NO_THROW(create_topic(brokers_, topic, 4, 1));
  }
  const std::vector<std::string> mapping = {
      "--additional-placement", "tenant:header,urgent:header:X-Urgent",
      "--additional-placement", "shard:partition",
      "--column-timestamp",     "occurred_at"};
  std::vector<std::string> relay_flags = mapping;
  relay_flags.insert(relay_flags.end(), {"--topic", relayed_prefix() + "${aggregatetype}",
                                         "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  RelayProcess& relay = start_relay(relay_flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  // 24 rows in 4 transactions: NULL and set placements, NULL and set timestamps, random bytes
  // (NUL, 0xff), an empty payload; then one NULL payload (a mapping error).
  constexpr int kRows = 24;
  for (int t = 0; t < 4; ++t) {
    pg_->query("INSERT INTO " + qualified_table() +
                   " (aggregatetype, aggregateid, type, payload, seq, tenant, shard, urgent,"
                   " occurred_at) SELECT (ARRAY['" +
                   aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                   "'])[g % 2 + 1], 'agg-' || (g % 5), 'T' || g,"
                   " CASE WHEN g % 6 = 5 THEN ''::bytea ELSE"
                   " decode(md5(g::text) || '00ff' || md5((g * 7)::text), 'hex') END, g,"
                   " CASE WHEN g % 4 = 0 THEN NULL ELSE 'tenant-' || (g % 3) END,"
                   " CASE WHEN g % 3 = 0 THEN NULL ELSE g % 4 END,"
                   " CASE WHEN g % 5 = 0 THEN NULL ELSE g % 2 = 0 END,"
                   " CASE WHEN g % 2 = 0 THEN NULL ELSE"
                   " '2025-06-01 12:00:00.123456+02'::timestamptz + g * interval '1 minute' END"
                   " FROM generate_series($1::int, $2::int) AS g ORDER BY g",
               {std::to_string(t * 6), std::to_string(t * 6 + 5)});
  }
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetypes_[0] +
            "', 'agg-bad', 'T', NULL, 99)");
  const std::string bad =
      *pg_->query("SELECT id::text FROM " + qualified_table() + " WHERE seq = 99").at(0).at(0);
  const auto relayed = records_by_id(brokers_, topics_with(relayed_prefix()), kRows);
  ASSERT_EQ(relayed.size(), static_cast<std::size_t>(kRows));
  ASSERT_EQ(records_by_id(brokers_, {dlq_topic()}, 1).count(bad), 1u) << "dead-lettered";
  expect_graceful_stop(relay);

  // Kafka "lost" everything: the repair's topic template points to empty topics.
  std::vector<std::string> flags = mapping;
  flags.insert(flags.end(),
               {"--topic", repaired_prefix() + "${aggregatetype}", "--since", "10m", "--repair"});
  CommandResult r = reconcile(flags);
  EXPECT_EQ(r.exit_code, 1) << "an unmappable row keeps the exit code at 1\n" << r.out << r.err;
  const auto unmappable = lines_of(r.out, "unmappable");
  ASSERT_EQ(unmappable.size(), 1u) << r.out;
  EXPECT_EQ(field(unmappable[0], "id"), bad);
  EXPECT_EQ(field(unmappable[0], "reason"), "column payload is NULL");
  EXPECT_EQ(lines_of(r.out, "repaired").size(), static_cast<std::size_t>(kRows)) << r.out;
  const auto summary = lines_of(r.out, "summary");
  ASSERT_EQ(summary.size(), 1u) << r.out;
  EXPECT_EQ(field(summary[0], "repaired"), std::to_string(kRows));
  EXPECT_EQ(field(summary[0], "unmappable"), "1");

  const auto repaired = records_by_id(brokers_, topics_with(repaired_prefix()), kRows);
  ASSERT_EQ(repaired.size(), static_cast<std::size_t>(kRows));
  EXPECT_EQ(repaired.count(bad), 0u);
  // Without a timestamp column value the relay stamps the commit time: the repair has it from
  // track_commit_timestamp, else it stamps the time column (created_at, before the commit).
  const bool exact = commit_timestamps();
  std::map<std::string, std::int64_t> created_ms;
  for (const auto& row : pg_->query("SELECT id::text, (extract(epoch FROM created_at) * 1000)"
                                    "::bigint, occurred_at IS NULL FROM " +
                                    qualified_table())) {
    if (*row[2] == "t") created_ms[*row[0]] = std::stoll(*row[1]);
  }
  int empty_values = 0, null_headers = 0;
  for (const auto& [id, original] : relayed) {
    ASSERT_EQ(repaired.count(id), 1u) << id << " not repaired";
    const Record& copy = repaired.at(id);
    const bool from_commit = created_ms.count(id) > 0;
    expect_same_record(original, relayed_prefix(), copy, repaired_prefix(), exact || !from_commit,
                       id);
    if (from_commit && !exact) {
      // created_at is floored to the millisecond as the commit time is; the commit follows it.
      EXPECT_GE(created_ms.at(id) + 1, copy.timestamp_ms) << id;
      EXPECT_LE(copy.timestamp_ms, original.timestamp_ms) << id;
    }
    empty_values += original.value.empty() && !original.null_value;
    null_headers += static_cast<int>(original.null_headers.size());
  }
  // The cases the rows were made to cover did occur.
  EXPECT_EQ(empty_values, 4);
  EXPECT_GT(null_headers, 0);
  // Raw bytes, not PostgreSQL's hex text.
  const Record& sample = relayed.begin()->second;
  EXPECT_EQ(sample.value.rfind("\\x", 0), std::string::npos) << sample.value;

  // And the repair is complete: nothing missing in the repaired topics.
  std::vector<std::string> again_flags = mapping;
  again_flags.insert(again_flags.end(),
                     {"--topic", repaired_prefix() + "${aggregatetype}", "--since", "10m"});
  CommandResult again = reconcile(again_flags);
  EXPECT_TRUE(lines_of(again.out, "missing").empty()) << again.out;
  const auto again_summary = lines_of(again.out, "summary");
  ASSERT_EQ(again_summary.size(), 1u) << again.out << again.err;
  EXPECT_EQ(field(again_summary[0], "missing"), "0");
}

// --format cloudevents (ce_* headers, content-type by the bytea column, --ce-source) with
// --column-traceparent/--column-tracestate (an invalid traceparent left out, as the relay does)
// over two outbox tables (--table twice, as the relay was run): the same records again, and
// The slot is lost while the relay is down, and the relay is started again with the same flags,
// as systemd restarts it. It used to make a new slot and stream from it: the events committed
// in between never reached Kafka, and nothing said so. Now its progress record (topic
// outbox-relay.checkpoints, key SYSTEM_ID/SLOT) shows that a slot of that name delivered: it
// creates nothing and exits 4 naming the slot, the position it delivered through and the way
// back. The advised way back: reconcile --repair, then one start with --accept-slot-loss, which
// logs the acceptance as an error and streams again. Every event is then in Kafka once. Both
// delivery modes (exactly-once's checkpoint is the record; at-least-once writes one as it
// confirms).
class SlotLoss : public ReconcileIntegration, public ::testing::WithParamInterface<bool> {
 protected:
  std::vector<std::string> mode_flags() const {
    if (GetParam()) return {"--delivery", "exactly-once"};
    return {};
  }
};

TEST_P(SlotLoss, ARestartAfterTheSlotWasLostStopsAndTheAdvisedRecoveryLosesNothing) {
  constexpr int kRelayed = 30, kMissed = 24, kAfter = 12;
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(10, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  // The progress record of this slot is in the checkpoint topic (at-least-once writes it within
  // a confirmation or two).
  {
    KafkaReader checkpoints(brokers_, {"outbox-relay.checkpoints"});
    const std::string suffix = "/" + slot_;
    ASSERT_TRUE(checkpoints.read_until(
        [&](const auto& records) {
          return std::any_of(records.begin(), records.end(), [&](const Record& r) {
            return r.key && r.key->size() > suffix.size() && r.key->ends_with(suffix);
          });
        },
        60s))
        << "no progress record of slot " << slot_ << "; see " << relay.log_path();
  }
  ASSERT_EQ(relay.terminate(30s), 0);
  pg_->drop_slot_if_exists(slot_);
  insert_events(8, 3, kRelayed);

  // The restart: exit 4, one line naming the slot and the recovery, no slot made.
  RelayProcess& restarted = start_relay(mode_flags());
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ + " does not exist, but its progress record"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--accept-slot-loss"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";
  {
    KafkaReader reader(brokers_, topics_);
    reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 30s);
    reader.read_for(1s);
    EXPECT_EQ(reader.records().size(), std::size_t{kRelayed}) << "the stopped relay sent more";
  }

  // The advised recovery: the missed rows repaired, then one start accepting the loss.
  CommandResult repaired = reconcile({"--since", "10m", "--repair"});
  ASSERT_EQ(repaired.exit_code, 0) << repaired.out << repaired.err;
  std::vector<std::string> accept = mode_flags();
  accept.push_back("--accept-slot-loss");
  RelayProcess& accepted = start_relay(accept);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(accepted));
  EXPECT_NE(read_file(accepted.log_path()).find("event=slot_loss_accepted"), std::string::npos)
      << tail_file(accepted.log_path(), 20);
  insert_events(4, 3, kRelayed + kMissed);
  KafkaReader reader(brokers_, topics_);
  constexpr std::size_t kAll = kRelayed + kMissed + kAfter;
  ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= kAll; }, 60s))
      << reader.records().size() << " of " << kAll << " records";
  reader.read_for(1s);
  std::map<std::string, int> copies;
  for (const Record& r : reader.records())
    ++copies[r.headers.count("id") ? r.headers.at("id") : ""];
  EXPECT_EQ(copies.size(), kAll);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
}

// Another client moved the slot past what the relay recorded while it was down (here
// pg_replication_slot_advance; a consumer of pg_logical_slot_get_changes, or a slot dropped and
// made anew, do the same): the events between were never delivered, and the start says so
// (exit 4) instead of streaming past them. The accepted loss moves the record, so that the next
// start goes on without the flag.
TEST_P(SlotLoss, ASlotMovedPastTheRecordStopsTheStartAndAnAcceptedLossIsRecorded) {
  constexpr int kRelayed = 30, kMissed = 24, kAfter = 12;
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(10, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  insert_events(8, 3, kRelayed);
  pg_->query("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", {slot_});
  const auto advanced = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(advanced.has_value() && *advanced > *stopped_at);

  RelayProcess& restarted = start_relay(mode_flags());
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ + " is confirmed through " +
                     format_lsn(*advanced) + ", past "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--accept-slot-loss"), std::string::npos) << log;
  {
    KafkaReader reader(brokers_, topics_);
    reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 30s);
    reader.read_for(1s);
    EXPECT_EQ(reader.records().size(), std::size_t{kRelayed}) << "the stopped relay sent more";
  }

  CommandResult repaired = reconcile({"--since", "10m", "--repair"});
  ASSERT_EQ(repaired.exit_code, 0) << repaired.out << repaired.err;
  std::vector<std::string> accept = mode_flags();
  accept.push_back("--accept-slot-loss");
  RelayProcess& accepted = start_relay(accept);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(accepted));
  // At-least-once compares the slot with the record beside the stream: the acceptance is
  // recorded after event=streaming.
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(accepted.log_path()).find("event=progress_recorded") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(accepted.log_path(), 20);
  EXPECT_NE(read_file(accepted.log_path()).find("event=slot_ahead_accepted"), std::string::npos)
      << tail_file(accepted.log_path(), 20);
  ASSERT_EQ(accepted.terminate(30s), 0) << tail_file(accepted.log_path(), 20);

  // The loss was recorded as accepted: a start with the usual flags streams.
  RelayProcess& again = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(again));
  insert_events(4, 3, kRelayed + kMissed);
  KafkaReader reader(brokers_, topics_);
  constexpr std::size_t kAll = kRelayed + kMissed + kAfter;
  ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= kAll; }, 60s))
      << reader.records().size() << " of " << kAll << " records";
  reader.read_for(1s);
  std::map<std::string, int> copies;
  for (const Record& r : reader.records())
    ++copies[r.headers.count("id") ? r.headers.at("id") : ""];
  EXPECT_EQ(copies.size(), kAll);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
}

// With --gap-repair-column the same loss is repaired by the restart itself: the slot is made
// first, the outbox rows of the gap that Kafka lacks are published from the table (reconcile's
// repair, commit order), then the relay streams from the new slot. Every event once, each
// aggregate's in order (the gap's ahead of those committed after), the repair logged and counted,
// no exit. Exactly-once too: the gap was committed before the new slot, so nothing is sent twice.
TEST_P(SlotLoss, AGapIsRepairedFromTheTableBeforeStreaming) {
  constexpr int kRelayed = 30, kMissed = 24, kAfter = 12;
  std::vector<std::string> flags = mode_flags();
  flags.insert(flags.end(), {"--gap-repair-column", "created_at"});
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(10, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  pg_->drop_slot_if_exists(slot_);
  insert_events(8, 3, kRelayed);

  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  insert_events(4, 3, kRelayed + kMissed);
  KafkaReader reader(brokers_, topics_);
  constexpr std::size_t kAll = kRelayed + kMissed + kAfter;
  ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= kAll; }, 60s))
      << reader.records().size() << " of " << kAll << " records; see " << restarted.log_path();
  reader.read_for(1s);
  std::map<std::string, int> copies;
  std::map<std::string, int> last_seq;  // topic/key -> the last seq read
  for (const Record& r : reader.records()) {
    ++copies[r.headers.count("id") ? r.headers.at("id") : ""];
    const auto at = r.value.find("\"seq\": ");
    ASSERT_NE(at, std::string::npos) << r.value;
    const int seq = std::stoi(r.value.substr(at + 7));
    const std::string aggregate = r.topic + "/" + r.key.value_or("");
    if (auto it = last_seq.find(aggregate); it != last_seq.end()) {
      EXPECT_LT(it->second, seq) << "order of " << aggregate;
    }
    last_seq[aggregate] = seq;
  }
  EXPECT_EQ(copies.size(), kAll);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("event=slot_gap_found"), std::string::npos) << log;
  EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_NE(log.find("repaired=" + std::to_string(kMissed)), std::string::npos) << log;
  EXPECT_TRUE(restarted.is_running());
  ASSERT_EQ(restarted.terminate(30s), 0) << tail_file(restarted.log_path(), 20);

  // The record moved to the new slot: the next start streams without repairing anything.
  RelayProcess& again = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(again));
  EXPECT_EQ(read_file(again.log_path()).find("event=slot_gap_found"), std::string::npos)
      << tail_file(again.log_path(), 20);
}

// The slot dropped and made anew by another client while the relay was down (setup, a script,
// an operator): it exists, confirmed at its consistent point, past the record; the events
// committed between were never delivered. The start stops (exit 4) naming both positions and
// makes nothing; with --gap-repair-column the gap is repaired from the table on the slot made
// by the other client (nothing dropped), and every event reaches Kafka once, in order.
TEST_P(SlotLoss, ASlotMadeAnewByAnotherClientStopsTheStartOrIsRepaired) {
  constexpr int kRelayed = 12, kGap = 9, kAfter = 6;
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(4, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  pg_->drop_slot_if_exists(slot_);
  insert_events(3, 3, kRelayed);
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const auto made = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(made.has_value() && *made > *stopped_at);

  RelayProcess& restarted = start_relay(mode_flags());
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ + " is confirmed through " + format_lsn(*made) +
                     ", past " + format_lsn(*stopped_at)),
            std::string::npos)
      << log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), made) << "the stopped start moved the slot";

  std::vector<std::string> flags = mode_flags();
  flags.insert(flags.end(), {"--gap-repair-column", "created_at"});
  RelayProcess& repaired = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  insert_events(2, 3, kRelayed + kGap);
  KafkaReader reader(brokers_, topics_);
  constexpr std::size_t kAll = kRelayed + kGap + kAfter;
  ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= kAll; }, 60s))
      << reader.records().size() << " of " << kAll << " records; see " << repaired.log_path();
  reader.read_for(1s);
  std::map<std::string, int> copies;
  std::map<std::string, int> last_seq;  // topic/key -> the last seq read
  for (const Record& r : reader.records()) {
    ++copies[r.headers.count("id") ? r.headers.at("id") : ""];
    const auto at = r.value.find("\"seq\": ");
    ASSERT_NE(at, std::string::npos) << r.value;
    const int seq = std::stoi(r.value.substr(at + 7));
    const std::string aggregate = r.topic + "/" + r.key.value_or("");
    if (auto it = last_seq.find(aggregate); it != last_seq.end()) {
      EXPECT_LT(it->second, seq) << "order of " << aggregate;
    }
    last_seq[aggregate] = seq;
  }
  EXPECT_EQ(copies.size(), kAll);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=slot_gap_repaired"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find("repaired=" + std::to_string(kGap)), std::string::npos)
      << repaired_log;
  EXPECT_EQ(repaired_log.find("event=dropped_lost_slot"), std::string::npos) << repaired_log;
  EXPECT_EQ(repaired_log.find("event=created_slot"), std::string::npos) << repaired_log;
}

// The rows of the gap deleted before the repair: the slot made anew while the relay was down, and
// prune told to trust the slot alone (--without-progress-record) deletes every row committed
// before it, the gap's with the delivered ones. The start with --gap-repair-column finds no row
// at or before the progress record's time (the delivered ones are gone, so the gap's may be
// too): it publishes nothing and stops (exit 4) naming the range, instead of repairing nothing
// and streaming past the loss.
TEST_P(SlotLoss, RowsDeletedBeforeTheRepairStopTheStart) {
  constexpr int kRelayed = 12, kGap = 9;
  std::vector<std::string> flags = mode_flags();
  flags.insert(flags.end(), {"--gap-repair-column", "created_at"});
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(4, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  pg_->drop_slot_if_exists(slot_);
  insert_events(3, 3, kRelayed);
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const auto made = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(made.has_value());
  ASSERT_EQ(pg_->scalar("SELECT count(*)::text FROM public." + table_),
            std::optional<std::string>(std::to_string(kRelayed + kGap)));
  CommandResult pruned =
      run_to_end(relay_bin_,
                 {"prune", "--pg", conninfo_, "--slot", slot_, "--table", "public." + table_,
                  "--without-progress-record", "--older-than", "1ms"},
                 log_path("prune_out"), log_path("prune_err"), 60s);
  ASSERT_EQ(pruned.exit_code, 0) << pruned.out << pruned.err;
  ASSERT_EQ(pg_->scalar("SELECT count(*)::text FROM public." + table_),
            std::optional<std::string>("0"))
      << pruned.out << pruned.err;

  RelayProcess& restarted = start_relay(flags);
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("the events committed between " + format_lsn(*stopped_at) + " and " +
                     format_lsn(*made) +
                     " (the progress record) may be missing and cannot be "
                     "repaired from the outbox"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--accept-slot-loss"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=streaming"), std::string::npos) << log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), made) << "the stopped start moved the slot";
  KafkaReader reader(brokers_, topics_);
  reader.read_until([&](const auto& records) { return records.size() >= kRelayed; }, 30s);
  reader.read_for(1s);
  EXPECT_EQ(reader.records().size(), std::size_t{kRelayed}) << "the stopped start sent more";
}

// The server answering is not the one the relay delivered from: its WAL ends before the
// position the record holds on the same timeline (a restore from a backup; forged here by a
// record far ahead). Named, exit 4, nothing streamed.
TEST_P(SlotLoss, AServerWhoseWalEndsBeforeTheRecordStopsTheStart) {
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(2, 3, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= 6; }, 60s));
  }
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  const auto row = pg_->query(
      "SELECT (SELECT system_identifier::text FROM pg_control_system()),"
      " (SELECT timeline_id::text FROM pg_control_checkpoint()),"
      " (pg_current_wal_lsn() + 1073741824)::text");
  ASSERT_EQ(row.size(), 1u);
  const std::string ahead = *row[0][2];
  produce_record(brokers_, "outbox-relay.checkpoints", *row[0][0] + "/" + slot_,
                 ahead + " timeline=" + *row[0][1]);

  RelayProcess& restarted = start_relay(mode_flags());
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("the server's WAL ends at "), std::string::npos) << log;
  EXPECT_NE(log.find(", before " + ahead + ", through which its progress record"),
            std::string::npos)
      << log;
  // Exactly-once compares before it streams; at-least-once beside the stream, confirming nothing
  // until the comparison passed.
  if (GetParam()) EXPECT_EQ(log.find("event=streaming"), std::string::npos) << log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), stopped_at);

  // --gap-repair-column has nothing to repair here (the slot is behind the record, not past it):
  // the start stops the same way, publishing nothing.
  std::vector<std::string> flags = mode_flags();
  flags.insert(flags.end(), {"--gap-repair-column", "created_at"});
  RelayProcess& repairing = start_relay(flags);
  const auto again = repairing.wait_exit(60s);
  ASSERT_TRUE(again.has_value()) << "the relay did not stop\n"
                                 << tail_file(repairing.log_path(), 20);
  EXPECT_EQ(*again, 4) << tail_file(repairing.log_path(), 20);
  const std::string repairing_log = read_file(repairing.log_path());
  EXPECT_NE(repairing_log.find("the server's WAL ends at "), std::string::npos) << repairing_log;
  EXPECT_EQ(repairing_log.find("event=slot_gap_found"), std::string::npos) << repairing_log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), stopped_at);
}

INSTANTIATE_TEST_SUITE_P(Modes, SlotLoss, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "ExactlyOnce" : "AtLeastOnce");
});

// The checkpoint topic is shared (by default) with relays in exactly-once mode, and one killed
// inside a Kafka transaction leaves it open until its transaction.timeout.ms: read_committed
// readers of the partition stop at the transaction's first offset. At-least-once writes its
// record outside transactions and confirms the slot through it, so a restart meanwhile must see
// the record written after the open transaction, not an older one: that would put the slot
// ahead of the record and stop the start with a false "events were never delivered" (exit 4).
TEST_F(ReconcileIntegration, AtLeastOnceReadsItsRecordPastATransactionLeftOpen) {
  const std::string checkpoints = "outbox-relay.progress." + slot_;
  const std::vector<std::string> flags{"--checkpoint-topic", checkpoints};
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto created = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(created.has_value());
  insert_events(2, 3, 0);
  // The slot moved, so a record was written (at-least-once confirms only through one).
  std::optional<Lsn> before;
  ASSERT_TRUE(wait_until(
      [&] {
        before = pg_->slot_confirmed_flush(slot_);
        return before && *before > *created;
      },
      60s, 100ms))
      << "the slot was not confirmed; see " << relay.log_path();

  // Another producer's transaction left open on the same (single) partition.
  OpenTransaction open(brokers_, checkpoints, "other-system/other-slot", "0/1 timeline=1");
  insert_events(4, 3, 6);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= 18; }, 60s))
        << reader.records().size() << " of 18 events relayed within 60 s";
  }
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  // The slot moved, so records were written after the open transaction's first offset (the
  // slot is confirmed only through a recorded position), out of a read_committed reader's sight.
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value() && *stopped_at > *before);

  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(restarted.log_path()).find("event=progress_verified") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(restarted.log_path(), 20);
  EXPECT_TRUE(restarted.is_running()) << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(read_file(restarted.log_path()).find("is confirmed through"), std::string::npos)
      << tail_file(restarted.log_path(), 20);
  insert_events(1, 3, 18);
  KafkaReader reader(brokers_, topics_);
  ASSERT_TRUE(reader.read_until([&](const auto& records) { return records.size() >= 21; }, 60s))
      << reader.records().size() << " of 21 records";
  reader.read_for(1s);
  std::map<std::string, int> copies;
  for (const Record& r : reader.records())
    ++copies[r.headers.count("id") ? r.headers.at("id") : ""];
  EXPECT_EQ(copies.size(), 21u);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
}

// the flags read from OUTBOX_RELAY_* variables as the relay's are.
TEST_F(ReconcileParity, CloudEventsAndTraceContextOverTwoTables) {
  const std::string second = "public.outbox_rec2_" + suffix_;
  extra_tables_.push_back(second);
  pg_->exec("DROP TABLE " + qualified_table());
  create_shaped_table(qualified_table(), "jsonb");
  create_shaped_table(second, "bytea");
  const std::vector<std::string> mapping = {"--format",
                                            "cloudevents",
                                            "--ce-source",
                                            "/shop/${aggregatetype}",
                                            "--column-traceparent",
                                            "traceparent",
                                            "--column-tracestate",
                                            "tracestate",
                                            "--column-timestamp",
                                            "occurred_at",
                                            "--additional-placement",
                                            "tenant:header"};
  std::vector<std::string> relay_flags = mapping;
  relay_flags.insert(relay_flags.end(),
                     {"--table", second, "--topic", relayed_prefix() + "${aggregatetype}"});
  RelayProcess& relay = start_relay(relay_flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  constexpr int kPerTable = 8;
  const std::string valid = "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'";
  for (const auto& [table, payload] : std::vector<std::pair<std::string, std::string>>{
           {qualified_table(), "jsonb_build_object('seq', g)"},
           {second, "decode(md5(g::text) || '00', 'hex')"}}) {
    pg_->query("INSERT INTO " + table +
                   " (aggregatetype, aggregateid, type, payload, seq, tenant, occurred_at,"
                   " traceparent, tracestate) SELECT (ARRAY['" +
                   aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                   "'])[g % 2 + 1], CASE WHEN g % 4 = 3 THEN NULL ELSE 'agg-' || (g % 3) END,"
                   " 'Created', " +
                   payload +
                   ", g, 'tenant-' || g,"
                   " '2025-06-01 12:00:00.654321+00'::timestamptz + g * interval '1 second',"
                   " CASE g % 3 WHEN 0 THEN NULL WHEN 1 THEN " +
                   valid +
                   " ELSE 'not-a-traceparent' END,"
                   " CASE WHEN g % 3 = 0 THEN NULL ELSE 'vendor=v' || g END"
                   " FROM generate_series(1, $1::int) AS g ORDER BY g",
               {std::to_string(kPerTable)});
  }
  const auto relayed = records_by_id(brokers_, topics_with(relayed_prefix()), 2 * kPerTable);
  ASSERT_EQ(relayed.size(), static_cast<std::size_t>(2 * kPerTable));
  expect_graceful_stop(relay);

  // The mapping flags from the environment this time, as a deployment's environment file
  // gives them to run and reconcile alike (--additional-placement is argv only, as for run).
  std::vector<std::string> args = {"reconcile",
                                   "--pg",
                                   conninfo_,
                                   "--brokers",
                                   brokers_,
                                   "--table",
                                   qualified_table(),
                                   "--table",
                                   second,
                                   "--column-time",
                                   "created_at",
                                   "--timeout",
                                   "30s",
                                   "--topic",
                                   repaired_prefix() + "${aggregatetype}",
                                   "--since",
                                   "10m",
                                   "--repair",
                                   "--additional-placement",
                                   "tenant:header"};
  const std::vector<std::pair<std::string, std::string>> env = {
      {"OUTBOX_RELAY_FORMAT", "cloudevents"},
      {"OUTBOX_RELAY_CE_SOURCE", "/shop/${aggregatetype}"},
      {"OUTBOX_RELAY_COLUMN_TRACEPARENT", "traceparent"},
      {"OUTBOX_RELAY_COLUMN_TRACESTATE", "tracestate"},
      {"OUTBOX_RELAY_COLUMN_TIMESTAMP", "occurred_at"}};
  for (const auto& [name, value] : env) ASSERT_EQ(::setenv(name.c_str(), value.c_str(), 1), 0);
  CommandResult r;
  {
    ScopeGuard unset([&] {
      for (const auto& [name, value] : env) ::unsetenv(name.c_str());
    });
    r = run_to_end(relay_bin_, args, log_path("reconcile_env_out"), log_path("reconcile_env_err"),
                   120s);
  }
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(lines_of(r.out, "repaired").size(), static_cast<std::size_t>(2 * kPerTable)) << r.out;
  const auto repaired = records_by_id(brokers_, topics_with(repaired_prefix()), 2 * kPerTable);
  ASSERT_EQ(repaired.size(), static_cast<std::size_t>(2 * kPerTable));
  int traced = 0, octets = 0;
  for (const auto& [id, original] : relayed) {
    ASSERT_EQ(repaired.count(id), 1u) << id << " not repaired";
    expect_same_record(original, relayed_prefix(), repaired.at(id), repaired_prefix(), true, id);
    traced += original.headers.count("traceparent") > 0;
    octets += original.headers.count("content-type") > 0 &&
              original.headers.at("content-type") == "application/octet-stream";
    EXPECT_EQ(original.headers.count("ce_specversion"), 1u) << id;
  }
  EXPECT_EQ(traced, 2 * 3);  // g = 1, 4, 7 in each table
  EXPECT_EQ(octets, kPerTable);
  // One commit order over both tables: each aggregate's events (the same keys are in both
  // tables) in the relay's order.
  const auto order = [](const std::map<std::string, Record>& records, std::size_t prefix) {
    std::map<std::pair<std::string, std::string>, std::map<std::int64_t, std::string>> out;
    for (const auto& [id, r] : records) {
      if (r.key) out[{r.topic.substr(prefix), *r.key}][r.offset] = id;
    }
    std::map<std::pair<std::string, std::string>, std::vector<std::string>> ids;
    for (const auto& [aggregate, by_offset] : out) {
      for (const auto& [offset, id] : by_offset) ids[aggregate].push_back(id);
    }
    return ids;
  };
  EXPECT_EQ(order(relayed, relayed_prefix().size()), order(repaired, repaired_prefix().size()));
}

// --tombstone-on-empty-payload: a NULL or blank payload is repaired as the relay sent it, the
// key with a null value, in the key's partition; without the flag the same rows are unmappable.
TEST_F(ReconcileParity, TombstonesAreRepairedAsTombstones) {
  pg_->exec("DROP TABLE " + qualified_table());
  create_shaped_table(qualified_table(), "text");
  for (const auto& prefix : {relayed_prefix(), repaired_prefix()}) {
    for (const auto& topic : topics_with(prefix)) {
      ASSERT_NO_THROW(create_topic(brokers_, topic, 3, 1));
    }
  }
  RelayProcess& relay = start_relay(
      {"--tombstone-on-empty-payload", "--topic", relayed_prefix() + "${aggregatetype}"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kRows = 9;
  pg_->query("INSERT INTO " + qualified_table() +
                 " (aggregatetype, aggregateid, type, payload, seq) SELECT '" + aggregatetypes_[0] +
                 "', 'agg-' || g, 'T', CASE g % 3 WHEN 0 THEN NULL WHEN 1 THEN ' ' ELSE"
                 " '{\"g\": ' || g || '}' END, g FROM generate_series(1, $1::int) AS g ORDER BY g",
             {std::to_string(kRows)});
  const auto relayed = records_by_id(brokers_, topics_with(relayed_prefix()), kRows);
  ASSERT_EQ(relayed.size(), static_cast<std::size_t>(kRows));
  expect_graceful_stop(relay);

  const std::vector<std::string> window = {"--topic", repaired_prefix() + "${aggregatetype}",
                                           "--since", "10m", "--repair"};
  std::vector<std::string> without = window;
  without.pop_back();  // listing only
  CommandResult plain = reconcile(without);
  EXPECT_EQ(lines_of(plain.out, "unmappable").size(), 3u) << plain.out;  // the NULL payloads

  std::vector<std::string> flags = {"--tombstone-on-empty-payload"};
  flags.insert(flags.end(), window.begin(), window.end());
  CommandResult r = reconcile(flags);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto repaired = records_by_id(brokers_, topics_with(repaired_prefix()), kRows);
  ASSERT_EQ(repaired.size(), static_cast<std::size_t>(kRows));
  int tombstones = 0;
  for (const auto& [id, original] : relayed) {
    ASSERT_EQ(repaired.count(id), 1u) << id << " not repaired";
    // The timestamp is the commit time (no timestamp column): checked by the first test.
    expect_same_record(original, relayed_prefix(), repaired.at(id), repaired_prefix(), false, id);
    tombstones += original.null_value;
  }
  EXPECT_EQ(tombstones, 6);  // NULL and blank payloads
}

}  // namespace
}  // namespace outbox_test
