// --failover as a user meets it on one server (15 and 18): refused before PostgreSQL 17; on 17+
// setup refuses a primary whose synchronized_standby_slots does not protect the slot (naming the
// statement that fixes it) and an existing slot without failover (naming ALTER_REPLICATION_SLOT),
// and makes a failover slot once the primary is set; status says so; `run --failover` refuses the
// slot without failover too, makes the failover slot itself and only warns about
// synchronized_standby_slots.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. synchronized_standby_slots is server-wide (ALTER SYSTEM), reset by a scope guard.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class FailoverSetup : public E2eTest {
 protected:
  FailoverSetup() : E2eTest({"fosetup", {"FoOrder"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    metrics_addr_ = "off";
    create_outbox_table();
    version_ = std::stoi(pg_->scalar("SHOW server_version_num").value_or("0"));
  }

  CommandResult command(const std::string& name, std::vector<std::string> args) {
    const std::string n = name + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 60s);
  }
  CommandResult setup(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"setup",      "--pg",    conninfo_,
                                     "--slot",     slot_,     "--publication",
                                     publication_, "--table", qualified_table()};
    args.insert(args.end(), extra.begin(), extra.end());
    return command("setup", args);
  }
  std::optional<std::string> slot_failover() {
    return pg_->scalar("SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1",
                       {slot_});
  }

  int version_ = 0;
  int commands_ = 0;
};

TEST_F(FailoverSetup, RefusedBeforePostgres17) {
  if (version_ >= 170000) GTEST_SKIP() << "PostgreSQL 17+ has failover slots";
  CommandResult r = setup({"--failover"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--failover needs PostgreSQL 17 or later"), std::string::npos) << r.err;
  EXPECT_FALSE(pg_->slot_exists(slot_));

  RelayProcess& relay = start_relay({"--failover"});
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(1));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("--failover needs PostgreSQL 17 or later"), std::string::npos) << log;
  EXPECT_FALSE(pg_->slot_exists(slot_));
}

TEST_F(FailoverSetup, SetupRefusesWhatAFailoverWouldBreakThenMakesAFailoverSlot) {
  if (version_ < 170000) GTEST_SKIP() << "failover slots are PostgreSQL 17's";
  const std::string standby_slot = slot_ + "_standby";
  ScopeGuard reset([&] {
    pg_->exec("ALTER SYSTEM RESET synchronized_standby_slots");
    pg_->exec("SELECT pg_reload_conf()");
    pg_->drop_slot_if_exists(standby_slot);
  });
  pg_->exec("ALTER SYSTEM RESET synchronized_standby_slots");
  pg_->exec("SELECT pg_reload_conf()");

  // Unprotected primary: refused, with the statement that fixes it; no slot made.
  CommandResult r = setup({"--failover"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("synchronized_standby_slots is empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ALTER SYSTEM SET synchronized_standby_slots"), std::string::npos) << r.err;
  EXPECT_FALSE(pg_->slot_exists(slot_));

  // Naming a slot that does not exist is refused too (decoding would wait for it forever).
  pg_->exec("ALTER SYSTEM SET synchronized_standby_slots = '" + standby_slot + "'");
  pg_->exec("SELECT pg_reload_conf()");
  ASSERT_TRUE(wait_until(
      [&] { return pg_->scalar("SHOW synchronized_standby_slots").value_or("") == standby_slot; },
      10s));
  r = setup({"--failover"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("not a physical slot"), std::string::npos) << r.err;

  // Protected: a failover slot, and status says so.
  pg_->query("SELECT pg_create_physical_replication_slot($1)", {standby_slot});
  r = setup({"--failover"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("created (logical, pgoutput, failover"), std::string::npos) << r.out;
  EXPECT_EQ(slot_failover(), std::optional<std::string>("true"));
  CommandResult status =
      command("status", {"status", "--pg", conninfo_, "--slot", slot_, "--publication",
                         publication_, "--table", qualified_table()});
  EXPECT_NE(status.out.find("failover              yes"), std::string::npos) << status.out;

  // An existing slot without failover: refused, naming ALTER_REPLICATION_SLOT.
  pg_->drop_slot_if_exists(slot_);
  ASSERT_EQ(setup({}).exit_code, 0);
  EXPECT_EQ(slot_failover(), std::optional<std::string>("false"));
  r = setup({"--failover"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("exists without failover"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ALTER_REPLICATION_SLOT"), std::string::npos) << r.err;
  // So does run --failover, before it streams from it.
  RelayProcess& relay = start_relay({"--failover"});
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(1));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("exists without failover"), std::string::npos) << log;
  EXPECT_EQ(slot_failover(), std::optional<std::string>("false"));
}

// run --failover on an unprotected primary: a loud warning naming the fix, then it streams from
// the failover slot it made (a relay restarted on a promoted standby, whose own standby is not
// there yet, must not stop the outbox).
TEST_F(FailoverSetup, RunMakesAFailoverSlotAndWarnsWhenUnprotected) {
  if (version_ < 170000) GTEST_SKIP() << "failover slots are PostgreSQL 17's";
  pg_->exec("ALTER SYSTEM RESET synchronized_standby_slots");
  pg_->exec("SELECT pg_reload_conf()");
  RelayProcess& relay = start_relay({"--failover"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  EXPECT_EQ(slot_failover(), std::optional<std::string>("true"));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("event=failover_unprotected"), std::string::npos) << log;
  EXPECT_NE(log.find("ALTER SYSTEM SET synchronized_standby_slots"), std::string::npos) << log;
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
