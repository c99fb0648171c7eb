// The relay publishing to NATS JetStream (--nats) where PostgreSQL's version matters: the
// records as pgoutput decodes them, and the slot lost, invalidated or made anew against the
// relay's progress record in its JetStream key-value bucket. They run on PostgreSQL 15 (stream
// pg15, label nats) and again on PostgreSQL 18 (stream pg18: label pg18 beside nats;
// scripts/test.sh). The real outbox-relay binary, PostgreSQL and the lane's nats-server
// (OUTBOX_PG, OUTBOX_NATS); the fixture is tests/nats' NatsRelay (nats_relay_fixture.hpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "nats_relay_fixture.hpp"
#include "outbox/nats/publisher.hpp"
#include "stream_reader.hpp"

namespace outbox_test::fault {
namespace {
// Records as a consumer reads them: data = the payload as PostgreSQL prints it, headers id, type
// and key, Nats-Msg-Id = id, the subject rendered per aggregate type, per-aggregate order; the
// slot confirmed once they are stored.
TEST_F(NatsRelay, EndToEnd) {
  create_outbox_table();
  const std::string other_type = "Other" + suffix_;
  const std::string other_subject = "outbox.event." + other_type;
  outbox::nats::PublisherConfig c;
  c.urls = nats_;
  ASSERT_EQ(outbox::nats::ensure_stream(c, stream_, {topic_, other_subject}, 10min, 10s), "");
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  for (int t = 0; t < 20; ++t) {
    pg_->exec("BEGIN; " +
              Workload::insert_sql(qualified_table(), aggregatetype_, 7, t * 10 + 1, 5, false) +
              "; " + Workload::insert_sql(qualified_table(), other_type, 7, t * 10 + 6, 5, false) +
              "; COMMIT");
  }
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), 200u);
  std::vector<Stored> messages;
  ASSERT_TRUE(wait_until(
      [&] {
        messages = stored();
        return messages.size() >= rows.size();
      },
      60s, 100ms))
      << messages.size() << " of " << rows.size() << " stored";
  EXPECT_TRUE(expect_confirmed_reaches(after, 30s));
  messages = stored();
  ASSERT_EQ(messages.size(), rows.size());
  std::map<std::string, std::int64_t> last_seq;  // per aggregate
  for (const Stored& m : messages) {
    const auto id = m.headers.find("id");
    ASSERT_NE(id, m.headers.end()) << m.subject;
    const auto row = rows.find(id->second);
    ASSERT_NE(row, rows.end()) << "not a committed event: " << id->second;
    EXPECT_EQ(m.subject, "outbox.event." + row->second.aggregatetype);
    EXPECT_EQ(m.data, row->second.payload);
    EXPECT_EQ(m.headers.at("type"), row->second.type);
    EXPECT_EQ(m.headers.at("key"), row->second.aggregateid);
    EXPECT_EQ(m.headers.at("Nats-Msg-Id"), id->second);
    const std::string agg = row->second.aggregatetype + "/" + row->second.aggregateid;
    if (auto it = last_seq.find(agg); it != last_seq.end()) {
      EXPECT_LT(it->second, row->second.seq) << "order of " << agg;
    }
    last_seq[agg] = row->second.seq;
  }
  expect_graceful_stop(relay);
}

// The progress record on JetStream (a key-value bucket, --nats-progress-bucket): a slot dropped
// while the relay was down stops the restart (exit 4) instead of a new slot starting past the
// events committed meanwhile; --accept-slot-loss goes on, said as an error (docs/failures.md).
TEST_F(NatsRelay, ASlotDroppedWhileTheRelayWasDownStopsTheRestart) {
  create_outbox_table();
  // prune measures the retention on a time column.
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  create_stream();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 10; }, 60s, 100ms));
  // The slot is confirmed only through a position the record holds.
  ASSERT_TRUE(expect_confirmed_reaches(after, 30s));
  expect_graceful_stop(relay);
  pg_->drop_slot_if_exists(slot_);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 10, false));

  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ +
                     " does not exist, but its progress record (JetStream key-value bucket "
                     "outbox-relay-progress, key "),
            std::string::npos)
      << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";
  EXPECT_EQ(stored().size(), 10u);

  // status and prune read the same record: the loss is named, and no row of the gap is deleted
  // once a slot is made anew (its catalog_xmin passes them).
  const auto run = [&](const std::string& name, std::vector<std::string> args) {
    args.insert(args.end(), {"--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                             "--nats", nats_});
    return run_to_end(relay_bin_, args, log_path(name + "_out"), log_path(name + "_err"), 60s);
  };
  const CommandResult st = run("status", {"status"});
  EXPECT_EQ(st.exit_code, 1) << st.out << st.err;
  EXPECT_NE(st.out.find("slot missing, and the relay's progress record (JetStream key-value "
                        "bucket outbox-relay-progress, key "),
            std::string::npos)
      << st.out;
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const CommandResult pr = run("prune", {"prune", "--older-than", "1ms"});
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_NE(pr.err.find("past the relay's progress record"), std::string::npos) << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "20");
  pg_->drop_slot_if_exists(slot_);

  RelayProcess& accepted = start_relay({"--accept-slot-loss"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(accepted));
  EXPECT_NE(read_file(accepted.log_path()).find("event=slot_loss_accepted"), std::string::npos)
      << tail_file(accepted.log_path(), 20);
  expect_graceful_stop(accepted);
}

// max_slot_wal_keep_size passed while the relay streams to JetStream: the server frozen
// (SIGSTOP), so nothing is acknowledged and the slot is not confirmed; events committed, WAL
// pushed past the limit, a checkpoint terminates the walsender and invalidates the slot. The
// relay stops (exit 4) naming a position at or before the gap, makes no slot, and prune deletes
// none of the rows (JetStream has no repair from the table: docs/failures.md).
TEST_F(NatsRelay, ASlotInvalidatedWhileStreamingStopsTheRelayNamingTheRange) {
  create_outbox_table();
  // prune measures the retention on a time column.
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay({"--status-interval", "200ms"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 10; }, 60s, 100ms));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));

  const pid_t pid = nats_pid();
  ASSERT_GT(pid, 0);
  struct Thaw {
    pid_t pid;
    ~Thaw() { ::kill(pid, SIGCONT); }
  } thaw{pid};
  ScopeGuard reset([&] {
    pg_->exec("ALTER SYSTEM RESET max_slot_wal_keep_size");
    pg_->exec("SELECT pg_reload_conf()");
  });
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const Lsn gap_from = pg_->current_wal_lsn();
  pg_->exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
  pg_->exec("SELECT pg_reload_conf()");
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 6, false));
  pg_->exec("CREATE TEMP TABLE wal_filler (x int)");
  const auto wal_status = [&] {
    return pg_->scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", {slot_})
        .value_or("");
  };
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
  ASSERT_EQ(::kill(pid, SIGCONT), 0);

  const auto code = relay.wait_exit(90s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n" << tail_file(relay.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("confirmed_flush_lsn ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  EXPECT_EQ(count_in_file(relay.log_path(), "event=created_slot"), 1u) << "a slot made anew";
  const CommandResult pr = run_to_end(relay_bin_,
                                      {"prune", "--pg", conninfo_, "--slot", slot_, "--table",
                                       qualified_table(), "--nats", nats_, "--older-than", "1ms"},
                                      log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "16");
}

// max_slot_wal_keep_size passed while the relay is down: the restart finds the slot lost and
// stops (exit 4) naming the cause and the position, making no slot; prune deletes no row. Started
// again with --gap-repair-column, the relay drops the lost slot, makes one and publishes the gap's
// 6 events from the table before streaming: every event stored once, in order.
TEST_F(NatsRelay, ASlotInvalidatedWhileTheRelayWasDownStopsTheRestart) {
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 10; }, 60s, 100ms));
  const Lsn delivered = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(delivered, 30s));
  expect_graceful_stop(relay);
  // The stop may confirm past the last event, to the server's WAL end: the gap starts at the first
  // insert after the stop, not at the last delivered event.
  const Lsn gap_from = pg_->current_wal_lsn();
  {
    ScopeGuard reset([&] {
      pg_->exec("ALTER SYSTEM RESET max_slot_wal_keep_size");
      pg_->exec("SELECT pg_reload_conf()");
    });
    pg_->exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
    pg_->exec("SELECT pg_reload_conf()");
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 6, false));
    pg_->exec("CREATE TEMP TABLE wal_filler (x int)");
    const auto wal_status = [&] {
      return pg_
          ->scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", {slot_})
          .value_or("");
    };
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
  }
  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("max_slot_wal_keep_size"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("confirmed_flush_lsn ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), delivered)
      << "the position named is before the delivered events";
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_EQ(stored().size(), 10u);
  const CommandResult pr = run_to_end(relay_bin_,
                                      {"prune", "--pg", conninfo_, "--slot", slot_, "--table",
                                       qualified_table(), "--nats", nats_, "--older-than", "1ms"},
                                      log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "16");

  RelayProcess& repaired = start_relay({"--gap-repair-column", "created_at"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 17, 4, false));
  expect_every_event_stored_once(60s);
  EXPECT_EQ(stored().size(), 20u);
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=dropped_lost_slot"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find(" repaired=6 failed=0"), std::string::npos) << repaired_log;
  expect_graceful_stop(repaired);
}

// PostgreSQL 18's idle_replication_slot_timeout passed while the relay is down (1 s, then a
// checkpoint): the restart finds the slot lost and stops (exit 4) naming the setting, a position
// at or after the delivered events and at or before the gap's start, and a reconcile command
// with --nats (not --brokers: the events go to JetStream), and makes no slot;
// prune deletes no row. Started again with --gap-repair-column, the relay drops the lost slot,
// makes one and publishes the gap's 4 events from the table before streaming: every event stored
// once, in order. On PostgreSQL 15 (no such setting) it is skipped.
TEST_F(NatsRelay, ASlotIdleTimedOutWhileTheRelayWasDownStopsTheRestart) {
  if (std::stoi(pg_->scalar("SHOW server_version_num").value_or("0")) < 180000) {
    GTEST_SKIP() << "idle_replication_slot_timeout is PostgreSQL 18's";
  }
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, 1, 8, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 8; }, 60s, 100ms));
  const Lsn delivered = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(delivered, 30s));
  expect_graceful_stop(relay);
  const Lsn gap_from = pg_->current_wal_lsn();
  {
    ScopeGuard reset([&] {
      pg_->exec("ALTER SYSTEM RESET idle_replication_slot_timeout");
      pg_->exec("SELECT pg_reload_conf()");
    });
    pg_->exec("ALTER SYSTEM SET idle_replication_slot_timeout = '1s'");
    pg_->exec("SELECT pg_reload_conf()");
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, 9, 4, false));
    const auto wal_status = [&] {
      return pg_
          ->scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", {slot_})
          .value_or("");
    };
    ASSERT_TRUE(wait_until(
        [&] {
          pg_->exec("CHECKPOINT");
          return wal_status() == "lost";
        },
        60s, 500ms))
        << "wal_status " << wal_status();
  }
  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("was invalidated by PostgreSQL, idle_timeout"), std::string::npos) << log;
  // The recovery it advises reaches JetStream, not Kafka.
  EXPECT_NE(log.find("may never have reached JetStream"), std::string::npos) << log;
  EXPECT_NE(log.find("outbox-relay reconcile --pg \"$PG\" --nats " + nats_ + " --table " +
                     qualified_table()),
            std::string::npos)
      << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("confirmed_flush_lsn ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), delivered)
      << "the position named is before the delivered events";
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_EQ(stored().size(), 8u);
  const CommandResult pr = run_to_end(relay_bin_,
                                      {"prune", "--pg", conninfo_, "--slot", slot_, "--table",
                                       qualified_table(), "--nats", nats_, "--older-than", "1ms"},
                                      log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "12");

  RelayProcess& repaired = start_relay({"--gap-repair-column", "created_at"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, 13, 4, false));
  expect_every_event_stored_once(60s);
  EXPECT_EQ(stored().size(), 16u);
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=dropped_lost_slot"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find(" repaired=4 failed=0"), std::string::npos) << repaired_log;
  expect_graceful_stop(repaired);
}

// The slot dropped and made anew by another client while the relay was down: it exists, past the
// relay's progress record in the JetStream bucket. The start stops (exit 4) naming both
// positions, and stores nothing; --accept-slot-loss goes on, said as an error, and moves the
// record, so that the next start streams without the flag.
TEST_F(NatsRelay, ASlotMadeAnewByAnotherClientStopsTheStart) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 10; }, 60s, 100ms));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  expect_graceful_stop(relay);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  pg_->drop_slot_if_exists(slot_);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 6, false));
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const auto made = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(made.has_value() && *made > *stopped_at);

  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ + " is confirmed through " + format_lsn(*made) +
                     ", past " + format_lsn(*stopped_at) +
                     ", through which its progress record "
                     "(JetStream key-value bucket outbox-relay-progress"),
            std::string::npos)
      << log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), made) << "the stopped start moved the slot";
  EXPECT_EQ(stored().size(), 10u);

  RelayProcess& accepted = start_relay({"--accept-slot-loss"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(accepted));
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(accepted.log_path()).find("event=progress_verified") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(accepted.log_path(), 20);
  EXPECT_NE(read_file(accepted.log_path()).find("event=slot_ahead_accepted"), std::string::npos)
      << tail_file(accepted.log_path(), 20);
  expect_graceful_stop(accepted);
  RelayProcess& again = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(again));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 17, 4, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 14; }, 60s, 100ms))
      << stored().size() << " stored; see " << again.log_path();
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(again.log_path()).find("event=progress_verified") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(again.log_path(), 20);
  EXPECT_TRUE(again.is_running());
  expect_graceful_stop(again);
}

// --gap-repair-column with JetStream: the slot dropped while the relay was down. prune deletes no
// row meanwhile (the progress record in the bucket is past the missing slot). The restart makes
// the slot first, reads the ids the stream holds of the window (the messages stored on the
// subject since the record's time less --gap-repair-margin, headers only) and publishes the rows
// of the gap that the stream lacks, in commit order, before streaming. Two events of the gap are
// in the stream already (as when a relay published them and stopped before its record moved): the
// read finds them and they are not sent again (missing= counts what the read did not find, not
// what the duplicate window would drop). Every event stored once, each aggregate's in order (the
// gap's ahead of those committed after the restart); the record moves to the new slot, so the
// next start repairs nothing.
TEST_F(NatsRelay, ASlotDroppedWhileTheRelayWasDownIsRepairedFromTheTable) {
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 12, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 12; }, 60s, 100ms));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  expect_graceful_stop(relay);
  pg_->drop_slot_if_exists(slot_);
  // The gap: 15 events in 5 transactions, each touching the 3 aggregates.
  for (int t = 0; t < 5; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 13 + t * 3, 3, false));
  }
  // Two of them stored already, as the relay publishes them (id and Nats-Msg-Id headers).
  for (const auto& row : pg_->query("SELECT id::text, aggregateid, type, payload::text FROM " +
                                    qualified_table() + " WHERE seq IN (13, 14) ORDER BY seq")) {
    StreamReader(access_).publish(
        topic_, *row[3],
        {{"id", *row[0]}, {"type", *row[2]}, {"key", *row[1]}, {"Nats-Msg-Id", *row[0]}});
  }
  ASSERT_EQ(stored().size(), 14u);
  const CommandResult pr = run_to_end(relay_bin_,
                                      {"prune", "--pg", conninfo_, "--slot", slot_, "--table",
                                       qualified_table(), "--nats", nats_, "--older-than", "1ms"},
                                      log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "27");

  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 28, 6, false));
  expect_every_event_stored_once(60s);
  EXPECT_EQ(stored().size(), 33u);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("event=slot_gap_found"), std::string::npos) << log;
  EXPECT_NE(log.find("that JetStream lacks"), std::string::npos) << log;
  EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_NE(log.find(" missing=13 "), std::string::npos) << log;
  EXPECT_NE(log.find(" repaired=13 failed=0"), std::string::npos) << log;
  EXPECT_TRUE(restarted.is_running());
  expect_graceful_stop(restarted);

  RelayProcess& again = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(again));
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(again.log_path()).find("event=progress_verified") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(again.log_path(), 20);
  EXPECT_EQ(read_file(again.log_path()).find("event=slot_gap_found"), std::string::npos)
      << tail_file(again.log_path(), 20);
  expect_graceful_stop(again);
}

// The rows of the gap deleted before the repair: the slot made anew by another client while the
// relay was down, and prune told to trust the slot alone (--without-progress-record) deletes
// every row committed before it, the gap's with the delivered ones. The start with
// --gap-repair-column finds no row at or before the progress record's time: it publishes
// nothing and stops (exit 4) naming the range, instead of streaming past the loss.
TEST_F(NatsRelay, RowsPrunedBeforeTheRepairStopTheStart) {
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 12, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 12; }, 60s, 100ms));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  expect_graceful_stop(relay);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  pg_->drop_slot_if_exists(slot_);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 13, 9, false));
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const auto made = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(made.has_value() && *made > *stopped_at);
  const CommandResult pruned =
      run_to_end(relay_bin_,
                 {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                  "--without-progress-record", "--older-than", "1ms"},
                 log_path("prune_out"), log_path("prune_err"), 60s);
  ASSERT_EQ(pruned.exit_code, 0) << pruned.out << pruned.err;
  ASSERT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "0");

  RelayProcess& restarted = start_relay(flags);
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("the events committed between " + format_lsn(*stopped_at) + " and " +
                     format_lsn(*made) +
                     " (the progress record) may be missing and cannot be repaired from the "
                     "outbox"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--accept-slot-loss"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=streaming"), std::string::npos) << log;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), made) << "the stopped start moved the slot";
  EXPECT_EQ(stored().size(), 12u) << "the stopped start published";
}

// The slot dropped and made anew by another client while the relay was down, past the progress
// record; with --gap-repair-column the start repairs the gap on that slot (nothing dropped or
// made): the 9 events committed between are published from the table ahead of those streamed
// after, every event stored once, each aggregate's in order.
TEST_F(NatsRelay, ASlotMadeAnewByAnotherClientIsRepairedOnThatSlot) {
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 12, false));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 12; }, 60s, 100ms));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 30s));
  expect_graceful_stop(relay);
  const auto stopped_at = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(stopped_at.has_value());
  pg_->drop_slot_if_exists(slot_);
  for (int t = 0; t < 3; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 13 + t * 3, 3, false));
  }
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const auto made = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(made.has_value() && *made > *stopped_at);

  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 22, 6, false));
  expect_every_event_stored_once(60s);
  EXPECT_EQ(stored().size(), 27u);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_NE(log.find(" repaired=9 failed=0"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=dropped_lost_slot"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  expect_graceful_stop(restarted);
}

// --messages (pg_logical_emit_message: events that leave no row) with JetStream: the slot dropped
// while the relay was down. There is no table to read the gap back from: the restart stops (exit
// 4) naming the slot and the position its progress record (the JetStream key-value bucket) says
// it delivered through, at or after the delivered messages and before the gap's, makes no slot
// and publishes nothing; --gap-repair-column is refused (exit 2) for a relay of messages. The
// three messages delivered before are stored once, in order.
TEST_F(NatsRelay, MessagesWithTheSlotDroppedWhileTheRelayWasDownStopTheRestart) {
  // What `setup --messages` does (docs/security.md): the relay refuses --messages while PUBLIC
  // may emit. Serialized with the other tests that revoke (one catalog row).
  pg_->exec(
      "BEGIN; SELECT pg_advisory_xact_lock(2505); DO $$ DECLARE f regprocedure; BEGIN FOR f IN "
      "SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p WHERE p.pronamespace = "
      "'pg_catalog'::regnamespace AND p.proname = 'pg_logical_emit_message' LOOP EXECUTE "
      "format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f); END LOOP; END $$; COMMIT");
  ASSERT_NO_FATAL_FAILURE(create_stream());
  const std::string prefix = "outbox_" + suffix_;
  // The JSON envelope of event `seq` of aggregate `key`.
  const auto emit = [&](int seq, const std::string& key) {
    return "SELECT pg_logical_emit_message(true, '" + prefix +
           "', jsonb_build_object('id', gen_random_uuid(), 'aggregatetype', '" + aggregatetype_ +
           "', 'aggregateid', '" + key +
           "', 'type', 'Message', 'payload', jsonb_build_object('seq', " + std::to_string(seq) +
           "))::text);";
  };
  // A relay of messages only: relay_args() without --table.
  const auto start_messages_relay = [&](std::vector<std::string> extra) -> RelayProcess& {
    std::vector<std::string> args;
    const std::vector<std::string> all = relay_args();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] == "--table") {
        ++i;
        continue;
      }
      args.push_back(all[i]);
    }
    args.insert(args.end(), {"--messages", prefix});
    args.insert(args.end(), extra.begin(), extra.end());
    relays_.push_back(std::make_unique<RelayProcess>(
        relay_bin_, args, log_path("relay" + std::to_string(relays_.size() + 1))));
    return *relays_.back();
  };

  RelayProcess& relay = start_messages_relay({});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("BEGIN;" + emit(0, "a") + emit(1, "a") + emit(2, "b") + "COMMIT;");
  const Lsn delivered = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 3; }, 60s, 100ms))
      << stored().size() << " stored; see " << relay.log_path();
  ASSERT_TRUE(expect_confirmed_reaches(delivered, 30s));
  expect_graceful_stop(relay);
  pg_->drop_slot_if_exists(slot_);
  // The stop may confirm past the last message, to the server's WAL end: the gap starts here.
  const Lsn gap_from = pg_->current_wal_lsn();
  pg_->exec("BEGIN;" + emit(3, "a") + emit(4, "b") + "COMMIT;");

  RelayProcess& restarted = start_messages_relay({});
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("replication slot " + slot_ +
                 " does not exist, but its progress record \\(JetStream key-value bucket "
                 "outbox-relay-progress, key [^)]*\\) shows that the relay delivered through "
                 "([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), delivered) << "the position named is before the delivered";
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";

  RelayProcess& repairing = start_messages_relay({"--gap-repair-column", "created_at"});
  const auto refused = repairing.wait_exit(30s);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, 2) << tail_file(repairing.log_path(), 5);
  EXPECT_FALSE(pg_->slot_exists(slot_));

  // What was delivered, once and in order; nothing past the loss.
  const std::vector<Stored> messages = stored();
  ASSERT_EQ(messages.size(), 3u) << "nothing may be sent past the loss";
  std::set<std::string> ids;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].subject, topic_);
    EXPECT_EQ(messages[i].data, "{\"seq\": " + std::to_string(i) + "}");
    EXPECT_EQ(messages[i].headers.at("key"), i < 2 ? "a" : "b");
    EXPECT_TRUE(ids.insert(messages[i].headers.at("id")).second) << "stored twice";
  }
}

}  // namespace
}  // namespace outbox_test::fault
