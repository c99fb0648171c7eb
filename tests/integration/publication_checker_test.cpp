// PublicationChecker, the relay's publication check, on its own against the real PostgreSQL
// (OUTBOX_PG): a check that passes moves the verified position (the slot is never confirmed past
// it); a publication dropped, the table removed from it or a row filter added makes the next
// check fail with exit code 5 and a reason naming the publication; the periodic check runs in
// the background beside a busy io_context, whose timers keep firing while the catalog answers.
#include "publication_checker.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include "outbox_test/asio_run.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/support.hpp"

namespace outbox::relay {
namespace {

using namespace std::chrono_literals;
using outbox_test::run;
using outbox_test::run_until;
using outbox_test::Ticker;
using pgoutput::Lsn;

// The check never produces: a Pipeline without records.
class NoSink : public Pipeline::Sink {
 public:
  sink::ProduceResult produce(const sink::Record&, std::uint64_t, Pipeline::Route) override {
    ADD_FAILURE() << "the publication check produced a record";
    return {sink::ProduceStatus::kFailed, "no sink", false};
  }
  bool stopped() const override { return false; }
};

class PublicationCheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conninfo_ = outbox_test::require_env("OUTBOX_PG");
    pg_ = std::make_unique<outbox_test::PgClient>(conninfo_);
    const std::string suffix = outbox_test::unique_suffix();
    table_ = "outbox_pc_" + suffix;
    config_.conninfo = conninfo_;
    config_.publication = "outbox_pc_" + suffix;
    config_.slot = "outbox_pc_" + suffix;
    config_.mapper.schema = "public";
    config_.mapper.table = table_;
    config_.connect_timeout = 10s;
    pg_->exec("CREATE TABLE public." + table_ +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)");
    pg_->exec("CREATE PUBLICATION " + config_.publication + " FOR TABLE public." + table_ +
              " WITH (publish = 'insert', publish_via_partition_root = true)");
    pipeline_ = std::make_unique<Pipeline>(
        config_, sink_, metrics_,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()));
    checker_ = std::make_unique<PublicationChecker>(
        io_.get_executor(), config_, *pipeline_, metrics_,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()),
        PublicationChecker::Hooks{[] { return true; }, [this] { return leaving_; },
                                  [this] { ++stream_wakes_; }, [] {}});
  }

  void TearDown() override {
    if (checker_) {
      leaving_ = true;
      run(io_, checker_->await_background(true), 30s);
      checker_->cancel_timer();
      checker_->disconnect();
    }
    checker_.reset();
    pipeline_.reset();
    if (pg_) {
      pg_->exec("DROP PUBLICATION IF EXISTS " + config_.publication);
      pg_->exec("DROP TABLE IF EXISTS public." + table_);
    }
  }

  // One check to its end; the exception it ended with, if any.
  std::exception_ptr check() {
    try {
      if (!run(io_, checker_->check(), 30s)) {
        ADD_FAILURE() << "the check did not end within 30 s";
      }
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  // A check that must pass.
  void expect_passes() {
    if (std::exception_ptr e = check()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        FAIL() << "the check failed: " << x.what();
      }
    }
  }

  // A check that must fail with exit code 5 and a message holding `reason`.
  void expect_refused(const std::string& reason) {
    std::exception_ptr e = check();
    ASSERT_TRUE(e) << "the check passed";
    try {
      std::rethrow_exception(e);
    } catch (const FatalError& f) {
      EXPECT_EQ(f.fatal.code, kExitConfig) << f.what();
      EXPECT_NE(f.fatal.message.find(reason), std::string::npos) << f.what();
      EXPECT_NE(f.fatal.message.find(config_.publication), std::string::npos) << f.what();
    } catch (const std::exception& x) {
      FAIL() << "not a configuration refusal: " << x.what();
    }
  }

  void insert_row() {
    pg_->exec(
        "INSERT INTO public." + table_ +
        " (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'Created', '{}')");
  }

  std::string conninfo_;
  std::unique_ptr<outbox_test::PgClient> pg_;
  std::string table_;
  boost::asio::io_context io_;
  RelayConfig config_;
  Metrics metrics_;
  NoSink sink_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<PublicationChecker> checker_;
  bool leaving_ = false;
  int stream_wakes_ = 0;
};

TEST_F(PublicationCheckerTest, APassingCheckMovesTheVerifiedPosition) {
  EXPECT_EQ(pipeline_->verified(), Lsn{}) << "nothing verified before the first check";
  const outbox_test::Lsn wal_before = pg_->current_wal_lsn();
  ASSERT_NO_FATAL_FAILURE(expect_passes());
  const Lsn first = pipeline_->verified();
  EXPECT_GE(first.value, wal_before) << "the position read before the check's snapshot";
  EXPECT_EQ(metrics_.publication_checks, 1u);

  insert_row();
  const outbox_test::Lsn wal_after_insert = pg_->current_wal_lsn();
  ASSERT_NO_FATAL_FAILURE(expect_passes());
  EXPECT_GT(pipeline_->verified(), first) << "WAL written since: the verified position moves";
  EXPECT_GE(pipeline_->verified().value, wal_after_insert);
  EXPECT_EQ(metrics_.publication_checks, 2u);
}

struct Alteration {
  std::string name;
  std::string sql;     // run with {pub} and {table} replaced
  std::string reason;  // what the refusal says
};

// Test names print the alteration's name, not its bytes.
void PrintTo(const Alteration& a, std::ostream* os) { *os << a.name; }

class PublicationAltered : public PublicationCheckerTest,
                           public ::testing::WithParamInterface<Alteration> {};

// After a check that passed, the publication is altered so that it hides inserts: the next check
// fails with the reason, and the verified position stays where the last passing check left it.
TEST_P(PublicationAltered, TheNextCheckFailsWithTheReason) {
  ASSERT_NO_FATAL_FAILURE(expect_passes());
  const Lsn verified = pipeline_->verified();
  std::string sql = GetParam().sql;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"{pub}", config_.publication},
                                 {"{table}", "public." + table_}}) {
    for (auto at = sql.find(from); at != std::string::npos; at = sql.find(from, at + to.size())) {
      sql.replace(at, from.size(), to);
    }
  }
  pg_->exec(sql);
  insert_row();
  ASSERT_NO_FATAL_FAILURE(expect_refused(GetParam().reason));
  EXPECT_EQ(pipeline_->verified(), verified) << "a failed check moved the verified position";
  EXPECT_EQ(metrics_.publication_checks, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Alterations, PublicationAltered,
    ::testing::Values(Alteration{"Dropped", "DROP PUBLICATION {pub}", "does not exist"},
                      Alteration{"TableRemoved", "ALTER PUBLICATION {pub} DROP TABLE {table}",
                                 "does not publish table"},
                      Alteration{
                          "RowFilterAdded",
                          "ALTER PUBLICATION {pub} SET TABLE {table} WHERE (aggregatetype <> "
                          "'hidden')",
                          "only for rows matching WHERE"}),
    [](const auto& info) { return info.param.name; });

// The periodic check runs beside the stream: while the catalog is slow to answer (a lock held on
// pg_publication by another session), the io_context goes on (a timer keeps firing) and the
// verified position stays; once the catalog answers, the check ends and moves it.
// Asserted by conditions, not by a count of ticks in a wall-clock window (at load 33 a 10 ms
// ticker fired 14 times in 500 ms): once PostgreSQL shows the check waiting on the lock, the
// ticker must advance by kTurns while the lock is still held, and the check must not have ended.
// A check that blocked the io thread would never let the ticker advance: a watchdog thread ends
// the lock after 60 s so that such a check fails the test (the lock was no longer held when the
// ticks came) instead of hanging it.
TEST_F(PublicationCheckerTest, TheBackgroundCheckRunsBesideABusyIoContext) {
  config_.publication_check_interval = 100ms;
  ASSERT_NO_FATAL_FAILURE(expect_passes());
  const Lsn first = pipeline_->verified();
  insert_row();

  outbox_test::PgClient locker(conninfo_);
  locker.exec("BEGIN; LOCK TABLE pg_catalog.pg_publication IN ACCESS EXCLUSIVE MODE");
  std::atomic<bool> locked{true};
  const auto unlock = [&] {
    if (locked.exchange(false)) locker.exec("ROLLBACK");
  };
  std::mutex watchdog_mutex;
  std::condition_variable watchdog_cv;
  bool watchdog_done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(watchdog_mutex);
    if (!watchdog_cv.wait_for(lock, 60s, [&] { return watchdog_done; })) unlock();
  });
  outbox_test::ScopeGuard end_watchdog([&] {
    {
      std::lock_guard lock(watchdog_mutex);
      watchdog_done = true;
    }
    watchdog_cv.notify_one();
    watchdog.join();
    unlock();
  });

  checker_->schedule();
  ASSERT_TRUE(run_until(
      io_, [&] { return checker_->due(); }, 30s))
      << "no check became due";
  EXPECT_GE(stream_wakes_, 1) << "a check due wakes the stream";
  checker_->on_stream_turn();  // starts the check in the background and returns
  EXPECT_FALSE(checker_->due());

  Ticker ticker(io_, 10ms);
  const auto check_waits_on_lock = [&] {
    const auto waiting = pg_->scalar(
        "SELECT count(*)::text FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
        "datname = current_database() AND query LIKE '%pg_publication%' AND pid <> "
        "pg_backend_pid()");
    return waiting.value_or("0") != "0";
  };
  // The check reaches PostgreSQL and waits on the lock, the io_context turning meanwhile.
  ASSERT_TRUE(run_until(io_, check_waits_on_lock, 30s))
      << "the check was not seen waiting on the catalog's lock";
  // From there the io_context keeps turning: the ticker advances while the lock is held.
  constexpr int kTurns = 25;
  const int at_wait = ticker.ticks();
  ASSERT_TRUE(run_until(
      io_, [&] { return ticker.ticks() >= at_wait + kTurns; }, 30s))
      << "the io_context stood still while the catalog was locked (" << ticker.ticks() - at_wait
      << " ticks)";
  EXPECT_TRUE(locked) << "the ticks came only after the watchdog ended the lock: the check "
                         "blocked the io thread";
  EXPECT_EQ(pipeline_->verified(), first) << "the check passed while the catalog was locked";
  EXPECT_EQ(metrics_.publication_checks, 1u) << "the check ended while the catalog was locked";
  EXPECT_TRUE(check_waits_on_lock()) << "the check stopped waiting while the lock was held";

  unlock();
  ASSERT_TRUE(run_until(
      io_, [&] { return pipeline_->verified() > first; }, 30s))
      << "the background check did not end within 30 s of the catalog's answer";
  EXPECT_EQ(metrics_.publication_checks, 2u);
  EXPECT_NO_THROW(checker_->on_stream_turn()) << "the background check failed";
}

}  // namespace
}  // namespace outbox::relay
