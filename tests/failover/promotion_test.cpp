// A real failover (docs/failover.md): a PostgreSQL 18 primary and a streaming standby
// (tests/failover/pg_pair.sh: synchronized_standby_slots on the primary, sync_replication_slots
// and hot_standby_feedback on the standby), the slot made by the relay with --failover, three
// writers under a steady load. Once `status --standby` calls the standby's copy ready, the
// standby's walreceiver is paused while the primary commits 300 more transactions (the window of
// asynchronous replication), the primary is killed with SIGKILL and so is the walreceiver (what it
// had not written is lost), the standby promoted, the writers move to it. The relay, given both
// hosts with target_session_attrs=read-write, carries on by itself: every outbox row of the
// promoted database reaches Kafka, no event of a transaction the promoted database lacks does (no
// ghost), and each aggregate's events arrive in commit order (first deliveries; re-sends are
// counted and printed). In both delivery modes; and without synchronized_standby_slots, the
// misconfiguration: the relay warns and ghosts reach Kafka.
//
// FailoverWithoutTheSlot: a PostgreSQL 15 pair (no failover slots), the promoted standby without
// the relay's slot: exit 4 naming the range, then the gap repaired with --gap-repair-column.
//
// The pair runs on OUTBOX_PG_FAILOVER_PORT and the next port (default: OUTBOX_PG_PORT, or
// 25432, plus 2; pair_fixture.hpp); Kafka is the shared broker of scripts/test.sh. The JetStream
// counterpart of FailoverWithoutTheSlot is nats_failover_test.cpp.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/record_checks.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"
#include "pair_fixture.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// What a consumer of the promoted database's events checks in Kafka: records of rows the
// database does not have (ghosts, the first five printed), duplicates, and each aggregate's first
// deliveries in commit (seq) order.
struct PromotedEvents {
  Problems problems;
  std::set<std::string> first_seen;  // ids delivered
  std::size_t duplicates = 0;
  std::size_t ghosts = 0;
};

PromotedEvents check_promoted(const std::vector<Record>& records,
                              const std::unordered_map<std::string, OutboxRow>& rows) {
  PromotedEvents out;
  std::map<std::string, std::int64_t> last_seq;
  for (const Record* r : in_kafka_order(records)) {
    const std::string& id = r->headers.at("id");
    auto row = rows.find(id);
    if (row == rows.end()) {
      if (++out.ghosts <= 5) std::cerr << "ghost: " << describe(*r) << "\n";
      continue;
    }
    if (!out.first_seen.insert(id).second) {
      ++out.duplicates;
      continue;
    }
    auto last = last_seq.find(row->second.aggregateid);
    if (last != last_seq.end() && last->second >= row->second.seq) {
      out.problems.add("not in commit order: " + describe(*r));
    }
    last_seq[row->second.aggregateid] = row->second.seq;
  }
  return out;
}

// One writer: transactions of 1 to 4 events for one of its aggregates, seq increasing per writer
// (so per aggregate); on a failed statement it reconnects (the multi-host conninfo finds the
// promoted standby) until told to stop.
class Writer {
 public:
  Writer(std::string conninfo, std::string table, std::string aggregatetype, int id)
      : conninfo_(std::move(conninfo)),
        table_(std::move(table)),
        aggregatetype_(std::move(aggregatetype)),
        id_(id) {}

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int commits() const { return commits_; }
  int failures() const { return failures_; }

 private:
  void run() {
    std::mt19937 rng(static_cast<unsigned>(id_));
    std::unique_ptr<PgClient> pg;
    std::int64_t seq = 0;
    while (!stop_) {
      try {
        if (!pg) pg = std::make_unique<PgClient>(conninfo_);
        const int events = 1 + static_cast<int>(rng() % 4);
        const std::string aggregate = "w" + std::to_string(id_) + "-" + std::to_string(rng() % 5);
        pg->query(
            "INSERT INTO " + table_ +
                " (aggregatetype, aggregateid, type, payload) SELECT $1, $2, 'Changed',"
                " jsonb_build_object('seq', g) FROM generate_series($3::bigint, $4::bigint)"
                " AS g ORDER BY g",
            {aggregatetype_, aggregate, std::to_string(seq + 1), std::to_string(seq + events)});
        seq += events;
        ++commits_;
        // A steady load, not a flood: about 200 transactions per second per writer.
        std::this_thread::sleep_for(5ms);
      } catch (const std::exception&) {
        // The primary is gone: the transaction may or may not be in the promoted database; the
        // test compares with what is there. Its seq numbers are never reused.
        seq += 4;
        ++failures_;
        pg.reset();
        std::this_thread::sleep_for(100ms);
      }
    }
  }

  std::string conninfo_, table_, aggregatetype_;
  int id_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> commits_{0};
  std::atomic<int> failures_{0};
};

// Three writers (Writer 1 to 3) on the outbox, started together, stopped by stop() or at the
// latest when the set goes.
class Writers {
 public:
  Writers(const std::string& conninfo, const std::string& table, const std::string& aggregatetype) {
    for (int i = 0; i < 3; ++i) {
      writers_.push_back(std::make_unique<Writer>(conninfo, table, aggregatetype, i + 1));
      writers_.back()->start();
    }
  }
  ~Writers() { stop(); }
  Writers(const Writers&) = delete;
  Writers& operator=(const Writers&) = delete;
  void stop() {
    for (auto& w : writers_) w->stop();
  }
  int commits() const {
    int n = 0;
    for (const auto& w : writers_) n += w->commits();
    return n;
  }

 private:
  std::vector<std::unique_ptr<Writer>> writers_;
};

// The delivery mode, and whether the primary protects the failover slot with
// synchronized_standby_slots.
struct Setup {
  std::string delivery;
  bool protected_slot = true;
};

class Promotion : public PairTest, public ::testing::WithParamInterface<Setup> {
 protected:
  Promotion() : PairTest("promo") {}
  bool protected_pair() const override { return GetParam().protected_slot; }
};

TEST_P(Promotion, RelayCarriesOnOnThePromotedStandbyWithNothingMissingAndNoGhost) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(wait_for_table_on_standby());
  RelayProcess& relay = start_relay({"--failover", "--delivery", GetParam().delivery});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  EXPECT_EQ(
      pg_->scalar("SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1", {slot_}),
      std::optional<std::string>("true"));

  Writers writers(conninfo_, qualified_table(), aggregatetypes_[0]);
  auto commits = [&] { return writers.commits(); };

  // The readiness caveat: the standby's copy becomes persistent only once the primary's slot
  // moved past the standby's catalog xmin. Not before: a promotion then would lose the slot.
  const auto t0 = Clock::now();
  CommandResult ready;
  ASSERT_TRUE(wait_until(
      [&] {
        ready = status();
        return ready.exit_code == 0;
      },
      120s, 500ms))
      << ready.out << ready.err;
  EXPECT_NE(ready.out.find("failover_ready        yes"), std::string::npos) << ready.out;
  // status finds the standby among the hosts of a multi-host --pg by itself.
  CommandResult multi = run_to_end(relay_bin_,
                                   {"status", "--pg", conninfo_, "--slot", slot_, "--publication",
                                    publication_, "--table", qualified_table()},
                                   log_path("status_multi_out"), log_path("status_multi_err"), 30s);
  EXPECT_EQ(multi.exit_code, 0) << multi.out << multi.err;
  EXPECT_NE(multi.out.find("failover_ready        yes"), std::string::npos) << multi.out;
  // The relay's own check agrees, for alerting: with --failover and no --standby it looks for
  // the standby among the hosts of its multi-host --pg.
  std::map<std::string, std::string> samples;
  EXPECT_TRUE(wait_until(
      [&] {
        samples = parse_samples(http_get(metrics_port_, "/metrics").body);
        return samples["outbox_relay_failover_ready"] == "1";
      },
      30s, 500ms))
      << "outbox_relay_failover_ready " << samples["outbox_relay_failover_ready"];
  std::cerr << "standby copy ready after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
            << " ms\n";

  // A steady load for a while more; then the standby stops receiving (its walreceiver paused)
  // while the primary commits on: asynchronous replication's window, which
  // synchronized_standby_slots closes for the relay's slot.
  const int before_pause = commits() + 300;
  ASSERT_TRUE(wait_until([&] { return commits() >= before_pause; }, 60s));
  CommandResult paused = pair({"pause-standby"});
  ASSERT_EQ(paused.exit_code, 0) << paused.err;
  const int window_from = commits();
  ASSERT_TRUE(wait_until([&] { return commits() >= window_from + 300; }, 60s));
  if (!GetParam().protected_slot) {
    // Unprotected, the relay publishes what the standby never received: let it confirm that.
    PgClient primary(primary_);
    const Lsn end = primary.current_wal_lsn();
    ASSERT_TRUE(wait_until(
        [&] {
          const auto confirmed = primary.slot_confirmed_flush(slot_);
          return confirmed && *confirmed >= end;
        },
        30s));
  }
  CommandResult killed = pair({"kill-primary"});
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  // What the paused walreceiver holds unwritten (in its socket's buffer too) is lost with it.
  CommandResult lost = pair({"kill-walreceiver"});
  ASSERT_EQ(lost.exit_code, 0) << lost.err;
  const int at_crash = commits();
  CommandResult promoted = pair({"promote"});
  ASSERT_EQ(promoted.exit_code, 0) << promoted.err;

  // The writers move to the promoted standby and write some more.
  ASSERT_TRUE(wait_until([&] { return commits() >= at_crash + 600; }, 90s))
      << commits() - at_crash << " commits after the crash";
  writers.stop();
  ASSERT_TRUE(relay.is_running()) << tail_file(relay.log_path(), 40);

  // Everything in the promoted database reaches Kafka.
  ASSERT_TRUE(reconnect_pg(30s));
  const auto rows = committed_rows();
  KafkaReader reader(brokers_, topics_);
  reader.set_keep_values(false);
  // Distinct ids: with no ghost, as many as rows means every row (checked below anyway).
  DistinctIds all_there(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all_there), 120s))
      << all_there.count() << " distinct events in Kafka for " << rows.size() << " rows";
  reader.read_for(1s);

  const PromotedEvents events = check_promoted(reader.records(), rows);
  const Problems& problems = events.problems;
  const std::set<std::string>& first_seen = events.first_seen;
  const std::size_t duplicates = events.duplicates;
  const std::size_t ghosts = events.ghosts;
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(first_seen.size(), rows.size());
  std::cerr << GetParam().delivery << (GetParam().protected_slot ? "" : ", unprotected")
            << ": promoted database: " << rows.size()
            << " events; Kafka: " << reader.records().size() << " records, " << duplicates
            << " re-sent, " << ghosts << " ghosts; writers: " << at_crash
            << " commits before the crash, " << commits() - at_crash << " after\n";

  const std::string log = read_file(relay.log_path());
  // The relay resumed at what Kafka acknowledged before the new timeline's switch point
  // (TIMELINE_HISTORY), not at the synced slot's position.
  EXPECT_NE(log.find("switch_point="), std::string::npos) << tail_file(relay.log_path(), 40);
  if (GetParam().protected_slot) {
    EXPECT_EQ(ghosts, 0u) << "events of transactions the promoted database lacks";
    EXPECT_EQ(log.find("event=ghosts_published"), std::string::npos);
    if (GetParam().delivery == std::string("exactly-once")) {
      EXPECT_EQ(duplicates, 0u) << "an event visible twice to a read_committed consumer across "
                                   "the promotion";
    }
  } else {
    // As documented: the relay warned at start, events of transactions lost at the promotion
    // reached Kafka, and the relay said so with the WAL range.
    EXPECT_NE(log.find("event=failover_unprotected"), std::string::npos);
    EXPECT_GT(ghosts, 0u) << "the standby missed transactions the relay had published";
    EXPECT_NE(log.find("event=ghosts_published"), std::string::npos)
        << "ghosts reached Kafka and the relay said nothing";
  }
  // The relay found the promoted standby by itself (a new timeline) and still streams.
  expect_graceful_stop(relay);
}

// At-least-once, and exactly-once read read_committed: the same guarantees (nothing missing, no
// ghost, order), and exactly-once shows 0 duplicates across the promotion; the re-sent count of
// at-least-once is printed.
// Unprotected (no synchronized_standby_slots): the misconfiguration, as documented, publishes
// ghosts.
INSTANTIATE_TEST_SUITE_P(Delivery, Promotion,
                         ::testing::Values(Setup{"at-least-once", true},
                                           Setup{"exactly-once", true},
                                           Setup{"at-least-once", false}),
                         [](const auto& info) {
                           std::string name = info.param.delivery;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name + (info.param.protected_slot ? "" : "_unprotected");
                         });

// Decoding on a hot standby (PostgreSQL 16+, docs/failover.md): the relay's --pg names the
// standby alone; its slot is made there; the writers write on the primary. Then the primary dies
// and the standby is promoted under the relay, whose stream goes on (the walsender follows the
// new timeline). The relay's connection is then cut, so that it reconnects to the same server on
// its new timeline, and later it is restarted: each time it resumes at what Kafka acknowledged,
// with no ghost reported (what it decoded is in that server's WAL). Every row of the promoted
// database in Kafka, no ghost, per-aggregate order; the slot confirmed only what Kafka holds.
class StandbyDecoding : public PairTest, public ::testing::WithParamInterface<std::string> {
 protected:
  StandbyDecoding() : PairTest("sbdec") {}

  // The relay with --pg naming the standby alone.
  RelayProcess& start_relay_on_standby() {
    const std::string both = conninfo_;
    conninfo_ = standby_;
    RelayProcess& relay = start_relay({"--delivery", GetParam()});
    conninfo_ = both;
    return relay;
  }

  // Streaming from its slot on the standby. Creating a slot on a standby waits for a
  // running-transactions record from the primary: the primary is asked for one meanwhile.
  void wait_until_streaming_on_standby(RelayProcess& relay, PgClient& standby) {
    PgClient primary(primary_);
    const bool streaming = wait_until(
        [&] {
          if (!relay.is_running()) return true;
          primary.exec("SELECT pg_log_standby_snapshot()");
          return read_file(relay.log_path()).find("event=streaming") != std::string::npos &&
                 standby.slot_active(slot_);
        },
        60s, 500ms);
    ASSERT_TRUE(streaming && relay.is_running()) << tail_file(relay.log_path(), 30);
  }

  // The slot is confirmed only for what Kafka holds: the rows committed before `end` (a WAL
  // position after them) are all in Kafka once the slot on `server` (the standby, promoted or
  // not) was confirmed to `end`.
  void expect_confirmed_means_delivered(PgClient& server, const std::string& what) {
    const auto rows = committed_rows();
    // The primary's position after those commits; the standby's slot gets there once the
    // standby replayed them.
    const Lsn end = pg_->current_wal_lsn();
    ASSERT_TRUE(wait_until(
        [&] {
          const auto confirmed = server.slot_confirmed_flush(slot_);
          return confirmed && *confirmed >= end;
        },
        60s))
        << what << ": the slot was not confirmed to " << format_lsn(end);
    KafkaReader reader(brokers_, topics_);
    reader.set_keep_values(false);
    ASSERT_TRUE(reader.read_to_end(60s));
    std::set<std::string> in_kafka;
    for (const Record& r : reader.records()) in_kafka.insert(r.headers.at("id"));
    std::size_t missing = 0;
    for (const auto& [id, row] : rows) missing += in_kafka.count(id) == 0 ? 1 : 0;
    EXPECT_EQ(missing, 0u) << what << ": the slot was confirmed to " << format_lsn(end) << " but "
                           << missing << " of " << rows.size()
                           << " rows committed before it are not in Kafka";
  }
};

TEST_P(StandbyDecoding, RelayOnTheStandbyCarriesOnThroughItsPromotion) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(wait_for_table_on_standby());
  PgClient standby(standby_);

  // What a standby cannot do is refused, naming the primary: the publication is made there.
  {
    RelayProcess& refused = start_relay_on_standby();
    const auto code = refused.wait_exit(60s);
    ASSERT_TRUE(code.has_value()) << tail_file(refused.log_path(), 20);
    EXPECT_EQ(*code, 1);
    const std::string log = read_file(refused.log_path());
    EXPECT_NE(log.find("is a standby (read-only): create it on the primary"), std::string::npos)
        << tail_file(refused.log_path(), 20);
    CommandResult setup =
        run_to_end(relay_bin_,
                   {"setup", "--pg", standby_, "--slot", slot_, "--publication", publication_,
                    "--table", qualified_table(), "--messages", "outbox"},
                   log_path("setup_out"), log_path("setup_err"), 30s);
    EXPECT_EQ(setup.exit_code, 1);
    EXPECT_NE(setup.err.find("this server is a standby (read-only)"), std::string::npos)
        << setup.err;
    EXPECT_FALSE(standby.slot_confirmed_flush(slot_).has_value()) << "a refused start made a slot";
  }
  pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() +
            " WITH (publish = 'insert', publish_via_partition_root = true)");
  ASSERT_TRUE(wait_until(
      [&] {
        return standby
            .scalar("SELECT pubname::text FROM pg_publication WHERE pubname = $1", {publication_})
            .has_value();
      },
      30s));

  RelayProcess& relay = start_relay_on_standby();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming_on_standby(relay, standby));
  EXPECT_FALSE(pg_->slot_confirmed_flush(slot_).has_value()) << "the slot is on the standby only";

  Writers writers(conninfo_, qualified_table(), aggregatetypes_[0]);
  auto commits = [&] { return writers.commits(); };

  // The primary writes, the relay decodes on the standby.
  ASSERT_TRUE(wait_until([&] { return commits() >= 600; }, 60s));
  ASSERT_NO_FATAL_FAILURE(expect_confirmed_means_delivered(standby, "on the standby"));

  // The primary dies, the standby is promoted under the relay; the writers move to it.
  ASSERT_EQ(pair({"kill-primary"}).exit_code, 0);
  const int at_crash = commits();
  ASSERT_EQ(pair({"promote"}).exit_code, 0);
  ASSERT_TRUE(wait_until([&] { return commits() >= at_crash + 600; }, 90s))
      << commits() - at_crash << " commits after the promotion";
  ASSERT_TRUE(relay.is_running()) << tail_file(relay.log_path(), 40);
  ASSERT_TRUE(reconnect_pg(30s));
  ASSERT_NO_FATAL_FAILURE(expect_confirmed_means_delivered(standby, "after the promotion"));

  // The relay's connection cut: it reconnects to the same server, now on timeline 2.
  const int before_cut = commits();
  standby.exec(
      "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '" +
      slot_ + "'");
  ASSERT_TRUE(wait_until(
      [&] {
        return read_file(relay.log_path()).find("same_server=true") != std::string::npos &&
               standby.slot_active(slot_);
      },
      60s))
      << tail_file(relay.log_path(), 30);
  ASSERT_TRUE(wait_until([&] { return commits() >= before_cut + 300; }, 60s));

  // A relay started anew after the promotion (in exactly-once mode it reads the checkpoint
  // written while it decoded on the standby).
  expect_graceful_stop(relay);
  RelayProcess& again = start_relay_on_standby();
  ASSERT_TRUE(wait_until(
      [&] {
        return !again.is_running() ||
               (read_file(again.log_path()).find("event=streaming") != std::string::npos &&
                standby.slot_active(slot_));
      },
      60s));
  ASSERT_TRUE(again.is_running()) << tail_file(again.log_path(), 30);
  const int after_restart = commits();
  ASSERT_TRUE(wait_until([&] { return commits() >= after_restart + 300; }, 60s));
  writers.stop();
  ASSERT_NO_FATAL_FAILURE(expect_confirmed_means_delivered(standby, "at the end"));

  // Everything in the promoted database in Kafka, once, in order; nothing else.
  const auto rows = committed_rows();
  KafkaReader reader(brokers_, topics_);
  reader.set_keep_values(false);
  ASSERT_TRUE(reader.read_to_end(60s));
  const PromotedEvents events = check_promoted(reader.records(), rows);
  const Problems& problems = events.problems;
  const std::set<std::string>& first_seen = events.first_seen;
  const std::size_t duplicates = events.duplicates;
  const std::size_t ghosts = events.ghosts;
  std::cerr << GetParam() << ", decoding on the standby: promoted database: " << rows.size()
            << " events; Kafka: " << reader.records().size() << " records, " << duplicates
            << " re-sent, " << ghosts << " ghosts\n";
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(first_seen.size(), rows.size()) << "rows of the promoted database missing in Kafka";
  EXPECT_EQ(ghosts, 0u);
  // The relay never took what it decoded on the standby for another timeline's.
  for (RelayProcess* r : {&relay, &again}) {
    const std::string log = read_file(r->log_path());
    EXPECT_EQ(log.find("event=ghosts_published"), std::string::npos)
        << tail_file(r->log_path(), 30);
    EXPECT_EQ(log.find("event=checkpoint_not_used"), std::string::npos);
  }
  if (GetParam() == "exactly-once") {
    EXPECT_EQ(duplicates, 0u) << "an event visible twice to a read_committed consumer";
  }
  expect_graceful_stop(again);
}

INSTANTIATE_TEST_SUITE_P(Delivery, StandbyDecoding,
                         ::testing::Values("at-least-once", "exactly-once"), [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// A PostgreSQL 15 primary fails over to its standby (pg_pair.sh with OUTBOX_PAIR_PG_VERSION=15):
// 15 has no failover slots, so the promoted standby never had the relay's slot. The relay, given
// both hosts with target_session_attrs=read-write, finds the promoted standby without its slot
// and stops (exit 4) naming the position it delivered through, instead of making a slot that
// starts past the events committed meanwhile; prune deletes none of those. Started again with
// --gap-repair-column, it makes the slot, publishes the rows Kafka lacks from the table and
// streams: every row of the promoted database in Kafka once, each aggregate in order.
class FailoverWithoutTheSlot : public PairTest, public ::testing::WithParamInterface<std::string> {
 protected:
  FailoverWithoutTheSlot() : PairTest("pg15fo") {}
  std::string pair_version() const override { return "15"; }

  void insert(int first_seq, int count) {
    pg_->query(
        "INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) SELECT $1, 'agg-' || (g % 3),"
            " 'Changed', jsonb_build_object('seq', g) FROM generate_series($2::bigint,"
            " $3::bigint) AS g ORDER BY g",
        {aggregatetypes_[0], std::to_string(first_seq), std::to_string(first_seq + count - 1)});
  }
};

TEST_P(FailoverWithoutTheSlot, TheRelayStopsNamingTheRangeAndARestartRepairsTheGap) {
  constexpr int kRelayed = 10, kGap = 6, kAfter = 4;
  create_outbox_table(", created_at timestamptz NOT NULL DEFAULT clock_timestamp()");
  ASSERT_NO_FATAL_FAILURE(wait_for_table_on_standby());
  RelayProcess& relay = start_relay({"--delivery", GetParam()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert(0, kRelayed);
  const Lsn end = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(end, 60s));
  // The standby replayed all of it: nothing the relay delivered is lost at the promotion.
  PgClient standby(standby_);
  ASSERT_TRUE(wait_until(
      [&] {
        const auto at = standby.scalar("SELECT pg_last_wal_replay_lsn()::text");
        return at && parse_lsn(*at) >= end;
      },
      30s));
  ASSERT_EQ(pair({"kill-primary"}).exit_code, 0);
  ASSERT_EQ(pair({"promote"}).exit_code, 0);

  const auto code = relay.wait_exit(90s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop on the promoted standby\n"
                                << tail_file(relay.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("slot " + slot_ +
                 " disappeared while the relay was using it; events committed after its last "
                 "confirmed position ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), end) << "the position named is before what was confirmed";
  ASSERT_TRUE(reconnect_pg(30s));
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a slot on the promoted standby";

  // The gap: committed on the promoted standby while it has no slot.
  insert(kRelayed, kGap);
  CommandResult pruned =
      run_to_end(relay_bin_,
                 {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                  "--brokers", brokers_, "--column-time", "created_at", "--older-than", "1ms"},
                 log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pruned.exit_code, 1) << pruned.out << pruned.err;
  EXPECT_EQ(pg_->scalar("SELECT count(*)::text FROM " + qualified_table()),
            std::optional<std::string>(std::to_string(kRelayed + kGap)));

  RelayProcess& repaired =
      start_relay({"--delivery", GetParam(), "--gap-repair-column", "created_at"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  insert(kRelayed + kGap, kAfter);
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), std::size_t{kRelayed + kGap + kAfter});
  KafkaReader reader(brokers_, topics_);
  DistinctIds all_there(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all_there), 60s))
      << all_there.count() << " distinct events in Kafka for " << rows.size() << " rows; see "
      << repaired.log_path();
  reader.read_for(1s);
  const PromotedEvents events = check_promoted(reader.records(), rows);
  EXPECT_EQ(events.problems.count(), 0u) << events.problems.describe();
  EXPECT_EQ(events.first_seen.size(), rows.size());
  EXPECT_EQ(events.ghosts, 0u);
  EXPECT_EQ(events.duplicates, 0u) << "nothing was in flight at the failover";
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=slot_gap_repaired"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find("repaired=" + std::to_string(kGap)), std::string::npos)
      << repaired_log;
  expect_graceful_stop(repaired);
}

INSTANTIATE_TEST_SUITE_P(Delivery, FailoverWithoutTheSlot,
                         ::testing::Values("at-least-once", "exactly-once"), [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace outbox_test
