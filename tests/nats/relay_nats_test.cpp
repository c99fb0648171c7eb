// The relay publishing to NATS JetStream (--nats), end to end: the real outbox-relay binary, the
// real PostgreSQL and the real nats-server of scripts/nats-up.sh (OUTBOX_PG, OUTBOX_NATS). The
// fixture is the fault tests' (tests/fault: table with a seq column, the paced workload, the
// delivery checks) with E2eNames::nats; the stream is read back with tests/nats' StreamReader.
// What a user checks: every committed event in the stream once (Nats-Msg-Id drops re-sent ones
// inside the duplicate window), nothing uncommitted, per-aggregate order, the slot confirmed
// only through what JetStream acknowledged; poison and a subject without a stream are clear.
// The tests whose outcome depends on PostgreSQL's version (the records as decoded, the slot's
// loss) are in relay_nats_pg_test.cpp, which runs on PostgreSQL 18 too.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "nats_relay_fixture.hpp"
#include "outbox/nats/publisher.hpp"
#include "outbox_test/http.hpp"
#include "stream_reader.hpp"

namespace outbox_test::fault {
namespace {

// kill -9 of the relay, again and again under load: everything in the stream once (the
// re-sent events carry the same Nats-Msg-Id, which the stream drops), nothing uncommitted.
TEST_F(NatsRelay, SigkillLoopUnderLoadStoresEveryEventOnce) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  Workload& load = start_workload(plan_mixed(scaled(30000, 3000), 500, 0.05, 24), 20s);
  int kills = 0;
  while (!load.done() && kills < 6) {
    std::this_thread::sleep_for(2500ms);  // load shape: a kill every 2.5 s of load
    relay->kill9();
    ++kills;
    relay = &start_relay();
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  }
  load.join();
  figure("kills", kills);
  ASSERT_GE(kills, 3);
  expect_every_event_stored_once(120s);
  expect_graceful_stop(*relay);
}

// The server stopped under load, then started again: while it is down the slot is not confirmed
// past what was stored before; once it is back, everything is stored once.
TEST_F(NatsRelay, ServerStoppedThenRestarted) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay({"--status-interval", "200ms"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  Workload& load = start_workload(plan_mixed(scaled(8000, 1000), 200, 0.05, 7), 12s);
  ASSERT_TRUE(load.wait_committed(scaled(2000, 200), 60s));
  ASSERT_EQ(outbox_test::nats::run_nats_script("nats-down.sh"), 0);
  // Nothing committed after the stop can have been stored: the slot stays before it.
  const Lsn stored_before = pg_->current_wal_lsn();
  const auto down_until = Clock::now() + 8s;
  Lsn max_confirmed{};
  while (Clock::now() < down_until) {
    if (auto c = pg_->slot_confirmed_flush(slot_)) max_confirmed = std::max(max_confirmed, *c);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_LE(max_confirmed, stored_before) << "confirmed past what the server could have stored";
  EXPECT_TRUE(relay.is_running());
  ASSERT_EQ(outbox_test::nats::run_nats_script("nats-up.sh"), 0);
  load.join();
  expect_every_event_stored_once(180s);
  expect_graceful_stop(relay);
}

// The server frozen (SIGSTOP: connections open, nothing answers) under load for longer than the
// acknowledgement timeout, then thawed: while frozen the slot is not confirmed past what was
// committed before the freeze, and /healthz answers throughout the rewinds; after it, everything
// is stored once.
TEST_F(NatsRelay, ServerFrozenThenThawed) {
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(create_stream());
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay({"--status-interval", "200ms"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  Workload& load = start_workload(plan_mixed(scaled(8000, 1000), 200, 0.05, 11), 12s);
  ASSERT_TRUE(load.wait_committed(scaled(2000, 200), 60s));
  const pid_t pid = nats_pid();
  ASSERT_GT(pid, 0);
  struct Thaw {
    pid_t pid;
    ~Thaw() { ::kill(pid, SIGCONT); }
  } thaw{pid};
  HealthzWatch healthz(port);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const Lsn stored_before = pg_->current_wal_lsn();
  const auto frozen_until = Clock::now() + 15s;  // past the 10 s acknowledgement timeout
  Lsn max_confirmed{};
  while (Clock::now() < frozen_until) {
    if (auto c = pg_->slot_confirmed_flush(slot_)) max_confirmed = std::max(max_confirmed, *c);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_LE(max_confirmed, stored_before) << "confirmed past what the server could have stored";
  EXPECT_TRUE(relay.is_running());
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  healthz.stop();
  figure("healthz_polls", healthz.polls());
  figure("healthz_slowest_ms", healthz.slowest_ms());
  // The rewinds' new publishers connect, and the old ones close, off the io thread: /healthz,
  // served there, answers throughout (a first connect attempt on it took 2.5 s).
  EXPECT_GT(healthz.polls(), 10);
  EXPECT_EQ(healthz.unanswered(), 0);
  EXPECT_LT(healthz.slowest_ms(), 1000) << "the relay's io thread was blocked";
  load.join();
  expect_every_event_stored_once(180s);
  EXPECT_GE(count_in_file(relay.log_path(), "event=producer_rewind"), 1u);
  expect_graceful_stop(relay);
}

// PostgreSQL restarted under load (fast and immediate shutdown) while the relay publishes to
// JetStream: the relay reconnects by itself and every committed event is in the stream once, in
// per-aggregate order, nothing uncommitted. An immediate shutdown moves the slot's
// confirmed_flush back to the last checkpoint's; the relay starts past what JetStream
// acknowledged, and anything sent again inside the duplicate window would be dropped anyway.
class NatsPgRestart : public NatsRelay, public ::testing::WithParamInterface<std::string> {};

TEST_P(NatsPgRestart, RelayReconnectsEveryEventStoredOnce) {
  const std::string mode = GetParam();
  const std::string services_log = log_path("services");
  ScopeGuard pg_back([&] { pg_up(services_log); });
  create_outbox_table();
  ASSERT_NO_FATAL_FAILURE(create_stream());
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const int transactions = scaled(300, 40);
  Workload& load = start_workload(plan_uniform(transactions, 10), 20s, 50);
  ASSERT_TRUE(load.wait_committed(std::int64_t{transactions} * 10 / 3, 60s));
  ASSERT_TRUE(wait_until([&] { return stored().size() >= 100; }, 60s, 100ms))
      << "nothing stored before the restart";
  ASSERT_NO_FATAL_FAILURE(restart_pg_under(relay, mode, services_log));
  load.join();
  figure("workload_transactions_cut_by_restart", load.failed_transactions());
  expect_every_event_stored_once(120s);
  EXPECT_GE(count_in_file(relay.log_path(), "event=reconnect"), 1u)
      << "the relay log shows no event=reconnect";
  expect_graceful_stop(relay);
}

INSTANTIATE_TEST_SUITE_P(Modes, NatsPgRestart, ::testing::Values("fast", "immediate"),
                         [](const auto& info) { return info.param; });

// setup --nats --nats-stream: creates the stream capturing what the topic template renders and
// the dead-letter subject, with the duplicate window asked for; the relay's events land in it.
// Run again, it checks the stream and changes nothing; a stream that does not fit (a shorter
// duplicate window, subjects it does not capture) is a one-line error, exit 1.
TEST_F(NatsRelay, SetupCreatesTheStreamTheRelayPublishesInto) {
  create_outbox_table();
  const std::string prefix = "setup" + suffix_;
  const std::string topic = prefix + ".${aggregatetype}";
  auto setup = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"setup",           "--pg",        conninfo_,   "--table",
                                     qualified_table(), "--slot",      slot_,       "--publication",
                                     publication_,      "--nats",      nats_,       "--nats-stream",
                                     stream_,           "--dlq-topic", dlq_subject_};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_to_end(relay_bin_, args, log_path("setup_out"), log_path("setup_err"), 60s);
  };
  const CommandResult created = setup({"--topic", topic, "--nats-duplicate-window", "3m"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.out.find("stream " + stream_ + ": created (file storage, subjects " + prefix +
                             ".>, " + dlq_subject_ + ", duplicate window 3m)"),
            std::string::npos)
      << created.out;

  RelayProcess& relay = start_relay({"--topic", topic});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, 1, 20, false));
  const Lsn after = pg_->current_wal_lsn();
  std::vector<Stored> messages;
  ASSERT_TRUE(wait_until(
      [&] {
        messages = stored();
        return messages.size() >= 20;
      },
      60s, 100ms))
      << messages.size() << " of 20 stored; relay log:\n"
      << tail_file(relay.log_path(), 20);
  EXPECT_TRUE(expect_confirmed_reaches(after, 30s));
  EXPECT_EQ(stored().size(), 20u);
  for (const Stored& m : messages) EXPECT_EQ(m.subject, prefix + "." + aggregatetype_);
  expect_graceful_stop(relay);

  const CommandResult again = setup({"--topic", topic});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("stream " + stream_ + ": exists, fits"), std::string::npos) << again.out;
  const CommandResult longer = setup({"--topic", topic, "--nats-duplicate-window", "10m"});
  EXPECT_EQ(longer.exit_code, 1);
  EXPECT_NE(longer.err.find("JetStream stream " + stream_ +
                            " exists but its duplicate window is 3m, shorter than 10m"),
            std::string::npos)
      << longer.err;
  const std::string other = "other" + suffix_ + ".${aggregatetype}";
  const CommandResult elsewhere = setup({"--topic", other});
  EXPECT_EQ(elsewhere.exit_code, 1);
  EXPECT_NE(elsewhere.err.find("does not capture other" + suffix_ + ".>"), std::string::npos)
      << elsewhere.err;
  EXPECT_EQ(stored().size(), 20u);
}

// A record the stream refuses (over its max_msg_size) under --on-error fail: exit 3 naming it,
// the slot not confirmed past it.
TEST_F(NatsRelay, PoisonFailStopsBeforeIt) {
  create_outbox_table();
  StreamReader().add_small_stream(stream_, topic_, 512);
  RelayProcess& relay = start_relay({"--on-error", "fail"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 3, false));
  const Lsn before = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(before, 30s));
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
            "', 'agg-1', 'Big', jsonb_build_object('pad', repeat('x', 2000)), 4)");
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(3));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("MESSAGE_EXCEEDS_MAXIMUM"), std::string::npos)
      << tail_file(relay.log_path(), 20);
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_LT(*confirmed, pg_->current_wal_lsn());
  EXPECT_EQ(stored().size(), 3u);
}

// The same under --on-error dlq: the event goes to the dead-letter subject (its value left out,
// too large), its aggregate's later events follow it, the others go on.
TEST_F(NatsRelay, PoisonDlqGoesToTheDeadLetterSubject) {
  create_outbox_table();
  StreamReader().add_small_stream(stream_, topic_, 1024);
  const std::string dlq_stream = stream_ + "_DLQ";
  StreamReader().add_small_stream(dlq_stream, dlq_subject_, 64 * 1024);
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--dlq-topic", dlq_subject_});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
            "', 'agg-1', 'Big', jsonb_build_object('pad', repeat('x', 2000)), 1)");
  // Its refusal first: events of agg-1 already in flight when it comes would be stored ahead of
  // it (docs/jetstream.md, "Poison").
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 60s));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 2, 6, false));
  const Lsn after = pg_->current_wal_lsn();
  EXPECT_TRUE(expect_confirmed_reaches(after, 60s));
  const std::vector<Stored> dlq = StreamReader().all(dlq_stream);
  const std::vector<Stored> main = stored();
  StreamReader().drop(dlq_stream);
  // agg-1: the big one and its later events (seq 4, 7) parked; agg-0 and agg-2 go on.
  ASSERT_EQ(dlq.size(), 3u);
  EXPECT_EQ(dlq[0].headers.at("type"), "Big");
  EXPECT_EQ(dlq[0].headers.at("outbox.original.topic"), topic_);
  EXPECT_EQ(dlq[0].headers.count("outbox.value.omitted"), 1u);
  EXPECT_EQ(main.size(), 4u);
  for (const Stored& m : main) EXPECT_NE(m.headers.at("key"), "agg-1");
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// A subject no stream captures: the event is poison like a topic that cannot be created (exit 3
// under fail), and the error says so.
TEST_F(NatsRelay, SubjectWithoutStreamIsAClearError) {
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 1, false));
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(3));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("no JetStream stream captures subject " + topic_), std::string::npos)
      << tail_file(relay.log_path(), 20);
}

}  // namespace
}  // namespace outbox_test::fault
