#include "fault_fixture.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <tuple>

namespace outbox_test::fault {

double workload_scale() {
  const char* text = std::getenv("OUTBOX_FAULT_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  const double scale = std::atof(text);
  return scale > 0 ? std::min(scale, 1.0) : 1.0;
}

int scaled(int n, int minimum) {
  return std::max(minimum, static_cast<int>(std::lround(n * workload_scale())));
}

// ---- services --------------------------------------------------------------------------------

pid_t kafka_pid() {
  const char* file = std::getenv("OUTBOX_KAFKA_PID_FILE");
  if (file == nullptr) return -1;
  std::ifstream in(file);
  pid_t pid = -1;
  if (!(in >> pid) || pid <= 0 || ::kill(pid, 0) != 0) return -1;
  return pid;
}

namespace {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

int run_shell(const std::string& command, const std::string& log_path) {
  std::filesystem::create_directories(std::filesystem::path(log_path).parent_path());
  const int status =
      std::system((command + " >>" + shell_quote(log_path) + " 2>&1 </dev/null").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int run_script(const std::string& name, const std::string& log_path) {
  return run_shell(shell_quote(std::string(OUTBOX_SOURCE_DIR) + "/scripts/" + name), log_path);
}

bool kafka_up(const std::string& log_path) {
  if (pid_t pid = kafka_pid(); pid > 0) ::kill(pid, SIGCONT);
  return run_script("kafka-up.sh", log_path) == 0;
}

bool pg_up(const std::string& log_path) { return run_script("pg-up.sh", log_path) == 0; }

bool pg_restart(const std::string& mode, const std::string& log_path) {
  const std::string pg_ctl = require_env("OUTBOX_PG_BIN") + "/pg_ctl -D " +
                             require_env("OUTBOX_PG_DATA") + " -m " + mode + " restart -w -t 60";
  // pg_ctl keeps the server's output on its stdout: send it to the server's own log instead.
  return run_shell("su postgres -c " + shell_quote(pg_ctl + " >/dev/null"), log_path) == 0;
}

BrokerPause::BrokerPause() {
  const pid_t pid = kafka_pid();
  if (pid > 0 && ::kill(pid, SIGSTOP) == 0) pid_ = pid;
}

void BrokerPause::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
  pid_ = -1;
}

std::int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::int64_t vm_hwm_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

std::size_t count_in_file(const std::string& path, const std::string& needle) {
  const std::string text = read_file(path);
  std::size_t count = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++count;
  }
  return count;
}

// ---- workload --------------------------------------------------------------------------------

std::vector<TxnPlan> plan_mixed(int events, int max_size, double rollback_share,
                                std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(0.0, std::log(static_cast<double>(max_size)));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<TxnPlan> plan;
  std::int64_t seq = 1;
  int committed = 0;
  bool first = true;
  while (committed < events) {
    // The first transaction is the largest, so the sizes surely span 1 .. max_size.
    int size = first ? max_size : static_cast<int>(std::lround(std::exp(log_size(rng))));
    size = std::clamp(size, 1, events - committed);
    first = false;
    if (coin(rng) < rollback_share) {
      plan.push_back({seq, std::max(1, size / 2), true});
      seq += plan.back().size;
    }
    plan.push_back({seq, size, false});
    seq += size;
    committed += size;
  }
  return plan;
}

std::vector<TxnPlan> plan_uniform(int transactions, int size, std::int64_t first_seq) {
  std::vector<TxnPlan> plan;
  for (int t = 0; t < transactions; ++t) plan.push_back({first_seq + std::int64_t{t} * size, size});
  return plan;
}

Workload::Workload(std::string conninfo, std::string table, std::string aggregatetype,
                   int aggregates, std::vector<TxnPlan> plan, std::chrono::milliseconds duration)
    : conninfo_(std::move(conninfo)),
      table_(std::move(table)),
      aggregatetype_(std::move(aggregatetype)),
      aggregates_(aggregates),
      plan_(std::move(plan)),
      duration_(duration) {}

Workload::~Workload() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void Workload::start() {
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

void Workload::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
}

bool Workload::wait_committed(std::int64_t events, std::chrono::milliseconds timeout) {
  return wait_until([&] { return done_ || committed_events_ >= events; }, timeout, 10ms);
}

std::vector<CommittedTxn> Workload::commits() const {
  std::lock_guard lock(mutex_);
  return commits_;
}

std::string Workload::insert_sql(const std::string& table, const std::string& aggregatetype,
                                 int aggregates, std::int64_t first_seq, int size, bool ghost) {
  return "INSERT INTO " + table + " (aggregatetype, aggregateid, type, payload, seq) SELECT '" +
         aggregatetype + "', 'agg-' || (g % " + std::to_string(aggregates) +
         "), 'Event' || (g % 4), " +
         (ghost ? "jsonb_build_object('seq', g, 'ghost', true)" : "jsonb_build_object('seq', g)") +
         ", g FROM generate_series(" + std::to_string(first_seq) + "::bigint, " +
         std::to_string(first_seq + size - 1) + "::bigint) AS g ORDER BY g";
}

void Workload::run(std::stop_token stop) {
  try {
    std::unique_ptr<PgClient> pg;
    std::int64_t total = 0;
    for (const auto& txn : plan_) total += txn.size;
    std::int64_t planned = 0;
    const auto started = Clock::now();
    for (const auto& txn : plan_) {
      if (stop.stop_requested()) break;
      // Pacing (a load shape, not a wait): event k is committed about k/total into duration_.
      std::this_thread::sleep_until(started +
                                    duration_ * planned / std::max<std::int64_t>(total, 1));
      planned += txn.size;
      if (!pg) {
        // PostgreSQL may be restarting: keep trying for a while, then give up loudly.
        const bool connected = wait_until(
            [&] {
              try {
                pg = std::make_unique<PgClient>(conninfo_);
                return true;
              } catch (const std::exception&) {
                return false;
              }
            },
            120s, 100ms);
        if (!connected) throw std::runtime_error("workload: PostgreSQL unreachable for 120 s");
      }
      try {
        pg->exec("BEGIN; " + insert_sql(table_, aggregatetype_, aggregates_, txn.first_seq,
                                        txn.size, txn.rollback));
        const Lsn before = parse_lsn(*pg->scalar("SELECT pg_current_wal_insert_lsn()::text"));
        pg->exec(txn.rollback ? "ROLLBACK" : "COMMIT");
        if (!txn.rollback) {
          std::lock_guard lock(mutex_);
          commits_.push_back({txn.first_seq, txn.size, before, Clock::now()});
          committed_events_ += txn.size;
        }
      } catch (const std::exception&) {
        // Connection lost (restart): whether a COMMIT in flight took effect is read back from
        // the table at the end.
        ++failed_transactions_;
        pg.reset();
      }
    }
  } catch (...) {
    error_ = std::current_exception();
  }
  done_ = true;
}

// ---- checks ----------------------------------------------------------------------------------

DeliveryCheck check_deliveries(const std::vector<Record>& records,
                               const std::unordered_map<std::string, CommittedRow>& rows) {
  DeliveryCheck check;
  check.records = records.size();
  const std::vector<const Record*> sorted = in_kafka_order(records);
  std::unordered_map<std::string, const Record*> first_delivery;
  std::unordered_map<std::string, std::int64_t> last_first_seq;
  for (const Record* record : sorted) {
    auto id = record->headers.find("id");
    auto row = id == record->headers.end() ? rows.end() : rows.find(id->second);
    if (row == rows.end()) {
      ++check.ghosts;
      check.problems.add("not a committed event (rolled back or unknown): " + describe(*record));
      continue;
    }
    auto [original, first] = first_delivery.emplace(id->second, record);
    if (!first) {
      ++check.duplicates;
      const Record& copy = *original->second;
      if (copy.value != record->value || copy.key != record->key || copy.topic != record->topic ||
          copy.headers != record->headers || copy.timestamp_ms != record->timestamp_ms) {
        check.problems.add("duplicate differs from its original " + describe(copy) + ": " +
                           describe(*record));
      }
      continue;
    }
    if (record->key != row->second.aggregateid) {
      check.problems.add("key is not the aggregate id " + row->second.aggregateid + ": " +
                         describe(*record));
    }
    auto last = last_first_seq.find(row->second.aggregateid);
    if (last != last_first_seq.end() && last->second >= row->second.seq) {
      check.problems.add("first deliveries of " + row->second.aggregateid +
                         " not in commit order: seq " + std::to_string(row->second.seq) +
                         " after " + std::to_string(last->second) + ": " + describe(*record));
    }
    last_first_seq[row->second.aggregateid] = row->second.seq;
  }
  check.distinct = first_delivery.size();
  for (const auto& [id, row] : rows) {
    if (first_delivery.count(id) == 0) {
      ++check.missing;
      check.problems.add("committed event seq " + std::to_string(row.seq) + " id " + id +
                         " not in Kafka");
    }
  }
  return check;
}

// ---- fixture ---------------------------------------------------------------------------------

void FaultTest::SetUp() {
  E2eTest::SetUp();
  if (HasFatalFailure()) return;
  aggregatetype_ = aggregatetypes_.at(0);
  topic_ = topics_.at(0);
  metrics_addr_ = "off";
}

void FaultTest::TearDown() {
  for (auto& workload : workloads_) {
    try {
      workload->join();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "workload: " << e.what();
    }
  }
  E2eTest::TearDown();
}

void FaultTest::create_outbox_table() { E2eTest::create_outbox_table(", seq bigint NOT NULL"); }

void FaultTest::create_outbox_table_with_time() {
  E2eTest::create_outbox_table(
      ", seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now()");
}

void FaultTest::deliver_then_drop_slot(const std::vector<std::string>& flags, int aggregates,
                                       int delivered) {
  create_outbox_table_with_time();
  RelayProcess& relay = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(
      Workload::insert_sql(qualified_table(), aggregatetype_, aggregates, 1, delivered, false));
  ASSERT_TRUE(expect_confirmed_reaches(pg_->current_wal_lsn(), 60s))
      << tail_file(relay.log_path(), 20);
  expect_graceful_stop(relay);
  pg_->drop_slot_if_exists(slot_);
}

void FaultTest::expect_exit(RelayProcess& relay, int code, std::string& log) {
  const auto exited = relay.wait_exit(60s);
  ASSERT_TRUE(exited.has_value()) << "the relay did not stop\n" << tail_file(relay.log_path(), 20);
  EXPECT_EQ(*exited, code) << tail_file(relay.log_path(), 20);
  log = read_file(relay.log_path());
}

std::unordered_map<std::string, CommittedRow> FaultTest::committed_seqs() {
  std::unordered_map<std::string, CommittedRow> rows;
  for (auto& row : pg_->query("SELECT id::text, seq, aggregateid FROM " + qualified_table())) {
    rows.emplace(*row[0], CommittedRow{std::stoll(*row[1]), *row[2]});
  }
  return rows;
}

void FaultTest::figure(const std::string& name, const std::string& value) {
  std::cout << "FIGURE " << name << " = " << value << std::endl;
  RecordProperty(name, value);
}

void FaultTest::figure(const std::string& name, std::int64_t value) {
  figure(name, std::to_string(value));
}

void FaultTest::expect_every_event_delivered(KafkaReader& reader, std::chrono::seconds timeout,
                                             DeliveryCheck& check, std::size_t expected_rows) {
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  const auto rows = committed_seqs();
  if (expected_rows != 0) ASSERT_EQ(rows.size(), expected_rows);
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), timeout))
      << all.count() << " of " << rows.size() << " events in Kafka within " << timeout.count()
      << " s";
  EXPECT_TRUE(expect_confirmed_reaches(lsn_after_load, 60s));
  EXPECT_TRUE(reader.read_to_end()) << "the topic could not be read to its end";
  check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.ghosts, 0u);
  figure("events", static_cast<std::int64_t>(rows.size()));
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
}

Workload& FaultTest::start_workload(std::vector<TxnPlan> plan, std::chrono::milliseconds duration,
                                    int aggregates) {
  workloads_.push_back(std::make_unique<Workload>(conninfo_, qualified_table(), aggregatetype_,
                                                  aggregates, std::move(plan), duration));
  workloads_.back()->start();
  return *workloads_.back();
}

void FaultTest::set_wal_sender_timeout(const std::string& value) {
  if (value.empty()) {
    pg_->exec("ALTER SYSTEM RESET wal_sender_timeout");
  } else {
    pg_->exec("ALTER SYSTEM SET wal_sender_timeout = '" + value + "'");
  }
  pg_->query("SELECT pg_reload_conf()");
  ASSERT_TRUE(wait_until(
      [&] {
        PgClient fresh(conninfo_);
        return fresh.scalar("SHOW wal_sender_timeout") == (value.empty() ? "1min" : value);
      },
      10s))
      << "wal_sender_timeout did not become " << (value.empty() ? "its default" : value);
}

std::optional<std::string> FaultTest::walsender_pid() {
  return pg_->scalar("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = $1",
                     {slot_});
}

SlotWatch FaultTest::watch_slot(const Workload& load, std::size_t commits_at_start,
                                const std::function<bool()>& until,
                                std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  SlotWatch watch;
  watch.ended = wait_until(
      [&] {
        if (!watch.bound) {
          const auto commits = load.commits();
          if (commits.size() > commits_at_start + 1) {
            watch.bound = commits[commits_at_start + 1].before_commit;
          }
        }
        if (auto confirmed = pg_->slot_confirmed_flush(slot_)) {
          watch.max_confirmed = std::max(watch.max_confirmed, *confirmed);
        }
        watch.last_walsender = walsender_pid();
        if (watch.last_walsender) watch.walsender_pids.insert(*watch.last_walsender);
        ++watch.samples;
        return until();
      },
      timeout, poll);
  return watch;
}

void FaultTest::start_relay_beside_broker(const std::vector<std::string>& args,
                                          RelayProcess*& relay) {
  ASSERT_GT(kafka_pid(), 0) << "Kafka is not running (OUTBOX_KAFKA_PID_FILE)";
  create_outbox_table();
  relay = &start_relay(args);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
}

void FaultTest::restart_pg_under(RelayProcess& relay, const std::string& mode,
                                 const std::string& services_log) {
  const auto restart_at = Clock::now();
  ASSERT_TRUE(pg_restart(mode, services_log))
      << "pg_ctl -m " << mode << " restart failed; see " << services_log;
  figure("pg_restart_ms", ms_since(restart_at));
  ASSERT_TRUE(reconnect_pg());
  // The relay finds the server again by itself and holds the slot.
  const bool back =
      wait_until([&] { return !relay.is_running() || pg_->slot_active(slot_); }, 60s, 50ms);
  ASSERT_TRUE(relay.is_running()) << "relay exited with " << relay.wait_exit(0ms).value_or(-1)
                                  << " after a PostgreSQL restart";
  ASSERT_TRUE(back) << "relay did not stream again within 60 s of the restart";
  figure("ms_from_restart_to_streaming", ms_since(restart_at));
}

void FaultTest::expect_slot_held(const SlotWatch& watch, const std::string& during) {
  ASSERT_TRUE(watch.bound.has_value()) << "no transaction committed " << during;
  EXPECT_LE(watch.max_confirmed, *watch.bound)
      << "slot " << slot_ << " confirmed " << format_lsn(watch.max_confirmed) << " " << during
      << ", past a transaction committed after it began (commit after " << format_lsn(*watch.bound)
      << ")";
}

}  // namespace outbox_test::fault
