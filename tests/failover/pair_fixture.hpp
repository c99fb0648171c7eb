// A PostgreSQL primary and a streaming standby of the test's own (tests/failover/pg_pair.sh), for
// the failover tests: PairTest makes a fresh pair per test on OUTBOX_PG_FAILOVER_PORT and the next
// port (default: OUTBOX_PG_PORT, or 25432, plus 2), points the fixture, the relays and the
// writers at both hosts (target_session_attrs=read-write) and removes the pair in TearDown. Used
// by promotion_test.cpp (Kafka) and nats_failover_test.cpp (JetStream). The including target
// defines OUTBOX_TEST_LOG_DIR and OUTBOX_PAIR_SCRIPT (outbox_test_paths).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {

inline int pair_port() {
  if (const char* p = std::getenv("OUTBOX_PG_FAILOVER_PORT"); p && *p) return std::atoi(p);
  const char* base = std::getenv("OUTBOX_PG_PORT");
  return (base && *base ? std::atoi(base) : 25432) + 2;
}

// A fresh primary and streaming standby (pg_pair.sh) per test; conninfo_ (the fixture's, the
// relay's and the writers') names both hosts with target_session_attrs=read-write.
class PairTest : public E2eTest {
 protected:
  // nats: the relays publish to JetStream (E2eNames::nats, OUTBOX_NATS) instead of Kafka.
  explicit PairTest(std::string prefix, bool nats = false)
      : E2eTest({prefix, {"PromoOrder"}, OUTBOX_TEST_LOG_DIR, nats}) {}

  // false: the primary without synchronized_standby_slots (the misconfiguration).
  virtual bool protected_pair() const { return true; }
  // The pair's PostgreSQL version (pg_pair.sh's OUTBOX_PAIR_PG_VERSION); empty: its default, 18.
  virtual std::string pair_version() const { return ""; }

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    primary_port_ = pair_port();
    standby_port_ = primary_port_ + 1;
    std::vector<std::string> up_args = {"up", std::to_string(primary_port_),
                                        std::to_string(standby_port_)};
    if (!protected_pair()) up_args.push_back("unprotected");
    CommandResult up = pair(up_args);
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    pair_up_ = true;
    primary_ = "host=127.0.0.1 port=" + std::to_string(primary_port_) +
               " dbname=outbox user=postgres sslmode=disable";
    standby_ = "host=127.0.0.1 port=" + std::to_string(standby_port_) +
               " dbname=outbox user=postgres sslmode=disable";
    // The relay, the writers and the fixture's cleanup all use both hosts.
    conninfo_ = "host=127.0.0.1,127.0.0.1 port=" + std::to_string(primary_port_) + "," +
                std::to_string(standby_port_) +
                " dbname=outbox user=postgres sslmode=disable target_session_attrs=read-write "
                "connect_timeout=5";
    ASSERT_NO_THROW(pg_ = std::make_unique<PgClient>(conninfo_));
    status_interval_ = "500ms";
    metrics_port_ = free_port();
    metrics_addr_ = "127.0.0.1:" + std::to_string(metrics_port_);
  }

  void TearDown() override {
    E2eTest::TearDown();
    if (pair_up_) {
      CommandResult down = pair({"down"});
      EXPECT_EQ(down.exit_code, 0) << down.out << down.err;
    }
  }

  CommandResult pair(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"OUTBOX_PAIR_PG_VERSION=" + pair_version(), "/bin/bash",
                                     std::string(OUTBOX_PAIR_SCRIPT)};
    if (pair_version().empty()) full.erase(full.begin());
    full.insert(full.end(), args.begin(), args.end());
    return run_to_end("/usr/bin/env", full, log_path("pair_" + args[0] + "_out"),
                      log_path("pair_" + args[0] + "_err"), std::chrono::seconds(180));
  }

  CommandResult status() {
    return run_to_end(relay_bin_,
                      {"status", "--pg", primary_, "--slot", slot_, "--publication", publication_,
                       "--table", qualified_table(), "--standby", standby_},
                      log_path("status_out"), log_path("status_err"), std::chrono::seconds(30));
  }

  // No writer may write before the table reached the standby.
  void wait_for_table_on_standby() {
    PgClient standby(standby_);
    ASSERT_TRUE(wait_until(
        [&] {
          return standby.scalar("SELECT to_regclass($1)::text", {qualified_table()}).has_value();
        },
        std::chrono::seconds(30)));
  }

  int primary_port_ = 0, standby_port_ = 0;
  std::uint16_t metrics_port_ = 0;
  bool pair_up_ = false;
  std::string primary_, standby_;
};

}  // namespace outbox_test
