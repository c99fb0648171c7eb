// A slot PostgreSQL invalidates while no relay reads it: the relay started on it stops with exit
// code 4 and one line naming the cause (the invalidation reason and its setting) and the commands
// that recover the events (drop, setup, reconcile --repair); following them puts every outbox
// row in Kafka exactly once. The same invalidation while the relay streams (the broker frozen,
// so nothing is confirmed) stops it with exit code 4 naming the range; --gap-repair-column
// repairs the gap on the next start.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts (15 and 18). The settings that invalidate slots are server-wide (ALTER SYSTEM) and reset
// by a scope guard; ctest runs tests one at a time, so no other test's slot is exposed to them.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
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

class SlotInvalidation : public E2eTest {
 protected:
  SlotInvalidation() : E2eTest({"inval", {"InvOrder", "InvCustomer"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    status_interval_ = "200ms";
    metrics_addr_ = "off";
    pg_->exec("CREATE TABLE public." + table_ +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb,"
              " created_at timestamptz NOT NULL DEFAULT clock_timestamp())");
    version_ = std::stoi(pg_->scalar("SHOW server_version_num").value_or("0"));
  }

  void insert_events(int transactions, int per_transaction, int first_seq) {
    for (int t = 0; t < transactions; ++t) {
      const int from = first_seq + t * per_transaction;
      pg_->query("INSERT INTO public." + table_ +
                     " (aggregatetype, aggregateid, type, payload) SELECT (ARRAY['" +
                     aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                     "'])[g % 2 + 1], 'agg-' || (g % 5), 'Created', jsonb_build_object('seq', g)"
                     " FROM generate_series($1::bigint, $2::bigint) AS g ORDER BY g",
                 {std::to_string(from), std::to_string(from + per_transaction - 1)});
    }
  }

  CommandResult command(const std::string& name, const std::vector<std::string>& args) {
    const std::string n = name + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 120s);
  }

  std::string wal_status() {
    return pg_->scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", {slot_})
        .value_or("");
  }

  // max_slot_wal_keep_size = 1MB (reset by the returned guard's owner: reset_keep_size()), then
  // WAL segments past the slot and checkpoints until PostgreSQL invalidated it. An active slot's
  // walsender is terminated by the checkpoint first.
  void set_keep_size() {
    pg_->exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
    pg_->exec("SELECT pg_reload_conf()");
  }
  void reset_keep_size() {
    pg_->exec("ALTER SYSTEM RESET max_slot_wal_keep_size");
    pg_->exec("SELECT pg_reload_conf()");
  }
  bool push_wal_until_lost() {
    pg_->exec("CREATE TEMP TABLE IF NOT EXISTS wal_filler (x int)");
    return wait_until(
        [&] {
          for (int i = 0; i < 3; ++i) {
            pg_->exec("INSERT INTO wal_filler SELECT generate_series(1, 1000)");
            pg_->scalar("SELECT pg_switch_wal()::text");
          }
          pg_->exec("CHECKPOINT");
          return wal_status() == "lost";
        },
        60s, 200ms);
  }

  // Each id of the outbox table in Kafka: at least once (at-least-once may repeat an event the
  // stopped relay had in flight), exactly once with `exact`; no record of another id.
  void expect_every_row_in_kafka(bool exact) {
    std::set<std::string> ids;
    for (const auto& r : pg_->query("SELECT id::text FROM " + qualified_table())) ids.insert(*r[0]);
    KafkaReader reader(brokers_, topics_);
    reader.read_until(
        [&](const auto& records) {
          std::set<std::string> seen;
          for (const Record& r : records) seen.insert(r.headers.at("id"));
          return seen.size() >= ids.size();
        },
        60s);
    reader.read_for(1s);
    std::map<std::string, int> copies;
    for (const Record& r : reader.records()) ++copies[r.headers.at("id")];
    for (const auto& id : ids) {
      EXPECT_GE(copies[id], 1) << "never delivered: " << id;
      if (exact) {
        EXPECT_LE(copies[id], 1) << "delivered twice: " << id;
      }
    }
    for (const auto& [id, n] : copies) {
      EXPECT_TRUE(ids.count(id)) << "not a row: " << id;
    }
  }

  // The relay (with `flags`) relays `count` events, then stops: the slot is inactive from here on.
  void relay_then_stop(int count, const std::vector<std::string>& flags = {}) {
    RelayProcess& relay = start_relay(flags);
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    insert_events(count / 2, 2, 0);
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& r) { return r.size() >= std::size_t(count); }, 60s))
        << reader.records().size() << " of " << count << " events relayed within 60 s";
    ASSERT_EQ(relay.terminate(40s), 0);
  }

  // A relay started on the lost slot: exit code 4 within 60 s; returns its log.
  std::string relay_exits_4() {
    RelayProcess& relay = start_relay();
    const std::optional<int> code = relay.wait_exit(60s);
    const std::string log = read_file(relay.log_path());
    EXPECT_EQ(code, std::optional<int>(4)) << log;
    return log;
  }

  // Follows the advice: drop, setup, reconcile --repair since the time it names (PostgreSQL 17+
  // names inactive_since; 15 leaves it to the log, and the test uses 10m); then Kafka holds each
  // of the `total` committed events once.
  void recover_as_advised(const std::string& log, int total) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m,
                                  std::regex("outbox-relay reconcile [^\\n]* --since "
                                             "('([^']+)'|[A-Z_]+)")))
        << log;
    const std::string since = m[2].matched ? m[2].str() : "10m";
    if (version_ >= 170000) EXPECT_TRUE(m[2].matched) << "no inactive_since on 17+: " << log;
    CommandResult drop = command("drop", {"drop", "--pg", conninfo_, "--slot", slot_,
                                          "--publication", publication_, "--yes"});
    ASSERT_EQ(drop.exit_code, 0) << drop.out << drop.err;
    CommandResult setup =
        command("setup", {"setup", "--pg", conninfo_, "--slot", slot_, "--publication",
                          publication_, "--table", qualified_table()});
    ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;
    CommandResult repair =
        command("reconcile", {"reconcile", "--pg", conninfo_, "--brokers", brokers_, "--table",
                              qualified_table(), "--column-time", "created_at", "--margin", "5m",
                              "--since", since, "--repair", "--timeout", "30s"});
    ASSERT_EQ(repair.exit_code, 0) << repair.out << repair.err;

    std::set<std::string> ids;
    for (const auto& r : pg_->query("SELECT id::text FROM " + qualified_table())) ids.insert(*r[0]);
    ASSERT_EQ(ids.size(), std::size_t(total));
    KafkaReader reader(brokers_, topics_);
    reader.read_until([&](const auto& r) { return r.size() >= std::size_t(total); }, 60s);
    reader.read_for(1s);
    std::map<std::string, int> copies;
    for (const Record& r : reader.records()) ++copies[r.headers.at("id")];
    EXPECT_EQ(reader.records().size(), std::size_t(total));
    for (const auto& id : ids) EXPECT_EQ(copies[id], 1) << id;
  }

  int version_ = 0;
  int commands_ = 0;
};

// The same in each delivery mode (GetParam(): exactly-once), named Modes/...AtLeastOnce and
// ...ExactlyOnce.
class SlotInvalidationInMode : public SlotInvalidation, public ::testing::WithParamInterface<bool> {
 protected:
  std::vector<std::string> mode_flags(std::vector<std::string> more = {}) const {
    std::vector<std::string> flags;
    if (GetParam()) flags = {"--delivery", "exactly-once"};
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  }
};
std::string mode_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "ExactlyOnce" : "AtLeastOnce";
}

// A slot invalidated while the relay is down, repaired by the next start (--gap-repair-column).
class SlotInvalidatedWhileDown : public SlotInvalidationInMode {
 protected:
  // The start drops the lost slot, makes a new one, publishes the rows committed meanwhile from
  // the table, and streams: every event once (exactly-once too: the gap was committed before the
  // new slot), no exit.
  void expect_repaired_by_the_start(int relayed, int missed, int after) {
    RelayProcess& relay = start_relay(mode_flags({"--gap-repair-column", "created_at"}));
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    insert_events(after / 2, 2, relayed + missed);
    const std::size_t all = relayed + missed + after;
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(reader.read_until([&](const auto& r) { return r.size() >= all; }, 60s))
        << reader.records().size() << " of " << all << "; see " << relay.log_path();
    reader.read_for(1s);
    std::map<std::string, int> copies;
    for (const Record& r : reader.records()) ++copies[r.headers.at("id")];
    EXPECT_EQ(copies.size(), all);
    for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
    const std::string log = read_file(relay.log_path());
    EXPECT_NE(log.find("event=dropped_lost_slot"), std::string::npos) << log;
    EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
    EXPECT_NE(log.find("repaired=" + std::to_string(missed)), std::string::npos) << log;
    EXPECT_TRUE(relay.is_running());
  }
};

// max_slot_wal_keep_size: the slot retains more WAL than allowed while the relay is down; the
// checkpoint removes it. Every version.
TEST_F(SlotInvalidation, WalRemovedExitsWithCode4NamingTheCauseAndTheRecovery) {
  constexpr int kRelayed = 10, kMissed = 6;
  ASSERT_NO_FATAL_FAILURE(relay_then_stop(kRelayed));
  ScopeGuard reset([&] {
    pg_->exec("ALTER SYSTEM RESET max_slot_wal_keep_size");
    pg_->exec("SELECT pg_reload_conf()");
  });
  pg_->exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
  pg_->exec("SELECT pg_reload_conf()");
  insert_events(kMissed / 2, 2, kRelayed);
  // A few WAL segments past the slot, then a checkpoint: the slot's WAL goes.
  pg_->exec("CREATE TEMP TABLE wal_filler (x int)");
  ASSERT_TRUE(wait_until(
      [&] {
        for (int i = 0; i < 3; ++i) {
          pg_->exec("INSERT INTO wal_filler SELECT generate_series(1, 1000)");
          pg_->scalar("SELECT pg_switch_wal()::text");
        }
        pg_->exec("CHECKPOINT");
        return wal_status() == "lost";
      },
      60s, 200ms))
      << "wal_status " << wal_status();

  const std::string log = relay_exits_4();
  EXPECT_NE(log.find("max_slot_wal_keep_size"), std::string::npos) << log;
  if (version_ >= 170000) EXPECT_NE(log.find("wal_removed"), std::string::npos) << log;
  EXPECT_NE(log.find("outbox-relay reconcile --pg"), std::string::npos) << log;
  ASSERT_NO_FATAL_FAILURE(recover_as_advised(log, kRelayed + kMissed));
}

// The same invalidation with --gap-repair-column: the start repairs the gap. Both modes.
TEST_P(SlotInvalidatedWhileDown, WalRemovedIsRepairedWithGapRepairColumn) {
  constexpr int kRelayed = 10, kMissed = 6, kAfter = 4;
  ASSERT_NO_FATAL_FAILURE(relay_then_stop(kRelayed, mode_flags()));
  {
    ScopeGuard reset([&] { reset_keep_size(); });
    set_keep_size();
    insert_events(kMissed / 2, 2, kRelayed);
    ASSERT_TRUE(push_wal_until_lost()) << "wal_status " << wal_status();
  }
  ASSERT_NO_FATAL_FAILURE(expect_repaired_by_the_start(kRelayed, kMissed, kAfter));
}

// PostgreSQL 18's idle_replication_slot_timeout with --gap-repair-column: the same repair.
TEST_P(SlotInvalidatedWhileDown, IdleTimeoutIsRepairedWithGapRepairColumn) {
  if (version_ < 180000) GTEST_SKIP() << "idle_replication_slot_timeout is PostgreSQL 18's";
  constexpr int kRelayed = 8, kMissed = 4, kAfter = 4;
  ASSERT_NO_FATAL_FAILURE(relay_then_stop(kRelayed, mode_flags()));
  {
    ScopeGuard reset([&] {
      pg_->exec("ALTER SYSTEM RESET idle_replication_slot_timeout");
      pg_->exec("SELECT pg_reload_conf()");
    });
    pg_->exec("ALTER SYSTEM SET idle_replication_slot_timeout = '1s'");
    pg_->exec("SELECT pg_reload_conf()");
    insert_events(kMissed / 2, 2, kRelayed);
    ASSERT_TRUE(wait_until(
        [&] {
          pg_->exec("CHECKPOINT");
          return wal_status() == "lost";
        },
        60s, 500ms))
        << "wal_status " << wal_status();
  }
  ASSERT_NO_FATAL_FAILURE(expect_repaired_by_the_start(kRelayed, kMissed, kAfter));
}

INSTANTIATE_TEST_SUITE_P(Modes, SlotInvalidatedWhileDown, ::testing::Bool(), mode_name);

// A slot dropped while the relay streams from it (an operator's mistake, a tool cleaning up): the
// relay makes no new slot (it would start past events committed meanwhile, silently) but stops
// with exit code 4 naming the loss.
TEST_F(SlotInvalidation, SlotDroppedWhileStreamingExitsWithCode4) {
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  // The walsender ended and the slot dropped before the relay's reconnect takes it again.
  ASSERT_TRUE(wait_until(
      [&] {
        pg_->query(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = $1 AND active_pid IS NOT NULL",
            {slot_});
        try {
          pg_->query("SELECT pg_drop_replication_slot($1)", {slot_});
        } catch (const std::exception&) {
          // Active again (the relay reconnected first): once more.
        }
        return !pg_->slot_exists(slot_);
      },
      30s, 50ms))
      << "could not drop slot " << slot_;
  const auto code = relay.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop after its slot was dropped\n"
                                << tail_file(relay.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(relay.log_path(), 20);
  EXPECT_NE(read_file(relay.log_path()).find("disappeared while the relay was using it"),
            std::string::npos)
      << tail_file(relay.log_path(), 20);
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";
}

// PostgreSQL 18's idle_replication_slot_timeout: the slot is invalidated at a checkpoint once no
// relay streamed from it for longer.
TEST_F(SlotInvalidation, IdleTimeoutExitsWithCode4NamingTheCauseAndTheRecovery) {
  if (version_ < 180000) GTEST_SKIP() << "idle_replication_slot_timeout is PostgreSQL 18's";
  constexpr int kRelayed = 8, kMissed = 4;
  ASSERT_NO_FATAL_FAILURE(relay_then_stop(kRelayed));
  ScopeGuard reset([&] {
    pg_->exec("ALTER SYSTEM RESET idle_replication_slot_timeout");
    pg_->exec("SELECT pg_reload_conf()");
  });
  pg_->exec("ALTER SYSTEM SET idle_replication_slot_timeout = '1s'");
  pg_->exec("SELECT pg_reload_conf()");
  insert_events(kMissed / 2, 2, kRelayed);
  ASSERT_TRUE(wait_until(
      [&] {
        pg_->exec("CHECKPOINT");
        return wal_status() == "lost";
      },
      60s, 500ms))
      << "wal_status " << wal_status();

  const std::string log = relay_exits_4();
  EXPECT_NE(log.find("idle_timeout"), std::string::npos) << log;
  EXPECT_NE(log.find("idle_replication_slot_timeout"), std::string::npos) << log;
  EXPECT_NE(log.find("outbox-relay reconcile --pg"), std::string::npos) << log;
  ASSERT_NO_FATAL_FAILURE(recover_as_advised(log, kRelayed + kMissed));
}

// The broker SIGSTOPped for the object's lifetime (or until resume()): the relay's connections
// stay open and nothing is acknowledged, so nothing is confirmed either.
class FrozenBroker {
 public:
  FrozenBroker() {
    const char* file = std::getenv("OUTBOX_KAFKA_PID_FILE");
    std::ifstream in(file ? file : "");
    pid_t pid = -1;
    if (in >> pid && pid > 0 && ::kill(pid, SIGSTOP) == 0) pid_ = pid;
  }
  ~FrozenBroker() { resume(); }
  FrozenBroker(const FrozenBroker&) = delete;
  FrozenBroker& operator=(const FrozenBroker&) = delete;
  bool frozen() const { return pid_ > 0; }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// max_slot_wal_keep_size passed WHILE the relay streams: the broker frozen, so the relay confirms
// nothing; the events committed meanwhile wait in its producer; WAL grows past the limit and a
// checkpoint terminates the walsender and invalidates the slot. The relay, reconnecting, finds
// it lost: exit 4 naming the position its events may be missing from (at or before the first
// event of the gap), never a silent new slot. Started again with --gap-repair-column (as an
// operator does after the exit), it drops the lost slot, makes a new one, publishes the rows
// Kafka lacks and streams: every committed event in Kafka. Both delivery modes (exactly-once's
// in-flight transaction is aborted; at-least-once's in-flight events may arrive once the broker
// thaws, and the repair sends only what Kafka lacks).
class SlotInvalidatedWhileStreaming : public SlotInvalidationInMode {};

TEST_P(SlotInvalidatedWhileStreaming, ExitsWithCode4NamingTheRangeAndARestartRepairsIt) {
  constexpr int kRelayed = 10, kGap = 6, kAfter = 4;
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(kRelayed / 2, 2, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& r) { return r.size() >= std::size_t(kRelayed); }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));

  ScopeGuard reset([&] { reset_keep_size(); });
  Lsn gap_from = 0;  // every event of the gap is committed past it
  {
    FrozenBroker frozen;
    ASSERT_TRUE(frozen.frozen()) << "could not SIGSTOP the broker (OUTBOX_KAFKA_PID_FILE)";
    gap_from = pg_->current_wal_lsn();
    set_keep_size();
    insert_events(kGap / 2, 2, kRelayed);
    ASSERT_TRUE(push_wal_until_lost()) << "wal_status " << wal_status();
  }
  const std::optional<int> code = relay.wait_exit(90s);
  reset_keep_size();
  const std::string log = read_file(relay.log_path());
  ASSERT_EQ(code, std::optional<int>(4)) << tail_file(relay.log_path(), 30);
  // The range named starts at or before the gap: the slot confirmed nothing of it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("confirmed_flush_lsn ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  // (The relay itself may deliver part of the gap once the broker thaws, before it exits:
  // exactly-once then commits a transaction of it. Those events are in Kafka; the repair below
  // sends only what Kafka lacks.)
  EXPECT_NE(log.find("max_slot_wal_keep_size"), std::string::npos) << log;
  EXPECT_NE(log.find("--accept-slot-loss"), std::string::npos) << log;
  // Only the first start made a slot.
  EXPECT_EQ(log.find("event=created_slot", log.find("event=created_slot") + 1), std::string::npos)
      << log;
  // prune deletes none of the rows meanwhile (the gap's are undelivered).
  CommandResult pruned = command(
      "prune", {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                "--brokers", brokers_, "--column-time", "created_at", "--older-than", "1ms"});
  EXPECT_EQ(pruned.exit_code, 1) << pruned.out << pruned.err;
  EXPECT_EQ(pg_->scalar("SELECT count(*)::text FROM " + qualified_table()),
            std::optional<std::string>(std::to_string(kRelayed + kGap)));

  std::vector<std::string> flags = mode_flags();
  flags.insert(flags.end(), {"--gap-repair-column", "created_at"});
  RelayProcess& repaired = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  insert_events(kAfter / 2, 2, kRelayed + kGap);
  ASSERT_NO_FATAL_FAILURE(expect_every_row_in_kafka(GetParam()));
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=dropped_lost_slot"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find("event=slot_gap_repaired"), std::string::npos) << repaired_log;
  EXPECT_TRUE(repaired.is_running());
}

INSTANTIATE_TEST_SUITE_P(Modes, SlotInvalidatedWhileStreaming, ::testing::Bool(), mode_name);

// The slot compared with the progress record on every reconnect, not only at start: while the
// broker hangs (nothing confirmed), events are committed, the relay's walsender is terminated and
// another client advances the slot past them before the relay takes it again. The relay's next
// session finds the slot confirmed past its record: exit 4 naming both positions, instead of
// streaming on past the events it skipped.
class SlotMovedBetweenSessions : public SlotInvalidationInMode {};

TEST_P(SlotMovedBetweenSessions, TheReconnectStopsNamingBothPositions) {
  constexpr int kRelayed = 10, kGap = 6;
  RelayProcess& relay = start_relay(mode_flags());
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(kRelayed / 2, 2, 0);
  {
    KafkaReader reader(brokers_, topics_);
    ASSERT_TRUE(
        reader.read_until([&](const auto& r) { return r.size() >= std::size_t(kRelayed); }, 60s))
        << reader.records().size() << " of " << kRelayed << " events relayed within 60 s";
  }
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  const auto recorded = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(recorded.has_value());
  Lsn advanced = 0;
  {
    FrozenBroker frozen;
    ASSERT_TRUE(frozen.frozen()) << "could not SIGSTOP the broker (OUTBOX_KAFKA_PID_FILE)";
    insert_events(kGap / 2, 2, kRelayed);
    const Lsn target = pg_->current_wal_lsn();
    // The walsender ended; the slot advanced while the relay waits before taking it again.
    ASSERT_TRUE(wait_until(
        [&] {
          pg_->query(
              "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
              "WHERE slot_name = $1 AND active_pid IS NOT NULL",
              {slot_});
          try {
            pg_->query("SELECT pg_replication_slot_advance($1, $2::pg_lsn)",
                       {slot_, format_lsn(target)});
          } catch (const std::exception&) {
            // Active again (the relay took it first): once more.
          }
          const auto at = pg_->slot_confirmed_flush(slot_);
          advanced = at.value_or(0);
          return at && *at >= target;
        },
        30s, 50ms))
        << "could not advance slot " << slot_;
  }
  // Either the relay stops naming both positions, or (exactly-once) the transaction holding the
  // gap was committed once the broker thawed, its checkpoint reaching the advanced position:
  // then nothing was skipped and every event is in Kafka. At-least-once records nothing until
  // the comparison passed, so it always stops.
  KafkaReader reader(brokers_, topics_);
  const auto all_delivered = [&] {
    std::set<std::string> ids;
    for (const Record& r : reader.records()) ids.insert(r.headers.at("id"));
    return ids.size() >= std::size_t(kRelayed + kGap);
  };
  ASSERT_TRUE(wait_until(
      [&] {
        if (!relay.is_running()) return true;
        reader.read_for(100ms);
        return all_delivered() &&
               read_file(relay.log_path()).find("event=progress_verified") != std::string::npos;
      },
      90s, 100ms))
      << "the relay neither stopped nor delivered the gap\n"
      << tail_file(relay.log_path(), 20);
  if (relay.is_running()) {
    EXPECT_TRUE(GetParam()) << "at-least-once went on past a slot moved ahead of its record";
    std::cerr << "the gap was delivered before the comparison: the relay goes on\n";
    expect_graceful_stop(relay);
    return;
  }
  const auto code = relay.wait_exit(5s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 4) << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m,
                                std::regex("replication slot " + slot_ + " is confirmed through " +
                                           format_lsn(advanced) + ", past ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_LE(parse_lsn(m[1].str()), advanced);
  EXPECT_GE(parse_lsn(m[1].str()), *recorded) << "the record named is behind what was confirmed";
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), std::optional<Lsn>(advanced))
      << "the relay confirmed the slot after the check failed";
}

INSTANTIATE_TEST_SUITE_P(Modes, SlotMovedBetweenSessions, ::testing::Bool(), mode_name);

}  // namespace
}  // namespace outbox_test
