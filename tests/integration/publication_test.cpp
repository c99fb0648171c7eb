// No event lost to configuration. The publication decides what pgoutput sends: an insert it hides
// never shows in the stream, and a relay that confirmed keepalive positions past it would lose it
// silently. Each story here ends with every event in Kafka, or with the relay refusing (exit code
// 5, one line naming the publication and the table) and the slot not confirmed past the events:
//   - a partitioned outbox, published via its root (the relay's own publication) or leaf by leaf
//     (a user's publication), with partitions created and attached while the relay streams;
//   - a publication without the table, without inserts, or with a row filter;
//   - a publication altered while the relay streams;
//   - changes the relay skips (other tables, updates, deletes, truncates) are counted.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts.

#include "outbox_test/http.hpp"
#include "relay_fixture.hpp"

namespace outbox_test {
namespace {

constexpr int kExitConfig = 5;

class PublicationIntegration : public RelayIntegration {
 protected:
  // The outbox partitioned by a time column, with one partition per year in `years`.
  void create_partitioned_outbox(const std::vector<int>& years) {
    pg_->exec("CREATE TABLE " + qualified_table() +
              " (id uuid NOT NULL DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL,"
              " created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at))"
              " PARTITION BY RANGE (created_at)");
    for (int year : years) create_partition(year);
  }

  std::string partition_name(int year) const { return table_ + "_y" + std::to_string(year); }

  void create_partition(int year) {
    pg_->exec("CREATE TABLE public." + partition_name(year) + " PARTITION OF " + qualified_table() +
              " FOR VALUES FROM ('" + std::to_string(year) + "-01-01') TO ('" +
              std::to_string(year + 1) + "-01-01')");
  }

  // Another table, dropped after the test.
  std::string create_other_table(const std::string& name_suffix) {
    const std::string name = "public." + table_ + "_" + name_suffix;
    extra_tables_.push_back(name);
    pg_->exec("CREATE TABLE " + name + " (id serial PRIMARY KEY, note text)");
    return name;
  }

  // One transaction per event; event `seq` of aggregate agg-(seq % 5) (each aggregate of one
  // aggregate type, so of one topic), dated in `year` when the
  // table has a created_at column.
  void insert_events(int first_seq, int count, std::optional<int> year = std::nullopt) {
    for (int seq = first_seq; seq < first_seq + count; ++seq) {
      const std::string aggregate = "agg-" + std::to_string(seq % 5);
      std::string columns = "aggregatetype, aggregateid, type, payload";
      std::string values = "'" + aggregatetypes_[(seq % 5) % 2] + "', '" + aggregate +
                           "', 'Event', " + "'{\"seq\": " + std::to_string(seq) + "}'";
      if (year) {
        columns += ", created_at";
        values += ", '" + std::to_string(*year) + "-06-01T00:00:00Z'::timestamptz + interval '" +
                  std::to_string(seq) + " seconds'";
      }
      pg_->exec("INSERT INTO " + qualified_table() + " (" + columns + ") VALUES (" + values + ")");
    }
  }

  // Reads until every committed row is in Kafka, then checks that nothing else is there and
  // that each aggregate's events are in commit order.
  void expect_all_committed_in_kafka(std::chrono::seconds timeout) {
    const auto rows = committed_rows();
    KafkaReader reader(brokers_, {topics_[0], topics_[1]});
    DistinctIds all(rows.size());
    ASSERT_TRUE(reader.read_until(std::ref(all), timeout))
        << all.count() << " of " << rows.size() << " committed events reached Kafka";
    expect_confirmed_reaches(pg_->current_wal_lsn(), timeout);
    EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
    EXPECT_EQ(reader.records().size(), rows.size()) << "each committed event exactly once";
    Problems problems = check_committed_in_order(reader, rows);
    EXPECT_EQ(problems.count(), 0u) << problems.describe();
  }

  // The relay exits with code 5 within `timeout`, and its log names what it refused.
  void expect_refusal(RelayProcess& relay, const std::vector<std::string>& log_mentions,
                      std::chrono::seconds timeout = 60s) {
    const auto code = relay.wait_exit(timeout);
    ASSERT_TRUE(code.has_value()) << "relay still running " << timeout.count() << " s later";
    EXPECT_EQ(*code, kExitConfig) << "exit code for a publication that hides outbox inserts";
    const std::string log = read_file(relay.log_path());
    for (const auto& text : log_mentions) {
      EXPECT_NE(log.find(text), std::string::npos) << "log does not mention " << text;
    }
  }

  // A slot made by hand before the relay runs (as `outbox-relay setup` or a DBA would), so that
  // events can be committed before the relay ever starts. Returns its consistent point.
  Lsn create_slot() {
    pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
    return pg_->slot_confirmed_flush(slot_).value();
  }

  // The relay on the outbox with its own publication, checking it every 2 s at the least, ten
  // events relayed and confirmed.
  RelayProcess& start_streaming_ten_events_confirmed() {
    create_outbox_table();
    RelayProcess& relay = start_relay({"--publication-check-interval", "2s"});
    wait_until_streaming(relay);
    insert_events(1, 10);
    expect_confirmed_reaches(pg_->current_wal_lsn(), 30s);
    return relay;
  }

  // The slot is not confirmed past `lsn`: a transaction committed after it is sent again.
  void expect_confirmed_at_most(Lsn lsn) {
    const auto confirmed = pg_->slot_confirmed_flush(slot_);
    ASSERT_TRUE(confirmed.has_value());
    EXPECT_LE(*confirmed, lsn) << "slot confirmed past " << format_lsn(lsn) << ", at "
                               << format_lsn(*confirmed);
  }
};

// The relay's own publication on a partitioned outbox: partitions are published under the
// table's name. Events in every partition, and in a partition created while streaming, arrive.
TEST_F(PublicationIntegration, PartitionedOutboxViaRoot) {
  create_partitioned_outbox({2025, 2026});
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(1, 20, 2025);
  insert_events(21, 20, 2026);
  create_partition(2027);
  insert_events(41, 10, 2027);
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_NO_FATAL_FAILURE(expect_all_committed_in_kafka(60s));
  expect_confirmed_reaches(after, 30s);
  EXPECT_EQ(
      pg_->scalar("SELECT pubviaroot::text FROM pg_publication WHERE pubname = $1", {publication_}),
      "true");
  expect_graceful_stop(relay);
}

// A user's publication that publishes the leaf partitions under their own names: inserts into
// any partition are the table's events, also into partitions created or attached while the
// relay streams.
TEST_F(PublicationIntegration, PartitionedOutboxLeavesPublished) {
  create_partitioned_outbox({2025, 2026});
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() +
            " WITH (publish = 'insert', publish_via_partition_root = false)");
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(1, 20, 2025);
  insert_events(21, 20, 2026);
  create_partition(2027);
  insert_events(41, 10, 2027);
  // A table made apart and attached as a partition.
  const std::string attached = "public." + partition_name(2028);
  pg_->exec("CREATE TABLE " + attached + " (LIKE " + qualified_table() + " INCLUDING DEFAULTS)");
  pg_->exec("ALTER TABLE " + qualified_table() + " ATTACH PARTITION " + attached +
            " FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')");
  insert_events(51, 10, 2028);
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_NO_FATAL_FAILURE(expect_all_committed_in_kafka(60s));
  expect_confirmed_reaches(after, 30s);
  expect_graceful_stop(relay);
}

// An existing publication that does not include the outbox table: refused before streaming, the
// slot stays before the events committed meanwhile; once the DBA adds the table, all arrive.
TEST_F(PublicationIntegration, PublicationWithoutTheTableIsRefused) {
  create_outbox_table();
  const std::string other = create_other_table("other");
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + other);
  const Lsn slot_start = create_slot();
  insert_events(1, 10);
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(expect_refusal(
      relay, {"publication " + publication_ + " does not publish table " + qualified_table()}));
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), slot_start) << "slot moved past hidden events";

  // Fixed by the DBA: events committed from then on arrive. Those committed before stay hidden,
  // as pgoutput decodes each change with the catalog of its time: the refusal and the slot's
  // position tell the operator where the gap starts, and `reconcile` fills it.
  pg_->exec("ALTER PUBLICATION " + publication_ + " ADD TABLE " + qualified_table());
  insert_events(11, 10);
  RelayProcess& fixed = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(fixed));
  KafkaReader reader(brokers_, {topics_[0], topics_[1]});
  DistinctIds ten(10);
  ASSERT_TRUE(reader.read_until(std::ref(ten), 60s)) << ten.count() << " of the 10 later events";
  expect_confirmed_reaches(pg_->current_wal_lsn(), 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  for (const auto& record : reader.records()) {
    EXPECT_EQ(record.value.find("\"seq\": 1}"), std::string::npos) << describe(record);
    EXPECT_GE(std::stoi(record.value.substr(record.value.find(':') + 1)), 11) << describe(record);
  }
  EXPECT_EQ(reader.records().size(), 10u);
  expect_graceful_stop(fixed);
}

// `outbox-relay setup` makes the same check: exit code 5 and the same line.
TEST_F(PublicationIntegration, SetupRefusesAPublicationWithoutTheTable) {
  create_outbox_table();
  const std::string other = create_other_table("other");
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + other);
  RelayProcess setup(relay_bin_,
                     {"setup", "--pg", conninfo_, "--slot", slot_, "--publication", publication_,
                      "--table", qualified_table()},
                     log_path("setup"));
  const auto code = setup.wait_exit(30s);
  ASSERT_TRUE(code.has_value()) << "setup did not finish within 30 s";
  EXPECT_EQ(*code, kExitConfig);
  EXPECT_NE(
      read_file(setup.log_path())
          .find("publication " + publication_ + " does not publish table " + qualified_table()),
      std::string::npos)
      << read_file(setup.log_path());
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "setup created the slot of a refused configuration";
}

// An existing publication of the outbox that publishes updates and deletes but no inserts.
TEST_F(PublicationIntegration, PublicationWithoutInsertsIsRefused) {
  create_outbox_table();
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() +
            " WITH (publish = 'update, delete')");
  const Lsn slot_start = create_slot();
  insert_events(1, 10);
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(
      expect_refusal(relay, {"publication " + publication_ +
                                 " does not publish inserts (publish = 'update, "
                                 "delete')",
                             qualified_table()}));
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), slot_start) << "slot moved past hidden events";
}

// A row filter hides the rows it does not match.
TEST_F(PublicationIntegration, RowFilterIsRefused) {
  create_outbox_table();
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() +
            " WHERE (aggregatetype <> 'x')");
  const Lsn slot_start = create_slot();
  insert_events(1, 5);
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(expect_refusal(relay, {"only for rows matching WHERE"}));
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), slot_start);
}

// Leaf partitions published one by one, one of them left out.
TEST_F(PublicationIntegration, PartitionLeftOutIsRefused) {
  create_partitioned_outbox({2025, 2026});
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE public." + partition_name(2025) +
            " WITH (publish = 'insert')");
  const Lsn slot_start = create_slot();
  insert_events(1, 5, 2026);
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(
      expect_refusal(relay, {"publishes only some partitions of table " + qualified_table(),
                             "public." + partition_name(2026)}));
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), slot_start);
}

// The table dropped from the publication while the relay streams: the relay stops with exit
// code 5 and the slot is not confirmed past the ALTER, so the hidden events stay recoverable.
TEST_F(PublicationIntegration, TableDroppedFromPublicationWhileStreaming) {
  RelayProcess& relay = start_streaming_ten_events_confirmed();
  pg_->exec("ALTER PUBLICATION " + publication_ + " DROP TABLE " + qualified_table());
  const Lsn after_alter = pg_->current_wal_lsn();
  insert_events(11, 10);
  ASSERT_NO_FATAL_FAILURE(expect_refusal(
      relay, {"publication " + publication_ + " does not publish table " + qualified_table()},
      30s));
  expect_confirmed_at_most(after_alter);
}

// Dropped and added back between two checks (checks run every 0.5 s while the confirmed position
// waits on one): the event committed in between was hidden. The relay notices the publication's
// rows were rewritten and stops without confirming past it.
TEST_F(PublicationIntegration, TableDroppedAndAddedBackWhileStreaming) {
  RelayProcess& relay = start_streaming_ten_events_confirmed();
  pg_->exec("ALTER PUBLICATION " + publication_ + " DROP TABLE " + qualified_table());
  const Lsn after_drop = pg_->current_wal_lsn();
  insert_events(11, 1);
  pg_->exec("ALTER PUBLICATION " + publication_ + " ADD TABLE " + qualified_table());
  ASSERT_NO_FATAL_FAILURE(expect_refusal(relay, {"publication " + publication_}, 30s));
  expect_confirmed_at_most(after_drop);
}

// A publication that carries more than outbox inserts: every skipped change is counted by
// reason in /metrics and logged once per relation; the outbox events all arrive.
TEST_F(PublicationIntegration, SkippedChangesAreCounted) {
  create_outbox_table();
  const std::string other = create_other_table("other");
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() + ", " +
            other + " WITH (publish = 'insert, update, delete, truncate')");
  const std::uint16_t port = free_port();
  RelayProcess& relay = start_relay({"--metrics-addr", "127.0.0.1:" + std::to_string(port)});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(1, 10);
  pg_->exec("INSERT INTO " + other + " (note) SELECT 'n' FROM generate_series(1, 3)");
  pg_->exec("UPDATE " + other + " SET note = 'm'");
  pg_->exec("DELETE FROM " + other + " WHERE id = (SELECT min(id) FROM " + other + ")");
  pg_->exec("TRUNCATE " + other);
  insert_events(11, 5);
  ASSERT_NO_FATAL_FAILURE(expect_all_committed_in_kafka(60s));
  std::map<std::string, std::string> samples;
  const auto expected = std::map<std::string, std::string>{
      {"outbox_relay_skipped_changes_total{reason=\"other_table\"}", "3"},
      {"outbox_relay_skipped_changes_total{reason=\"update\"}", "3"},
      {"outbox_relay_skipped_changes_total{reason=\"delete\"}", "1"},
      {"outbox_relay_skipped_changes_total{reason=\"truncate\"}", "1"}};
  const bool counted = wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        for (const auto& [name, value] : expected) {
          if (samples[name] != value) return false;
        }
        return true;
      },
      10s, 100ms);
  for (const auto& [name, value] : expected) {
    EXPECT_EQ(samples[name], value) << name << (counted ? "" : " (waited 10 s)");
  }
  const std::string log = read_file(relay.log_path());
  for (const char* reason : {"other_table", "update", "delete", "truncate"}) {
    const std::string line = std::string("event=skipping slot=") + slot_ + " reason=" + reason;
    const auto first = log.find(line);
    EXPECT_NE(first, std::string::npos) << "no log line " << line;
    EXPECT_EQ(log.find(line, first + 1), std::string::npos) << "logged more than once: " << line;
  }
  expect_graceful_stop(relay);
}

// While the relay runs, /metrics carries the backlog as `status` counts it: outbox events not yet
// confirmed by the slot and the age of the oldest. With Kafka unreachable they pile up; once a
// relay with a broker delivered them, the count drops to 0.
TEST_F(PublicationIntegration, BacklogInMetricsWhileRunning) {
  create_outbox_table();
  // The slot made beforehand, as `setup` does: a relay that must create it reads its progress
  // record in Kafka first, and this one's Kafka is unreachable.
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const std::uint16_t port = free_port();
  RelayProcess& stuck = start_relay({"--brokers", "127.0.0.1:1", "--metrics-addr",
                                     "127.0.0.1:" + std::to_string(port), "--backlog-interval",
                                     "1s", "--shutdown-timeout", "1s"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(stuck));
  insert_events(1, 7);
  std::map<std::string, std::string> samples;
  const bool counted = wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        return samples["outbox_relay_pending_events"] == "7" &&
               std::stod(samples["outbox_relay_oldest_pending_age_seconds"].empty()
                             ? "0"
                             : samples["outbox_relay_oldest_pending_age_seconds"]) > 0;
      },
      30s, 200ms);
  EXPECT_TRUE(counted) << "pending_events=" << samples["outbox_relay_pending_events"]
                       << " oldest_pending_age_seconds="
                       << samples["outbox_relay_oldest_pending_age_seconds"];
  EXPECT_EQ(samples["outbox_relay_pending_events_lower_bound"], "0");
  // The count of 7 came from a successful scan: present and at least 1.
  EXPECT_GE(sample_value(samples, "outbox_relay_backlog_scans_total{result=\"ok\"}").value_or(-1),
            1)
      << "outbox_relay_backlog_scans_total{result=\"ok\"} missing or 0";
  const auto stopped = stuck.terminate(30s);
  ASSERT_TRUE(stopped.has_value()) << "relay did not stop within 30 s of SIGTERM";

  const std::uint16_t port2 = free_port();
  RelayProcess& relay = start_relay(
      {"--metrics-addr", "127.0.0.1:" + std::to_string(port2), "--backlog-interval", "1s"});
  ASSERT_NO_FATAL_FAILURE(expect_all_committed_in_kafka(60s));
  const bool drained = wait_until(
      [&] {
        samples = parse_samples(http_get(port2, "/metrics").body);
        return samples["outbox_relay_pending_events"] == "0";
      },
      30s, 200ms);
  EXPECT_TRUE(drained) << "pending_events=" << samples["outbox_relay_pending_events"];
  EXPECT_EQ(samples["outbox_relay_oldest_pending_age_seconds"], "0");
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
