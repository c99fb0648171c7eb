// Shared pieces of the fault tests: FaultTest, the end-to-end fixture of tests/support with one
// aggregate type (so one topic) and a seq column in the outbox table; control of the shared Kafka
// and PostgreSQL processes with scope guards that always bring them back; a paced workload
// generator that keeps committing while things are killed; and the checks a user makes on what
// reached Kafka. Thread-safety: a fixture is used by its test's thread; a Workload runs its own
// thread and exposes only atomics and a mutex-guarded log of commits.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test::fault {

using namespace std::chrono_literals;

// OUTBOX_FAULT_SCALE (default 1) scales workload sizes down for local runs; CI runs the full
// sizes. scaled(n) is at least `minimum`.
double workload_scale();
int scaled(int n, int minimum = 1);

// ---- the shared services ---------------------------------------------------------------------

// Pid of the Kafka broker from OUTBOX_KAFKA_PID_FILE (re-read every call: kafka-up.sh rewrites
// it after a restart); -1 when there is none or it is not running.
pid_t kafka_pid();
// Runs scripts/<name> of the source tree; returns its exit status. Output goes to `log_path`.
int run_script(const std::string& name, const std::string& log_path);
// Brings Kafka back (kafka-up.sh is idempotent); waits until it answers. Returns success.
bool kafka_up(const std::string& log_path);
// Restarts the PostgreSQL cluster with `pg_ctl -m <mode> restart -w` as user postgres.
bool pg_restart(const std::string& mode, const std::string& log_path);
bool pg_up(const std::string& log_path);

// The broker process SIGSTOPped for the lifetime of this object (or until resume()). A hung
// broker: its TCP connections stay open, nothing answers.
class BrokerPause {
 public:
  BrokerPause();
  ~BrokerPause() { resume(); }
  BrokerPause(const BrokerPause&) = delete;
  BrokerPause& operator=(const BrokerPause&) = delete;
  bool paused() const { return pid_ > 0; }
  void resume();

 private:
  pid_t pid_ = -1;
};

// Milliseconds from `start` to now.
std::int64_t ms_since(Clock::time_point start);
// Brings the shared broker back when it goes out of scope, whatever happened meanwhile (the other
// tests need it): kafka-up.sh (idempotent, it also resumes a stopped broker), run once more if it
// failed.
class BrokerBack {
 public:
  explicit BrokerBack(std::string services_log) : log_(std::move(services_log)) {}
  ~BrokerBack() {
    if (kafka_pid() <= 0 || !kafka_up(log_)) kafka_up(log_);
  }
  BrokerBack(const BrokerBack&) = delete;
  BrokerBack& operator=(const BrokerBack&) = delete;

 private:
  std::string log_;
};

// Peak resident set size (VmHWM) of a process in KiB, or -1.
std::int64_t vm_hwm_kib(pid_t pid);
// Occurrences of `needle` in a file.
std::size_t count_in_file(const std::string& path, const std::string& needle);

// ---- workload --------------------------------------------------------------------------------

struct TxnPlan {
  std::int64_t first_seq = 0;  // events get seq first_seq .. first_seq + size - 1
  int size = 0;
  bool rollback = false;
};

// `events` committed events in transactions of 1..max_size events (log-uniform, so many small
// ones and some large ones), plus `rollback_share` of extra transactions rolled back. Seq
// numbers are consecutive in commit order, so per aggregate, commit order is seq order.
std::vector<TxnPlan> plan_mixed(int events, int max_size, double rollback_share,
                                std::uint64_t seed);
std::vector<TxnPlan> plan_uniform(int transactions, int size, std::int64_t first_seq = 1);

struct CommittedTxn {
  std::int64_t first_seq;
  int size;
  Lsn before_commit;  // WAL insert position after its rows, before COMMIT: <= its commit LSN
  Clock::time_point committed_at;  // after COMMIT returned
};

// Commits a plan from its own connection and thread, paced over `duration` (a load shape, not a
// wait). Survives PostgreSQL restarts: a failed transaction is abandoned (its fate is read back
// from the table afterwards) and the connection re-established.
class Workload {
 public:
  Workload(std::string conninfo, std::string table, std::string aggregatetype, int aggregates,
           std::vector<TxnPlan> plan, std::chrono::milliseconds duration);
  ~Workload();
  void start();
  // Waits for the thread; rethrows its error.
  void join();
  // Waits until at least `events` events were committed (or the workload ended).
  bool wait_committed(std::int64_t events, std::chrono::milliseconds timeout);
  bool done() const { return done_; }
  std::int64_t committed_events() const { return committed_events_; }
  int failed_transactions() const { return failed_transactions_; }
  std::vector<CommittedTxn> commits() const;
  // SQL that inserts `plan`'s rows (without BEGIN/COMMIT).
  static std::string insert_sql(const std::string& table, const std::string& aggregatetype,
                                int aggregates, std::int64_t first_seq, int size, bool ghost);

 private:
  void run(std::stop_token stop);

  std::string conninfo_;
  std::string table_;
  std::string aggregatetype_;
  int aggregates_;
  std::vector<TxnPlan> plan_;
  std::chrono::milliseconds duration_;
  std::atomic<std::int64_t> committed_events_{0};
  std::atomic<int> failed_transactions_{0};
  std::atomic<bool> done_{false};
  mutable std::mutex mutex_;
  std::vector<CommittedTxn> commits_;
  std::exception_ptr error_;
  std::jthread thread_;
};

// ---- checks ----------------------------------------------------------------------------------

struct CommittedRow {
  std::int64_t seq = 0;
  std::string aggregateid;
};

struct DeliveryCheck {
  std::size_t records = 0;
  std::size_t distinct = 0;
  std::size_t duplicates = 0;
  std::size_t missing = 0;
  std::size_t ghosts = 0;
  Problems problems;
};

// What a consumer checks: every committed event present, nothing that was not committed (a
// rolled-back "ghost"), each aggregate's first deliveries in commit (seq) order, duplicates
// counted (and each a faithful copy of its first delivery).
DeliveryCheck check_deliveries(const std::vector<Record>& records,
                               const std::unordered_map<std::string, CommittedRow>& rows);

// ---- fixture ---------------------------------------------------------------------------------

// What the slot did while a fault lasted (FaultTest::watch_slot()).
struct SlotWatch {
  // The WAL position before the commit of the second transaction committed after the fault
  // began: nothing at or past it can be in the broker while the fault lasts (the first may have
  // been on its way). Unset when fewer committed.
  std::optional<Lsn> bound;
  Lsn max_confirmed = 0;  // the highest confirmed_flush_lsn seen
  // The slot's walsender at each look that found one. A look may find none while the same
  // walsender goes on (PostgreSQL 18 showed the slot inactive between two looks of one
  // connection, whose pid was the same before and after): a new connection is a new pid.
  std::set<std::string> walsender_pids;
  std::optional<std::string> last_walsender;  // at the last look (nullopt: none)
  std::size_t samples = 0;
  bool ended = false;  // `until` held (else the watch timed out)
};

// The end-to-end fixture (tests/support) for fault tests: table outbox_ft_<suffix> with a seq
// column (ground truth, unmapped), one aggregate type, relays without a metrics listener (several
// run at once); TearDown also joins the workloads first.
class FaultTest : public E2eTest {
 protected:
  FaultTest() : E2eTest({"ft", {"Fault"}, OUTBOX_TEST_LOG_DIR}) {}
  void SetUp() override;
  void TearDown() override;

  // id uuid, aggregatetype, aggregateid, type, payload jsonb, seq bigint.
  void create_outbox_table();
  // The outbox table with a time column too, created_at (--gap-repair-column's, reconcile's).
  void create_outbox_table_with_time();
  // A slot lost while the relay was down: the table with its time column, a relay started with
  // `flags` that delivers `delivered` events over `aggregates` aggregates (seq 1 on; the slot
  // confirmed through them) and stops, then the slot dropped. Use with ASSERT_NO_FATAL_FAILURE.
  void deliver_then_drop_slot(const std::vector<std::string>& flags, int aggregates, int delivered);
  // The relay exits with `code` within a minute; its log in `log`. Use with
  // ASSERT_NO_FATAL_FAILURE.
  void expect_exit(RelayProcess& relay, int code, std::string& log);
  // seq and aggregateid of every row by id (lighter than committed_rows() for big workloads).
  std::unordered_map<std::string, CommittedRow> committed_seqs();
  // Prints a figure and records it in the test's XML properties.
  void figure(const std::string& name, const std::string& value);
  void figure(const std::string& name, std::int64_t value);
  // After a load: every committed event (`expected_rows` of them unless 0) in Kafka within
  // `timeout`, the slot confirmed through the load's end, read to the high watermark, nothing
  // missing, no ghost, per-aggregate order; the duplicates figured and left in `check` for the
  // caller's own bound. Use with ASSERT_NO_FATAL_FAILURE.
  void expect_every_event_delivered(KafkaReader& reader, std::chrono::seconds timeout,
                                    DeliveryCheck& check, std::size_t expected_rows = 0);
  Workload& start_workload(std::vector<TxnPlan> plan, std::chrono::milliseconds duration,
                           int aggregates = 200);
  // Sets the server's wal_sender_timeout (empty: its default) and waits until a new session
  // sees it. Use with ASSERT_NO_FATAL_FAILURE.
  void set_wal_sender_timeout(const std::string& value);
  // The pid of the walsender serving the slot, if one is active.
  std::optional<std::string> walsender_pid();
  // Watches the slot every `poll` while a fault lasts, until `until` holds or `timeout` passed:
  // what it confirmed, its walsender, and the bound from `load`'s commits after
  // `commits_at_start` (see SlotWatch).
  SlotWatch watch_slot(const Workload& load, std::size_t commits_at_start,
                       const std::function<bool()>& until, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds poll);
  // The start of a story with the broker at fault: Kafka runs, the outbox table is made, and a
  // relay started with `args` streams (`relay`). Use with ASSERT_NO_FATAL_FAILURE.
  void start_relay_beside_broker(const std::vector<std::string>& args, RelayProcess*& relay);
  // Restarts PostgreSQL under the relay (`pg_ctl -m <mode> restart`, output to `services_log`)
  // and waits until the relay, alive, streams again by itself; the restart's time and the time
  // back to streaming are figured. Use with ASSERT_NO_FATAL_FAILURE.
  void restart_pg_under(RelayProcess& relay, const std::string& mode,
                        const std::string& services_log);
  // What a user checks of the watch: a transaction committed `during` the fault, and the slot
  // confirmed nothing past it while the broker could not have stored it. Use with
  // ASSERT_NO_FATAL_FAILURE.
  void expect_slot_held(const SlotWatch& watch, const std::string& during);

  std::string aggregatetype_;  // aggregatetypes_[0]
  std::string topic_;          // topics_[0]
  std::vector<std::unique_ptr<Workload>> workloads_;
};

}  // namespace outbox_test::fault
