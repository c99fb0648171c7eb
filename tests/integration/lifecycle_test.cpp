// The outbox's life after relaying, as an operator runs it: `status` counts the events committed
// but not yet confirmed by the slot (without moving it, also while a relay holds it, for a plain
// and a partitioned outbox), and `prune` deletes the rows the slot certainly confirmed once they
// are past the retention, never a pending one, dropping whole partitions where it can.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// The number after "key": in a one-line JSON object; nullopt when absent or not a number.
std::optional<std::int64_t> json_number(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  auto at = json.find(needle);
  if (at == std::string::npos) return std::nullopt;
  at += needle.size();
  std::size_t end = at;
  while (end < json.size() && (json[end] == '-' || std::isdigit(json[end]))) ++end;
  if (end == at) return std::nullopt;
  return std::stoll(json.substr(at, end - at));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The end-to-end fixture with one aggregate type; the relays confirm every 200 ms, never create
// the slot (the tests make it as setup does) and serve no metrics.
class LifecycleIntegration : public E2eTest {
 protected:
  LifecycleIntegration() : E2eTest({"lc", {"Lifecycle"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    qualified_ = qualified_table();
    aggregatetype_ = aggregatetypes_.at(0);
    status_interval_ = "200ms";
    metrics_addr_ = "off";
    extra_publications_.push_back(publication_ + "_leaves");
    extra_tables_.push_back("public.other_" + suffix_);
  }

  // Runs `outbox-relay <args>` to its end (60 s at most); stdout and stderr apart.
  CommandResult command(const std::vector<std::string>& args) {
    const std::string name = args.at(0) + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(name + "_out"), log_path(name + "_err"), 60s);
  }

  CommandResult status(std::vector<std::string> more) {
    std::vector<std::string> args = {"status",     "--pg",           conninfo_,  "--slot",
                                     slot_,        "--table",        qualified_, "--publication",
                                     publication_, "--max-retained", "100GiB"};
    args.insert(args.end(), more.begin(), more.end());
    return command(args);
  }

  // With the relays' progress record (the default --checkpoint-topic on the test's Kafka).
  CommandResult prune(std::vector<std::string> more) {
    std::vector<std::string> args = {"prune",   "--pg",     conninfo_,   "--slot", slot_,
                                     "--table", qualified_, "--brokers", brokers_};
    args.insert(args.end(), more.begin(), more.end());
    return command(args);
  }

  void create_table(bool partitioned) {
    const std::string columns =
        " (id uuid NOT NULL DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
        " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL,"
        " created_at timestamptz NOT NULL DEFAULT now()";
    if (!partitioned) {
      pg_->exec("CREATE TABLE " + qualified_ + columns + ", PRIMARY KEY (id))");
      return;
    }
    // Range partitions by day relative to today: [-10d, -5d), [-5d, -2d), [-2d, +2d).
    pg_->exec("CREATE TABLE " + qualified_ + columns +
              ", PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)");
    const char* parts[][3] = {{"p_old", "10", "5"}, {"p_mid", "5", "2"}, {"p_now", "2", "-2"}};
    for (const auto& p : parts) {
      pg_->exec(
          "DO $$ BEGIN EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I "
          "FOR VALUES FROM (%L) TO (%L)', '" +
          table_ + "_" + p[0] + "', '" + table_ + "', date_trunc('day', now()) - interval '" +
          p[1] + " days', date_trunc('day', now()) - interval '" + p[2] + " days'); END $$");
    }
  }

  // The slot and the publication, as setup makes them; the slot is created now, so it sends
  // everything committed from here on.
  void create_slot_and_publication(const std::string& with = "publish = 'insert'") {
    pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_ + " WITH (" + with +
              ")");
    pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  }

  // One transaction of `n` events whose created_at is `age` ago (an interval literal).
  void insert_events(int n, const std::string& age = "0 seconds",
                     const std::string& type = "Created") {
    pg_->query("INSERT INTO " + qualified_ +
                   " (aggregatetype, aggregateid, type, payload, created_at)"
                   " SELECT $1, 'agg-' || g, $2, jsonb_build_object('seq', g),"
                   " now() - $3::interval FROM generate_series(1, $4::int) g",
               {aggregatetype_, type, age, std::to_string(n)});
  }

  std::int64_t server_clock_us() {
    return std::stoll(
        *pg_->scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"));
  }

  std::int64_t count_rows(const std::string& where = "true") {
    return std::stoll(*pg_->scalar("SELECT count(*) FROM " + qualified_ + " WHERE " + where));
  }

  // Runs the relay until the slot confirmed everything committed so far and its catalog_xmin
  // passed every row now in the table (so prune may take them), then stops it. catalog_xmin moves
  // when the relay confirms past an xl_running_xacts record newer than the rows: a CHECKPOINT
  // writes one (the background writer does too, every 15 s of activity).
  void relay_confirms_everything_so_far() {
    relay_ = &start_relay({"--no-create"});
    const std::int64_t rows = count_rows();
    const Lsn target = pg_->current_wal_lsn();
    ASSERT_TRUE(wait_until(
        [&] {
          return pg_->slot_confirmed_flush(slot_).value_or(0) >= target || !relay_->is_running();
        },
        90s, 100ms))
        << "slot " << slot_ << " not confirmed past " << format_lsn(target);
    ASSERT_TRUE(relay_->is_running()) << tail_file(relay_->log_path(), 20);
    auto last_checkpoint = Clock::now() - 1h;
    const bool passed = wait_until(
        [&] {
          if (Clock::now() - last_checkpoint > 3s) {
            pg_->exec("CHECKPOINT");
            last_checkpoint = Clock::now();
          }
          return count_rows(
                     "age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots "
                     "WHERE slot_name = '" +
                     slot_ + "')") == rows;
        },
        90s, 200ms);
    ASSERT_TRUE(passed) << "catalog_xmin of " << slot_ << " ("
                        << pg_->scalar(
                                  "SELECT catalog_xmin::text FROM pg_replication_slots "
                                  "WHERE slot_name = $1",
                                  {slot_})
                               .value_or("?")
                        << ") did not pass the rows' xmin; a long transaction on the server?";
    ASSERT_EQ(relay_->terminate(30s), 0);
    ASSERT_TRUE(wait_until([&] { return !pg_->slot_active(slot_); }, 10s));
  }

  std::string qualified_, aggregatetype_;
  RelayProcess* relay_ = nullptr;  // the last one started; owned and stopped by the fixture
  int commands_ = 0;
};

// A stopped relay, events committed since: status counts exactly the committed outbox inserts
// (not the rolled-back ones, not another table's), gives the first one's commit time, exits 1
// past --max-pending and --max-age, and leaves the slot where it was.
TEST_F(LifecycleIntegration, StatusCountsPendingEventsWithoutMovingTheSlot) {
  create_table(false);
  pg_->exec("CREATE TABLE public.other_" + suffix_ + " (n int)");
  create_slot_and_publication();
  // The publication covers the other table too: its inserts reach the decoder and must not count.
  pg_->exec("ALTER PUBLICATION " + publication_ + " ADD TABLE public.other_" + suffix_);

  const std::int64_t before_first = server_clock_us();
  insert_events(3);
  const std::int64_t after_first = server_clock_us();
  for (int t = 0; t < 4; ++t) insert_events(5);
  pg_->exec("BEGIN; INSERT INTO " + qualified_ +
            " (aggregatetype, aggregateid, type, payload) VALUES ('x', 'y', 'z', '{}'); "
            "INSERT INTO public.other_" +
            suffix_ + " VALUES (1); ROLLBACK");
  pg_->exec("INSERT INTO public.other_" + suffix_ + " SELECT generate_series(1, 7)");
  const Lsn confirmed = pg_->slot_confirmed_flush(slot_).value_or(0);
  const std::string restart = pg_->scalar(
                                     "SELECT restart_lsn::text FROM pg_replication_slots "
                                     "WHERE slot_name = $1",
                                     {slot_})
                                  .value_or("");

  CommandResult json = status({"--json"});
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  EXPECT_EQ(json_number(json.out, "pending_events"), 23) << json.out;
  EXPECT_EQ(json_number(json.out, "pending_transactions"), 5) << json.out;
  EXPECT_TRUE(contains(json.out, "\"pending_lower_bound\":false")) << json.out;
  const auto oldest = json_number(json.out, "oldest_pending_commit_unix_us");
  ASSERT_TRUE(oldest) << json.out;
  EXPECT_GE(*oldest, before_first);
  EXPECT_LE(*oldest, after_first);
  EXPECT_TRUE(contains(json.out, "\"healthy\":true")) << json.out;

  CommandResult text = status({});
  EXPECT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_TRUE(contains(text.out, "pending_events        23 (in 5 transactions; scanned "))
      << text.out;
  EXPECT_TRUE(contains(text.out, "oldest_pending        20")) << text.out;

  // Limits: at the count is fine, one below is not; the first event is older than 1 ms.
  EXPECT_EQ(status({"--max-pending", "23", "--max-age", "1h"}).exit_code, 0);
  CommandResult too_many = status({"--max-pending", "22"});
  EXPECT_EQ(too_many.exit_code, 1) << too_many.out;
  EXPECT_TRUE(contains(too_many.out, "UNHEALTHY: 23 pending events exceed --max-pending 22"))
      << too_many.out;
  CommandResult too_old = status({"--max-age", "1ms", "--json"});
  EXPECT_EQ(too_old.exit_code, 1) << too_old.out;
  EXPECT_TRUE(contains(too_old.out, "ago exceeds --max-age")) << too_old.out;

  // Bounded: 10 changes hold at most a few transactions; the count is a lower bound and says so.
  CommandResult bounded = status({"--scan-limit", "10", "--json"});
  EXPECT_EQ(bounded.exit_code, 0) << bounded.out << bounded.err;
  EXPECT_TRUE(contains(bounded.out, "\"pending_lower_bound\":true")) << bounded.out;
  const auto partial = json_number(bounded.out, "pending_events").value_or(-1);
  EXPECT_GE(partial, 3);
  EXPECT_LT(partial, 23);
  EXPECT_EQ(json_number(bounded.out, "oldest_pending_commit_unix_us"), oldest);
  CommandResult bounded_text = status({"--scan-limit", "10", "--max-pending", "100"});
  EXPECT_EQ(bounded_text.exit_code, 1) << bounded_text.out;
  EXPECT_TRUE(contains(bounded_text.out, "pending_events        >= ")) << bounded_text.out;
  EXPECT_TRUE(contains(bounded_text.out, "stopped at --scan-limit 10 changes")) << bounded_text.out;
  EXPECT_TRUE(contains(bounded_text.out, "cannot check --max-pending 100")) << bounded_text.out;

  // Seven status runs later the slot is where it was, and no temporary copy is left.
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), confirmed);
  EXPECT_EQ(pg_->scalar("SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                        {slot_}),
            restart);
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_replication_slots WHERE temporary AND "
                        "slot_name LIKE 'outbox_relay_scan_%'"),
            "0");

  // A missing slot is reported once, and the backlog is unknown rather than an error.
  CommandResult missing =
      command({"status", "--pg", conninfo_, "--slot", "no_such_" + suffix_, "--max-pending", "0"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.out, "pending_events        unknown (slot does not exist)"))
      << missing.out;
  EXPECT_TRUE(contains(missing.out, "UNHEALTHY: slot does not exist\n")) << missing.out;
  EXPECT_EQ(missing.err, "");
}

// The copy works while a relay holds the slot: status counts while the relay streams, and once
// the relay confirmed everything nothing is pending.
TEST_F(LifecycleIntegration, StatusWhileTheRelayHoldsTheSlot) {
  create_table(false);
  create_slot_and_publication();
  insert_events(10);
  relay_ = &start_relay({"--no-create"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay_));
  const Lsn target = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until([&] { return pg_->slot_confirmed_flush(slot_).value_or(0) >= target; },
                         90s, 100ms));

  CommandResult r = status({"--json", "--max-pending", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\"active\":true")) << r.out;
  EXPECT_EQ(json_number(r.out, "pending_events"), 0) << r.out;
  EXPECT_TRUE(contains(r.out, "\"oldest_pending_commit_time\":null")) << r.out;
  EXPECT_TRUE(relay_->is_running());
  EXPECT_TRUE(pg_->slot_active(slot_));
}

// A partitioned outbox, published via the root or partition by partition: inserts into every
// partition count as the outbox's.
TEST_F(LifecycleIntegration, StatusOfAPartitionedOutbox) {
  create_table(true);
  create_slot_and_publication("publish = 'insert', publish_via_partition_root = true");
  pg_->exec("CREATE PUBLICATION " + publication_ + "_leaves FOR TABLE " + qualified_ +
            " WITH (publish = 'insert')");
  insert_events(4, "7 days");  // p_old
  insert_events(3, "3 days");  // p_mid
  insert_events(2);            // p_now
  pg_->exec("INSERT INTO " + qualified_ +
            " (aggregatetype, aggregateid, type, payload, created_at) VALUES "
            "('a', 'b', 'c', '{}', now() - interval '7 days'), ('a', 'b', 'c', '{}', now())");

  for (const std::string& pub : {publication_, publication_ + "_leaves"}) {
    CommandResult r = command({"status", "--pg", conninfo_, "--slot", slot_, "--table", qualified_,
                               "--publication", pub, "--json", "--max-retained", "100GiB"});
    EXPECT_EQ(r.exit_code, 0) << pub << ": " << r.out << r.err;
    EXPECT_EQ(json_number(r.out, "pending_events"), 11) << pub << ": " << r.out;
    EXPECT_EQ(json_number(r.out, "pending_transactions"), 4) << pub << ": " << r.out;
  }
}

// Prune on a stopped relay with pending events: the confirmed rows past the retention go, in
// batches; the pending ones (however old their time column says they are) and the young ones
// stay; --dry-run deletes nothing.
TEST_F(LifecycleIntegration, PruneDeletesConfirmedOldRowsAndNoPendingOne) {
  create_table(false);
  create_slot_and_publication();
  for (int t = 0; t < 3; ++t) insert_events(10, "2 days", "ConfirmedOld");
  insert_events(10, "0 seconds", "ConfirmedYoung");
  ASSERT_NO_FATAL_FAILURE(relay_confirms_everything_so_far());
  // Committed after the relay stopped: pending. Two transactions, one with a subtransaction.
  insert_events(15, "3 days", "PendingOld");
  pg_->exec("BEGIN; SAVEPOINT s; INSERT INTO " + qualified_ +
            " (aggregatetype, aggregateid, type, payload, created_at) SELECT '" + aggregatetype_ +
            "', 'sub', 'PendingOld', '{}', now() - interval '3 days' FROM generate_series(1, 5);"
            " RELEASE SAVEPOINT s; COMMIT");
  const Lsn confirmed = pg_->slot_confirmed_flush(slot_).value_or(0);
  ASSERT_EQ(count_rows(), 60);

  CommandResult dry = prune({"--older-than", "1d", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  EXPECT_TRUE(contains(dry.out, "table " + qualified_ + ": would delete 30 of 60 rows; kept 20"))
      << dry.out;
  EXPECT_EQ(count_rows(), 60);

  CommandResult done = prune({"--older-than", "1d", "--batch", "7", "--pause", "10ms"});
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  std::cerr << done.out;
  EXPECT_TRUE(contains(done.out, "table " + qualified_ + ": deleted 30 of 60 rows in 5 batches"))
      << done.out;
  EXPECT_TRUE(contains(done.out, "batch 5: deleted 2 rows")) << done.out;
  EXPECT_EQ(count_rows("type = 'ConfirmedOld'"), 0);
  EXPECT_EQ(count_rows("type = 'ConfirmedYoung'"), 10);
  EXPECT_EQ(count_rows("type = 'PendingOld'"), 20);

  // Nothing left to do; the slot did not move and still has the 20 pending events to send.
  CommandResult again = prune({"--older-than", "1d"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_TRUE(contains(again.out, "nothing to delete (30 rows; kept 20")) << again.out;
  EXPECT_EQ(pg_->slot_confirmed_flush(slot_), confirmed);
  CommandResult st = status({"--json"});
  EXPECT_EQ(json_number(st.out, "pending_events"), 20) << st.out;

  // A retention longer than the rows' age keeps everything.
  CommandResult long_retention = prune({"--older-than", "30d"});
  EXPECT_EQ(long_retention.exit_code, 0);
  EXPECT_EQ(count_rows(), 30);
}

// Nothing is known without the slot or the time column: prune refuses, names what is missing,
// deletes nothing; bad flags exit 2 with one line.
TEST_F(LifecycleIntegration, PruneRefusesWhatItCannotKnow) {
  create_table(false);
  insert_events(5, "2 days");
  CommandResult no_slot = prune({"--older-than", "1d"});
  EXPECT_EQ(no_slot.exit_code, 1);
  EXPECT_EQ(no_slot.err, "outbox-relay prune: refusing to prune: replication slot " + slot_ +
                             " does not exist, so nothing tells which outbox rows were relayed "
                             "(give the relay's --slot)\n");
  create_slot_and_publication();
  CommandResult no_column = prune({"--older-than", "1d", "--column-time", "enqueued_at"});
  EXPECT_EQ(no_column.exit_code, 1);
  EXPECT_TRUE(
      contains(no_column.err, "table " + qualified_ + " has no column enqueued_at (--column-time)"))
      << no_column.err;
  CommandResult bad = prune({"--older-than", "yesterday"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "outbox-relay: --older-than: invalid duration 'yesterday' (expected e.g. 500ms, 10s, "
            "1m, 7d)\n");
  CommandResult bad_status = command({"status", "--pg", conninfo_, "--max-pending", "many"});
  EXPECT_EQ(bad_status.exit_code, 2);
  EXPECT_EQ(bad_status.err,
            "outbox-relay: --max-pending: invalid count 'many' (expected a non-negative "
            "integer)\n");
  // Rows committed before the slot existed are not the slot's to send, but they are younger than
  // its catalog_xmin only if a transaction was running then: either way, none of the 5 is
  // pending, and none is deleted by a refused run.
  EXPECT_EQ(count_rows(), 5);
}

// The slot dropped while the relay was down and made anew (as setup, another client or a failover
// would): its catalog_xmin passes the rows committed while it was missing, which were never
// delivered. prune reads the relay's progress record, sees the slot confirmed past it and refuses,
// naming both positions and the way back; the rows stay. Without the record (no --brokers) it
// refuses on the command line; --without-progress-record trusts the slot alone, as before.
TEST_F(LifecycleIntegration, PruneRefusesASlotMadeAnewPastTheProgressRecord) {
  create_table(false);
  create_slot_and_publication();
  insert_events(5, "2 days", "Delivered");
  ASSERT_NO_FATAL_FAILURE(relay_confirms_everything_so_far());
  CommandResult trusted = prune({"--older-than", "1d", "--dry-run"});
  ASSERT_EQ(trusted.exit_code, 0) << trusted.out << trusted.err;
  EXPECT_TRUE(contains(trusted.out, "progress record of slot " + slot_)) << trusted.out;
  EXPECT_TRUE(contains(trusted.out, "would delete 5 of 5 rows")) << trusted.out;

  CommandResult recorded = status({"--brokers", brokers_});
  EXPECT_EQ(recorded.exit_code, 0) << recorded.out << recorded.err;
  EXPECT_TRUE(contains(recorded.out, "progress_record       0/")) << recorded.out;

  pg_->query("SELECT pg_drop_replication_slot($1)", {slot_});
  insert_events(7, "2 days", "NeverDelivered");
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  ASSERT_EQ(count_rows(), 12);

  CommandResult refused = prune({"--older-than", "1d"});
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_TRUE(contains(refused.err, "outbox-relay prune: refusing to prune: slot " + slot_ +
                                        " is confirmed through "))
      << refused.err;
  EXPECT_TRUE(contains(refused.err, "past the relay's progress record")) << refused.err;
  EXPECT_TRUE(contains(refused.err, "--accept-slot-loss")) << refused.err;
  EXPECT_EQ(count_rows("type = 'NeverDelivered'"), 7);
  EXPECT_EQ(count_rows(), 12);
  // status shows the loss too (exit 1), where it did not without the record.
  CommandResult st = status({"--brokers", brokers_});
  EXPECT_EQ(st.exit_code, 1) << st.out << st.err;
  EXPECT_TRUE(contains(st.out, "past the relay's progress record")) << st.out;
  EXPECT_EQ(status({}).exit_code, 0);

  // Another checkpoint topic holds no record of this slot: refused too.
  CommandResult elsewhere =
      prune({"--older-than", "1d", "--checkpoint-topic", "outbox-relay.none-" + slot_});
  EXPECT_EQ(elsewhere.exit_code, 1) << elsewhere.out << elsewhere.err;
  EXPECT_TRUE(contains(elsewhere.err, "no progress record of slot " + slot_)) << elsewhere.err;

  CommandResult no_record = command(
      {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_, "--older-than", "1d"});
  EXPECT_EQ(no_record.exit_code, 2) << no_record.err;
  EXPECT_TRUE(contains(no_record.err, "--brokers: required (or --nats, or --progress-table"))
      << no_record.err;
  EXPECT_EQ(count_rows(), 12);

  // Trusting the slot alone is the operator's explicit choice, warned: the dry run shows what
  // the loss would cost.
  CommandResult alone = command({"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_,
                                 "--older-than", "1d", "--dry-run", "--without-progress-record"});
  EXPECT_EQ(alone.exit_code, 0) << alone.out << alone.err;
  EXPECT_TRUE(contains(alone.err, "--without-progress-record: slot " + slot_ + " is trusted alone"))
      << alone.err;
  // The loss the record prevents: the new slot's catalog_xmin passes the never delivered rows.
  EXPECT_TRUE(contains(alone.out, "would delete 12 of 12 rows")) << alone.out;
  EXPECT_EQ(count_rows(), 12);
}

// A partitioned outbox: the partition whose rows are all confirmed and old is dropped whole, the
// one with pending rows is kept (its confirmed old rows deleted row by row), the current one is
// untouched.
TEST_F(LifecycleIntegration, PruneDropsConfirmedPartitionsAndKeepsPendingOnes) {
  create_table(true);
  create_slot_and_publication("publish = 'insert', publish_via_partition_root = true");
  insert_events(10, "7 days", "ConfirmedOld");      // p_old
  insert_events(5, "3 days", "ConfirmedOld");       // p_mid
  insert_events(5, "0 seconds", "ConfirmedYoung");  // p_now
  ASSERT_NO_FATAL_FAILURE(relay_confirms_everything_so_far());
  insert_events(4, "3 days", "PendingOld");  // p_mid, after the relay stopped
  const std::string p_old = "public." + table_ + "_p_old";
  const std::string p_mid = "public." + table_ + "_p_mid";

  CommandResult dry = prune({"--older-than", "1d", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  EXPECT_TRUE(contains(dry.out, "partition " + p_old + ": would drop (10 rows, all prunable)"))
      << dry.out;
  EXPECT_TRUE(contains(dry.out, "partition " + p_mid + ": would delete 5 of 9 rows; kept 4"))
      << dry.out;
  EXPECT_TRUE(pg_->scalar("SELECT to_regclass($1)::text", {p_old}).has_value());

  CommandResult done = prune({"--older-than", "1d"});
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  std::cerr << done.out;
  EXPECT_TRUE(contains(done.out, "partition " + p_old + ": dropped (10 rows")) << done.out;
  EXPECT_TRUE(contains(done.out, "partition " + p_mid + ": deleted 5 of 9 rows")) << done.out;
  EXPECT_TRUE(contains(done.out, "total: deleted 5 rows, dropped 1 partitions (10 rows)"))
      << done.out;
  EXPECT_FALSE(pg_->scalar("SELECT to_regclass($1)::text", {p_old}).has_value());
  EXPECT_TRUE(pg_->scalar("SELECT to_regclass($1)::text", {p_mid}).has_value());
  EXPECT_EQ(count_rows("type = 'PendingOld'"), 4);
  EXPECT_EQ(count_rows("type = 'ConfirmedYoung'"), 5);
  EXPECT_EQ(count_rows(), 9);
  // The table still takes inserts of today, and the pending events are still to be sent.
  insert_events(1);
  CommandResult st = status({"--json"});
  EXPECT_EQ(json_number(st.out, "pending_events"), 5) << st.out;
}

// A list partition (here by aggregate type) takes new rows whatever their age: dropping it would
// make the application's next insert fail. Its rows are deleted, the partition stays.
TEST_F(LifecycleIntegration, PruneNeverDropsAListPartition) {
  pg_->exec("CREATE TABLE " + qualified_ +
            " (id uuid NOT NULL DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
            " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now()) PARTITION BY LIST (aggregatetype)");
  pg_->exec("CREATE TABLE public." + table_ + "_mine PARTITION OF " + qualified_ +
            " FOR VALUES IN ('" + aggregatetype_ + "')");
  create_slot_and_publication("publish = 'insert', publish_via_partition_root = true");
  insert_events(6, "3 days", "ConfirmedOld");
  ASSERT_NO_FATAL_FAILURE(relay_confirms_everything_so_far());

  CommandResult done = prune({"--older-than", "1d"});
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  EXPECT_TRUE(contains(done.out, "all 6 rows prunable, but not dropped")) << done.out;
  EXPECT_TRUE(contains(done.out, "deleted 6 of 6 rows")) << done.out;
  EXPECT_EQ(count_rows(), 0);
  insert_events(1);  // the partition still takes the aggregate type's events
  EXPECT_EQ(count_rows(), 1);
}

}  // namespace
}  // namespace outbox_test
