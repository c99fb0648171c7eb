// A least-privileged PostgreSQL role, as production databases hand out: the table owner runs
// `outbox-relay setup` once, and the relay runs with --no-create as a role that has LOGIN and
// REPLICATION and nothing else: no SELECT on the outbox table, no CREATE anywhere, no superuser.
// Events must arrive in Kafka, the slot must be confirmed, and the backlog count and `status`
// must work, all as that role (docs/operating.md, "A least-privileged PostgreSQL role").
//
// The servers of scripts/test.sh accept any role without a password on 127.0.0.1 (trust).

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
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

class PrivilegeIntegration : public E2eTest {
 protected:
  PrivilegeIntegration() : E2eTest({"priv", {"PrivOrder", "PrivInvoice"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    role_ = "relay_" + suffix_;
    pg_->exec("CREATE ROLE " + role_ + " LOGIN REPLICATION");
    role_created_ = true;
    // libpq takes the last value of a keyword given twice.
    restricted_conninfo_ = conninfo_ + " user=" + role_;
  }

  // The relays first (E2eTest stops them), then the role they logged in as.
  void TearDown() override {
    E2eTest::TearDown();
    if (!role_created_ || !pg_) return;
    try {
      pg_->exec("DROP ROLE IF EXISTS " + role_);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup: " << e.what();
    }
  }

  // run's flags of relay_args() with --pg replaced by the restricted role's conninfo.
  std::vector<std::string> restricted_relay_args(std::vector<std::string> extra) const {
    std::vector<std::string> args = relay_args();
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--pg") args[i + 1] = restricted_conninfo_;
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  RelayProcess& start_restricted_relay(std::vector<std::string> extra) {
    relays_.push_back(
        std::make_unique<RelayProcess>(relay_bin_, restricted_relay_args(std::move(extra)),
                                       log_path("relay" + std::to_string(relays_.size() + 1))));
    std::cerr << "relay log: " << relays_.back()->log_path() << "\n";
    return *relays_.back();
  }

  CommandResult command(const std::string& name, const std::vector<std::string>& args) {
    const std::string n = name + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 60s);
  }

  std::string role_;
  bool role_created_ = false;
  std::string restricted_conninfo_;
  int commands_ = 0;
};

TEST_F(PrivilegeIntegration, ReplicationOnlyRoleRelaysAfterTheOwnerRanSetup) {
  constexpr int kTransactions = 10;
  constexpr int kPerTransaction = 20;
  constexpr int kEvents = kTransactions * kPerTransaction;
  create_outbox_table();

  // The role has LOGIN and REPLICATION, and no privilege on the table or the database.
  EXPECT_EQ(pg_->scalar("SELECT concat_ws(' ', rolsuper, rolreplication, rolcanlogin, rolcreatedb,"
                        " rolcreaterole) FROM pg_roles WHERE rolname = $1",
                        {role_}),
            "f t t f f");
  EXPECT_EQ(pg_->scalar("SELECT has_table_privilege($1, $2, 'SELECT,INSERT,UPDATE,DELETE')::text",
                        {role_, qualified_table()}),
            "false");
  EXPECT_EQ(
      pg_->scalar("SELECT has_database_privilege($1, current_database(), 'CREATE')::text", {role_}),
      "false");
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_auth_members WHERE member = $1::regrole", {role_}),
            "0");

  // Before setup, the role cannot create the publication, and with --no-create it does not try:
  // each is a clear error (exit 1), and nothing is created.
  for (const auto& [flags, error] :
       {std::pair<std::vector<std::string>, std::string>{{}, "CREATE PUBLICATION"},
        {{"--no-create"}, "publication " + publication_ + " does not exist and --no-create"}}) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--metrics-addr", "off"});
    RelayProcess& early = start_restricted_relay(args);
    const auto code = early.wait_exit(60s);
    ASSERT_TRUE(code.has_value()) << "relay as " << role_ << " did not exit before setup";
    EXPECT_EQ(*code, 1) << tail_file(early.log_path(), 20);
    const std::string log = read_file(early.log_path());
    EXPECT_NE(log.find(error), std::string::npos) << "no '" << error << "' in\n" << log;
    if (flags.empty()) {
      EXPECT_NE(log.find("permission denied for database"), std::string::npos) << log;
    }
  }
  EXPECT_FALSE(pg_->slot_exists(slot_));
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_publication WHERE pubname = $1", {publication_}),
            "0");

  // The table owner (here the superuser) runs setup once.
  const CommandResult setup =
      command("setup", {"setup", "--pg", conninfo_, "--slot", slot_, "--publication", publication_,
                        "--table", qualified_table()});
  ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;

  const std::uint16_t port = free_port();
  RelayProcess& relay =
      start_restricted_relay({"--no-create", "--metrics-addr", "127.0.0.1:" + std::to_string(port),
                              "--backlog-interval", "1s"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  // The walsender streaming the slot belongs to the restricted role.
  EXPECT_EQ(pg_->scalar("SELECT r.usename::text FROM pg_stat_replication r "
                        "JOIN pg_replication_slots s ON s.active_pid = r.pid "
                        "WHERE s.slot_name = $1",
                        {slot_}),
            role_);

  for (int t = 0; t < kTransactions; ++t) {
    const int from = t * kPerTransaction + 1;
    pg_->query("INSERT INTO " + qualified_table() +
                   " (aggregatetype, aggregateid, type, payload) SELECT (ARRAY['" +
                   aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                   "'])[g % 2 + 1], 'agg-' || (g % 2) || '-' || (g % 7), 'Created',"
                   " jsonb_build_object('seq', g)"
                   " FROM generate_series($1::bigint, $2::bigint) AS g ORDER BY g",
               {std::to_string(from), std::to_string(from + kPerTransaction - 1)});
  }
  const Lsn after_inserts = pg_->current_wal_lsn();

  KafkaReader reader(brokers_, topics_);
  ASSERT_TRUE(
      reader.read_until([&](const auto& records) { return records.size() >= kEvents; }, 120s))
      << reader.records().size() << " of " << kEvents << " events in Kafka within 120 s";
  expect_confirmed_reaches(after_inserts, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(kEvents));
  const Problems problems = check_committed_in_order(reader, committed_rows());
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  expect_confirmed_reaches(after_inserts, 60s);

  // The publication check and the backlog count (a temporary copy of the slot) work as the role.
  std::map<std::string, std::string> samples;
  EXPECT_TRUE(wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        const auto ok = samples.find("outbox_relay_backlog_scans_total{result=\"ok\"}");
        return ok != samples.end() && std::stoull(ok->second) >= 2;
      },
      30s, 200ms))
      << "no successful backlog count as " << role_;
  EXPECT_EQ(samples["outbox_relay_backlog_scans_total{result=\"error\"}"], "0");
  // At least the check at start, and then one per interval: present and counting.
  EXPECT_GE(sample_value(samples, "outbox_relay_publication_checks_total").value_or(-1), 1)
      << "outbox_relay_publication_checks_total missing or 0";
  EXPECT_EQ(http_get(port, "/readyz").status, 200);

  // status, as the same role: the slot is healthy and nothing is pending.
  const CommandResult status =
      command("status", {"status", "--pg", restricted_conninfo_, "--slot", slot_, "--publication",
                         publication_, "--table", qualified_table(), "--json"});
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  EXPECT_NE(status.out.find("\"healthy\":true"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"pending_events\":0"), std::string::npos) << status.out;

  expect_graceful_stop(relay);
}

// A role without REPLICATION is refused by the server at every replication connection: the relay
// does not exit but keeps reconnecting, each event=reconnect warning giving the server's reason,
// in state connecting (/readyz 503 naming it). README, "A least-privileged PostgreSQL role".
TEST_F(PrivilegeIntegration, RoleWithoutReplicationKeepsReconnectingAndSaysWhy) {
  create_outbox_table();
  const CommandResult setup =
      command("setup", {"setup", "--pg", conninfo_, "--slot", slot_, "--publication", publication_,
                        "--table", qualified_table()});
  ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;
  pg_->exec("ALTER ROLE " + role_ + " NOREPLICATION");
  EXPECT_EQ(pg_->scalar("SELECT rolreplication::text FROM pg_roles WHERE rolname = $1", {role_}),
            "false");

  const std::uint16_t port = free_port();
  RelayProcess& relay = start_restricted_relay(
      {"--no-create", "--metrics-addr", "127.0.0.1:" + std::to_string(port)});
  // Backoff 0.2, 0.4, 0.8, 1.6 s...: four attempts within a few seconds.
  // The server's reason: PostgreSQL 15 says "must be superuser or replication role to start
  // walsender", 16 and later "permission denied to start WAL sender".
  auto says_why = [](const std::string& text) {
    return text.find("must be superuser or replication role") != std::string::npos ||
           text.find("permission denied to start WAL sender") != std::string::npos;
  };
  auto reconnects = [&] {
    std::size_t n = 0;
    const std::string log = read_file(relay.log_path());
    for (auto at = log.find("event=reconnect"); at != std::string::npos;
         at = log.find("event=reconnect", at + 1)) {
      ++n;
    }
    return n;
  };
  const bool retried =
      wait_until([&] { return !relay.is_running() || reconnects() >= 4; }, 60s, 200ms);
  ASSERT_TRUE(relay.is_running()) << "the relay exited with " << relay.wait_exit(0ms).value_or(-1)
                                  << ":\n"
                                  << tail_file(relay.log_path(), 20);
  ASSERT_TRUE(retried) << "fewer than 4 reconnects within 60 s:\n"
                       << tail_file(relay.log_path(), 20);
  // Every reconnect says why.
  std::istringstream log(read_file(relay.log_path()));
  for (std::string line; std::getline(log, line);) {
    if (line.find("event=reconnect") == std::string::npos) continue;
    EXPECT_TRUE(says_why(line)) << "a reconnect without the server's reason: " << line;
  }
  const HttpResult ready = http_get(port, "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("state connecting"), std::string::npos) << ready.body;
  EXPECT_TRUE(says_why(ready.body)) << ready.body;
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  EXPECT_EQ(sample_value(samples, "outbox_relay_state{state=\"connecting\"}"), 1.0);
  EXPECT_GE(sample_value(samples, "outbox_relay_reconnects_total").value_or(-1), 4);
  EXPECT_FALSE(pg_->slot_active(slot_)) << "the slot is streamed without REPLICATION";
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
