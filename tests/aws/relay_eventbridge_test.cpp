// The relay publishing to Amazon EventBridge (--eventbridge), end to end: the real outbox-relay
// binary, the lane's PostgreSQL, and moto's server of scripts/aws-up.sh with its authentication
// on. Each test makes a bus of its own with a rule whose target is an SQS queue (moto delivers
// each matching entry to it as EventBridge's envelope), and reads that queue back.
// What a user checks: every committed event on the bus (at least once; EventBridge neither orders
// nor deduplicates), deduplicated by detail.id exactly the committed set, nothing from a
// rolled-back transaction, the entry as docs/aws.md maps it (source, detail-type,
// Detail); a kill -9; EventBridge frozen (the fault proxy of tests/support): nothing confirmed past
// its acknowledgements, everything after; poison (an entry over 256 KiB) under fail and dlq; a
// refused secret named by its source, never shown.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "eventbridge_fixture.hpp"
#include "fault_fixture.hpp"
#include "moto.hpp"
#include "outbox_test/aws_fault_proxy.hpp"

namespace outbox_test::fault {
namespace {

using namespace std::chrono_literals;

class EventBridgeRelay : public FaultTest {
 protected:
  EventBridgeRelay() { names_.eventbridge = true; }

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    // The relay's credentials, region and endpoint as the SDKs read them: the environment.
    const Moto& m = moto();
    ::setenv("AWS_ACCESS_KEY_ID", m.access_key_id.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", m.secret_access_key.c_str(), 1);
    ::setenv("AWS_REGION", m.region.c_str(), 1);
    ::setenv("AWS_ENDPOINT_URL_EVENTS", m.endpoint.c_str(), 1);
    ::unsetenv("AWS_SESSION_TOKEN");
    ::unsetenv("AWS_ENDPOINT_URL");
    target_ =
        std::make_unique<EventBridgeToQueue>("relay-" + suffix_, std::vector<std::string>{topic_});
    eventbridge_bus_ = target_->bus();
  }

  // What the queue got, at least `count` events, then nothing more for 1 s.
  std::vector<ReceivedEvent> read_all(EventBridgeToQueue& target, std::size_t count) {
    return target.receive(count, 1s, 60s);
  }

  void insert_big(const std::string& aggregateid, std::int64_t seq) {
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
              "', '" + aggregateid + "', 'Big', jsonb_build_object('pad', repeat('x', 300000)), " +
              std::to_string(seq) + ")");
  }

  std::unique_ptr<EventBridgeToQueue> target_;
};

// The Detail a consumer gets for a row of the fault table (payload {"seq": N}).
std::string expected_detail(const std::string& id, const OutboxRow& row) {
  return "{\"id\":\"" + id + "\",\"type\":\"" + row.type + "\",\"aggregateid\":\"" +
         row.aggregateid + "\",\"payload\":{\"seq\":" + std::to_string(row.seq) + "}}";
}

// Every committed event on the bus, deduplicated by detail.id exactly the committed set, none of
// the rolled-back transaction; source = the rendered --topic, detail-type = the type, Detail as
// documented; the slot confirmed once EventBridge took them all.
TEST_F(EventBridgeRelay, EndToEnd) {
  create_outbox_table();
  const std::string other_type = "Other" + suffix_;  // its source matches no rule: taken, dropped
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  for (int t = 0; t < 8; ++t) {
    pg_->exec("BEGIN; " +
              Workload::insert_sql(qualified_table(), aggregatetype_, 7, t * 10 + 1, 5, false) +
              "; " + Workload::insert_sql(qualified_table(), other_type, 7, t * 10 + 6, 5, false) +
              "; COMMIT");
    if (t == 3) {
      pg_->exec("BEGIN; " +
                Workload::insert_sql(qualified_table(), aggregatetype_, 7, 1000, 5, true) +
                "; ROLLBACK");
    }
  }
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), 80u);
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(relay.log_path(), 20);
  std::set<std::string> expected;
  for (const auto& [id, row] : rows) {
    if (row.aggregatetype == aggregatetype_) expected.insert(id);
  }
  ASSERT_EQ(expected.size(), 40u);
  const std::vector<ReceivedEvent> got = read_all(*target_, expected.size());
  ASSERT_GE(got.size(), expected.size());
  std::set<std::string> ids;
  for (const ReceivedEvent& e : got) {
    const auto row = rows.find(e.id);
    ASSERT_NE(row, rows.end()) << "not a committed event: " << e.detail;
    EXPECT_EQ(e.source, topic_);
    EXPECT_EQ(e.detail_type, row->second.type);
    EXPECT_EQ(e.detail, expected_detail(e.id, row->second));
    ids.insert(e.id);
  }
  EXPECT_EQ(ids, expected);
  figure("events", static_cast<std::int64_t>(expected.size()));
  figure("received", static_cast<std::int64_t>(got.size()));
  EXPECT_NE(read_file(relay.log_path()).find("event=eventbridge_bus"), std::string::npos);
  expect_graceful_stop(relay);
}

// kill -9 of the relay under load, then a restart: every committed event on the bus at least
// once, deduplicated by detail.id exactly the committed set, nothing uncommitted.
TEST_F(EventBridgeRelay, SigkillAndRestartLosesNothing) {
  create_outbox_table();
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  Workload& load = start_workload(plan_mixed(scaled(200, 60), 20, 0.05, 32), 4s, 60);
  ASSERT_TRUE(load.wait_committed(60, 30s));
  relay->kill9();
  relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  load.join();
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_seqs();
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(relay->log_path(), 20);
  const std::vector<ReceivedEvent> got = read_all(*target_, rows.size());
  std::set<std::string> ids;
  for (const ReceivedEvent& e : got) {
    EXPECT_TRUE(rows.contains(e.id)) << "not a committed event: " << e.detail;
    ids.insert(e.id);
  }
  EXPECT_EQ(ids.size(), rows.size());
  for (const auto& [id, row] : rows) EXPECT_TRUE(ids.contains(id)) << "missing " << id;
  figure("events", static_cast<std::int64_t>(rows.size()));
  figure("received", static_cast<std::int64_t>(got.size()));
  expect_graceful_stop(*relay);
}

// EventBridge frozen (the test proxy holds every request): nothing committed meanwhile is
// confirmed; past --eventbridge-timeout the relay rewinds (the publisher halted, a new one made)
// and, once EventBridge answers again, every event is on the bus and the slot confirmed.
TEST_F(EventBridgeRelay, FrozenBusConfirmsNothingThenEverything) {
  create_outbox_table();
  AwsFaultProxy proxy({moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}});
  ::setenv("AWS_ENDPOINT_URL_EVENTS", proxy.endpoint().c_str(), 1);
  RelayProcess& relay = start_relay({"--eventbridge-timeout", "1s"});
  ::setenv("AWS_ENDPOINT_URL_EVENTS", moto().endpoint.c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 3, false));
  const Lsn before = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(before, 30s)) << tail_file(relay.log_path(), 20);

  proxy.freeze();
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 4, 10, false));
  const Lsn during = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until(
      [&] {
        return read_file(relay.log_path()).find("event=producer_rewind") != std::string::npos;
      },
      30s))
      << tail_file(relay.log_path(), 20);
  const auto held = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(held.has_value());
  EXPECT_LT(*held, during) << "confirmed past what EventBridge never acknowledged";
  EXPECT_TRUE(relay.is_running());

  proxy.thaw();
  ASSERT_TRUE(expect_confirmed_reaches(during, 60s)) << tail_file(relay.log_path(), 20);
  const auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), 13u);
  const std::vector<ReceivedEvent> got = read_all(*target_, rows.size());
  std::set<std::string> ids;
  for (const ReceivedEvent& e : got) {
    EXPECT_TRUE(rows.contains(e.id)) << "not a committed event: " << e.detail;
    ids.insert(e.id);
  }
  EXPECT_EQ(ids.size(), rows.size());
  figure("received", static_cast<std::int64_t>(got.size()));
  expect_graceful_stop(relay);
}

// An entry over 256 KiB under --on-error fail: exit 3 naming it, the slot not confirmed past it,
// the events before it on the bus.
TEST_F(EventBridgeRelay, PoisonFailStopsBeforeIt) {
  create_outbox_table();
  RelayProcess& relay = start_relay({"--on-error", "fail"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 3, false));
  const Lsn before = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(before, 30s));
  insert_big("agg-1", 4);
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(3));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("EntryTooLarge"), std::string::npos) << tail_file(relay.log_path(), 20);
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_LT(*confirmed, pg_->current_wal_lsn());
  EXPECT_EQ(read_all(*target_, 3).size(), 3u);
}

// The same under --on-error dlq: the event goes to the dead-letter bus (--eventbridge-dlq) with
// source --dlq-topic, its payload left out (too large) and the error in detail.headers; its
// aggregate's later events follow it there, the others go on to the bus.
TEST_F(EventBridgeRelay, PoisonDlqGoesToTheDeadLetterBus) {
  create_outbox_table();
  EventBridgeToQueue dead("relay-dlq-" + suffix_, {"outbox.dlq"});
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--eventbridge-dlq", dead.bus()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_big("agg-1", 1);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 2, 6, false));
  const Lsn after = pg_->current_wal_lsn();
  EXPECT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(relay.log_path(), 20);
  // agg-1: the big one and its later events (seq 4, 7) parked; agg-0 and agg-2 go on.
  const std::vector<ReceivedEvent> dlq = read_all(dead, 3);
  const std::vector<ReceivedEvent> main = read_all(*target_, 4);
  ASSERT_EQ(dlq.size(), 3u);
  const auto rows = committed_seqs();  // the big one has no payload seq
  std::set<std::string> dead_types;
  for (const ReceivedEvent& d : dlq) {
    EXPECT_EQ(d.source, "outbox.dlq");
    ASSERT_TRUE(rows.contains(d.id)) << d.detail;
    EXPECT_EQ(rows.at(d.id).aggregateid, "agg-1");
    EXPECT_NE(d.detail.find("\"aggregateid\":\"agg-1\""), std::string::npos) << d.detail;
    EXPECT_NE(d.detail.find("\"outbox.original.topic\":\"" + topic_ + "\""), std::string::npos)
        << d.detail;
    dead_types.insert(d.detail_type);
    if (d.detail_type == "Big") {
      EXPECT_NE(d.detail.find("\"outbox.error\":\"EntryTooLarge: "), std::string::npos) << d.detail;
      EXPECT_NE(d.detail.find("\"outbox.value.omitted\":"), std::string::npos) << d.detail;
      EXPECT_NE(d.detail.find("\"payload\":null"), std::string::npos) << d.detail;
    }
  }
  EXPECT_TRUE(dead_types.contains("Big"));
  EXPECT_EQ(main.size(), 4u);
  for (const ReceivedEvent& m : main) {
    ASSERT_TRUE(rows.contains(m.id)) << m.detail;
    EXPECT_NE(rows.at(m.id).aggregateid, "agg-1");
  }
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// A wrong secret: EventBridge refuses the signature; the relay exits 1 naming where the
// credentials came from (the environment), the access key's last four characters and the IAM
// action, never the secret.
TEST_F(EventBridgeRelay, RefusedSecretExitsOneNamingTheSource) {
  create_outbox_table();
  const std::string wrong = "wrong-" + suffix_ + "-secret";
  ::setenv("AWS_SECRET_ACCESS_KEY", wrong.c_str(), 1);
  RelayProcess& relay = start_relay();
  ::setenv("AWS_SECRET_ACCESS_KEY", moto().secret_access_key.c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 3, false));
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(1));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(
      log.find("refused the credentials (access key id ..." +
               moto().access_key_id.substr(moto().access_key_id.size() - 4) + " from environment"),
      std::string::npos)
      << tail_file(relay.log_path(), 20);
  EXPECT_NE(log.find("events:PutEvents"), std::string::npos) << tail_file(relay.log_path(), 20);
  EXPECT_EQ(log.find(wrong), std::string::npos) << "the secret is in the log";
}

// setup --eventbridge checks the bus (DescribeEventBus) before the database is touched and creates
// nothing: a bus (or --eventbridge-dlq) that does not exist is exit 1 naming it, with the command
// that would create it, no bus made and no slot left behind; an existing bus passes.
TEST_F(EventBridgeRelay, SetupChecksTheBusAndCreatesNothing) {
  create_outbox_table();
  auto setup = [&](const std::string& bus, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"setup",           "--pg",          conninfo_, "--table",
                                     qualified_table(), "--slot",        slot_,     "--publication",
                                     publication_,      "--eventbridge", bus};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_to_end(relay_bin_, args, log_path("setup_out"), log_path("setup_err"), 60s);
  };
  const std::string missing = "missing-" + suffix_;
  boost::asio::io_context io;
  outbox::aws::EventBridgeClient events(io.get_executor(), moto_events_config(moto().endpoint));
  auto bus_exists = [&](const std::string& name) {
    auto answer = await_result<outbox::aws::EventBridgeCallResult>(
        io, [&](std::function<void(outbox::aws::EventBridgeCallResult)> done) {
          events.call("DescribeEventBus", "{\"Name\":\"" + name + "\"}", std::move(done));
        });
    if (!answer) throw std::runtime_error("DescribeEventBus: no answer in time");
    return !answer->error.has_value();
  };
  ASSERT_TRUE(bus_exists(eventbridge_bus_));

  const CommandResult absent = setup(missing);
  EXPECT_EQ(absent.exit_code, 1) << absent.out << absent.err;
  EXPECT_NE(
      absent.err.find("outbox-relay setup: EventBridge event bus " + missing + " does not exist"),
      std::string::npos)
      << absent.err;
  EXPECT_NE(absent.err.find("aws events create-event-bus --name " + missing + " --region " +
                            moto().region + " --endpoint-url " + moto().endpoint),
            std::string::npos)
      << absent.err;
  EXPECT_FALSE(bus_exists(missing)) << "setup created the bus";
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "a bus that does not exist left a slot behind";

  const CommandResult no_dlq = setup(eventbridge_bus_, {"--eventbridge-dlq", missing});
  EXPECT_EQ(no_dlq.exit_code, 1) << no_dlq.err;
  EXPECT_NE(no_dlq.err.find("EventBridge dead-letter bus " + missing + " does not exist"),
            std::string::npos)
      << no_dlq.err;
  EXPECT_FALSE(bus_exists(missing)) << "setup created the dead-letter bus";
  EXPECT_FALSE(pg_->slot_exists(slot_));

  const CommandResult exists = setup(eventbridge_bus_, {"--eventbridge-dlq", "default"});
  ASSERT_EQ(exists.exit_code, 0) << exists.err;
  EXPECT_NE(exists.out.find("event bus " + eventbridge_bus_ + ": exists (arn:aws:events:"),
            std::string::npos)
      << exists.out;
  EXPECT_NE(exists.out.find("dead-letter bus default: exists"), std::string::npos) << exists.out;
  EXPECT_NE(exists.out.find("consumers deduplicate by detail.id"), std::string::npos) << exists.out;
  EXPECT_TRUE(pg_->slot_exists(slot_)) << "setup went on to the database";
}

// The progress record in PostgreSQL with EventBridge (it cannot be read back either): a slot
// dropped while the relay was down stops the restart (exit 4) naming the table, the position and
// the way back, and makes no slot; before, a new slot skipped the events committed meanwhile.
TEST_F(EventBridgeRelay, SlotLossWhileDownExitsFourNamingTheRange) {
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 6, false));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 60s))
      << tail_file(relay.log_path(), 20);
  expect_graceful_stop(relay);
  pg_->drop_slot_if_exists(slot_);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 7, 6, false));
  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ +
                     " does not exist, but its progress record (PostgreSQL table "
                     "public.outbox_relay_progress, key "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("EventBridge cannot be read back, so every event committed since"),
            std::string::npos)
      << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";
}

// --gap-repair-column with EventBridge, which cannot be read back: the slot dropped while the
// relay was down and 20 events committed meanwhile; the restart makes the slot, sends every row of
// the window again (the 10 delivered before the loss too: resent=30, compared=0) before
// streaming, and goes on. Through the rule's queue: every committed event at least once
// (EventBridge keeps no order: none is asserted), the 10 delivered before the loss twice.
TEST_F(EventBridgeRelay, SlotLossWhileDownIsRepairedBySendingTheWindowAgain) {
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  ASSERT_NO_FATAL_FAILURE(deliver_then_drop_slot(flags, 5, 10));
  for (int t = 0; t < 4; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11 + t * 5, 5, false));
  }
  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 31, 5, false));
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), 35u);
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("event=slot_gap_found"), std::string::npos) << log;
  EXPECT_NE(log.find("to EventBridge again (it cannot be read back: at-least-once)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_NE(log.find(" rows_scanned=30 destination=EventBridge compared=0 unmappable=0 resent=30 "
                     "failed=0"),
            std::string::npos)
      << log;
  // 10 before the loss, the window's 30 again, the 5 after the restart.
  const std::vector<ReceivedEvent> got = read_all(*target_, 45);
  EXPECT_GE(got.size(), 45u);
  std::set<std::string> ids, expected;
  for (const auto& [id, row] : rows) expected.insert(id);
  for (const ReceivedEvent& e : got) {
    EXPECT_TRUE(rows.contains(e.id)) << "not a committed event: " << e.detail;
    ids.insert(e.id);
  }
  EXPECT_EQ(ids, expected);
  figure("received", static_cast<std::int64_t>(got.size()));
  EXPECT_TRUE(restarted.is_running());
  expect_graceful_stop(restarted);
}

// reconcile --eventbridge BUS --repair: EventBridge cannot be read back, so every row of the
// window is sent again with the relay's publisher (compared=0, resent=9): each on the bus.
TEST_F(EventBridgeRelay, ReconcileResendsTheWholeWindow) {
  create_outbox_table_with_time();
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 9, false));
  const CommandResult rc =
      run_to_end(relay_bin_,
                 {"reconcile", "--pg", conninfo_, "--eventbridge", eventbridge_bus_, "--table",
                  qualified_table(), "--column-time", "created_at", "--since", "1h", "--repair"},
                 log_path("reconcile_out"), log_path("reconcile_err"), 60s);
  EXPECT_EQ(rc.exit_code, 0) << rc.out << rc.err;
  EXPECT_NE(rc.out.find(" rows_scanned=9 destination=EventBridge compared=0 unmappable=0 "
                        "resent=9 failed=0\n"),
            std::string::npos)
      << rc.out;
  const auto rows = committed_rows();
  std::set<std::string> ids, expected;
  for (const auto& [id, row] : rows) expected.insert(id);
  for (const ReceivedEvent& e : read_all(*target_, expected.size())) {
    const auto row = rows.find(e.id);
    ASSERT_NE(row, rows.end()) << "not a committed event: " << e.detail;
    EXPECT_EQ(e.detail, expected_detail(e.id, row->second));
    ids.insert(e.id);
  }
  EXPECT_EQ(ids, expected);
}

}  // namespace
}  // namespace outbox_test::fault
