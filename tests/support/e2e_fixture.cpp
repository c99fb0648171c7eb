#include "outbox_test/e2e_fixture.hpp"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <optional>

namespace outbox_test {

using namespace std::chrono_literals;

void E2eTest::SetUp() {
  try {
    const Services services = require_services(!names_.nats && !names_.eventbridge && !names_.sqs);
    conninfo_ = services.conninfo;
    brokers_ = services.brokers;
    relay_bin_ = services.relay_bin;
    if (names_.nats) nats_ = require_env("OUTBOX_NATS");
  } catch (const std::exception& e) {
    GTEST_FAIL() << e.what();
  }
  suffix_ = unique_suffix();
  table_ = "outbox_" + names_.prefix + "_" + suffix_;
  slot_ = names_.prefix + "_" + suffix_;
  publication_ = names_.prefix + "_" + suffix_;
  for (const auto& name : names_.aggregatetypes) {
    aggregatetypes_.push_back(name + suffix_);
    topics_.push_back("outbox.event." + aggregatetypes_.back());
  }
  ASSERT_NO_THROW(pg_ = std::make_unique<PgClient>(conninfo_));
}

void E2eTest::TearDown() {
  for (auto& relay : relays_) {
    if (!relay->is_running()) continue;
    ::kill(relay->pid(), SIGCONT);  // a test may have left one stopped
    if (!relay->terminate(15s)) relay->kill9();
  }
  // A cancelled operation that no stop, failure or rewind owned is a bug in any test (the relay
  // logs it and reconnects, so the test's own checks may still pass).
  for (auto& relay : relays_) {
    const std::string log = read_file(relay->log_path());
    EXPECT_EQ(log.find("event=unowned_cancel"), std::string::npos)
        << "relay log " << relay->log_path() << " holds event=unowned_cancel";
  }
  if (HasFailure()) {
    for (auto& relay : relays_) {
      std::cerr << "---- relay log " << relay->log_path() << " (last lines) ----\n"
                << tail_file(relay->log_path(), 60);
    }
  }
  if (!pg_) return;  // SetUp failed before connecting: nothing was created
  // The connection may date from before a PostgreSQL restart.
  if (!reconnect_pg(60s)) {
    ADD_FAILURE() << "cleanup: PostgreSQL unreachable; slot " << slot_ << " left behind";
    return;
  }
  // The slot only after the relays are gone: an abandoned slot would hold WAL forever.
  try {
    pg_->drop_slot_if_exists(slot_);
    pg_->exec("DROP PUBLICATION IF EXISTS " + publication_);
    for (const auto& publication : extra_publications_) {
      pg_->exec("DROP PUBLICATION IF EXISTS " + publication);
    }
    pg_->exec("DROP TABLE IF EXISTS " + qualified_table() + " CASCADE");
    for (const auto& table : extra_tables_) pg_->exec("DROP TABLE IF EXISTS " + table + " CASCADE");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "cleanup: " << e.what();
  }
}

void E2eTest::create_outbox_table(const std::string& extra_columns) {
  pg_->exec("CREATE TABLE " + qualified_table() +
            " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
            " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL" +
            extra_columns + ")");
}

std::vector<std::string> E2eTest::relay_args() const {
  std::vector<std::string> args = {"--pg",
                                   conninfo_,
                                   names_.eventbridge ? "--eventbridge"
                                   : names_.sqs       ? "--sqs"
                                   : names_.nats      ? "--nats"
                                                      : "--brokers",
                                   names_.eventbridge ? eventbridge_bus_
                                   : names_.sqs       ? sqs_queue_url_
                                   : names_.nats      ? nats_
                                                      : brokers_,
                                   "--slot",
                                   slot_,
                                   "--publication",
                                   publication_,
                                   "--table",
                                   qualified_table(),
                                   "--status-interval",
                                   status_interval_};
  if (!metrics_addr_.empty()) {
    args.push_back("--metrics-addr");
    args.push_back(metrics_addr_);
  }
  return args;
}

std::string E2eTest::log_path(const std::string& what) const {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return names_.log_dir + "/" + name + "_" + suffix_ + "_" + what + ".log";
}

RelayProcess& E2eTest::start_relay(std::vector<std::string> extra_args) {
  auto args = relay_args();
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  relays_.push_back(std::make_unique<RelayProcess>(
      relay_bin_, args, log_path("relay" + std::to_string(relays_.size() + 1))));
  std::cerr << "relay log: " << relays_.back()->log_path() << "\n";
  return *relays_.back();
}

void E2eTest::wait_until_streaming(RelayProcess& relay, std::chrono::milliseconds timeout) {
  const bool ready = wait_until(
      [&] {
        // This relay's own log: the slot may be active for another relay (a standby that won).
        return !relay.is_running() ||
               (read_file(relay.log_path()).find("event=streaming") != std::string::npos &&
                pg_->slot_confirmed_flush(slot_).has_value() && pg_->slot_active(slot_));
      },
      timeout, 50ms);
  ASSERT_TRUE(relay.is_running()) << "relay exited early with code "
                                  << relay.wait_exit(0ms).value_or(-1) << "\n"
                                  << tail_file(relay.log_path(), 20);
  ASSERT_TRUE(ready) << "slot " << slot_ << " not created and streaming within " << timeout.count()
                     << " ms";
}

bool E2eTest::expect_confirmed_reaches(Lsn lsn, std::chrono::milliseconds timeout) {
  std::optional<Lsn> confirmed;
  const bool reached = wait_until(
      [&] {
        confirmed = pg_->slot_confirmed_flush(slot_);
        return confirmed && *confirmed >= lsn;
      },
      timeout, 100ms);
  EXPECT_TRUE(reached) << "slot " << slot_ << " confirmed_flush_lsn "
                       << (confirmed ? format_lsn(*confirmed) : "(none)") << " did not reach "
                       << format_lsn(lsn) << " within " << timeout.count() << " ms";
  return reached;
}

void E2eTest::expect_graceful_stop(RelayProcess& relay) {
  const auto exit_code = relay.terminate(40s);
  ASSERT_TRUE(exit_code.has_value()) << "relay did not stop within 40 s of SIGTERM";
  EXPECT_EQ(*exit_code, 0) << "graceful stop on SIGTERM";
}

std::unordered_map<std::string, OutboxRow> E2eTest::committed_rows() {
  std::unordered_map<std::string, OutboxRow> rows;
  for (auto& row : pg_->query("SELECT id::text, aggregatetype, aggregateid, type, payload::text, " +
                              seq_sql_ + " FROM " + qualified_table())) {
    rows.emplace(*row[0], OutboxRow{*row[1], *row[2], *row[3], *row[4], std::stoll(*row[5])});
  }
  return rows;
}

bool E2eTest::reconnect_pg(std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        try {
          auto fresh = std::make_unique<PgClient>(conninfo_);
          fresh->exec("SELECT 1");
          pg_ = std::move(fresh);
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      timeout, 200ms);
}

void E2eTest::check_record_matches_row(const Record& record, const OutboxRow& row,
                                       KafkaReader& reader, Problems& problems) {
  if (record.topic != "outbox.event." + row.aggregatetype) {
    problems.add("topic for " + row.aggregatetype + ": " + describe(record));
  }
  if (record.key != row.aggregateid) {
    problems.add("key != " + row.aggregateid + ": " + describe(record));
  }
  if (record.value != row.payload)
    problems.add("value != " + row.payload + ": " + describe(record));
  auto type = record.headers.find("type");
  if (type == record.headers.end() || type->second != row.type) {
    problems.add("type header != " + row.type + ": " + describe(record));
  }
  const auto partitions = reader.partition_count(record.topic);
  if (record.key && partitions && record.partition != java_partition(*record.key, *partitions)) {
    problems.add("partition differs from the Java client's (murmur2 of the key " +
                 std::to_string(java_partition(*record.key, *partitions)) +
                 "): " + describe(record));
  }
}

Problems E2eTest::check_committed_in_order(KafkaReader& reader,
                                           const std::unordered_map<std::string, OutboxRow>& rows) {
  Problems problems;
  std::map<std::string, std::int64_t> last_seq_by_aggregate;
  for_each_committed_record(reader, rows, problems,
                            [&](const Record& record, const std::string&, const OutboxRow& row) {
                              check_record_matches_row(record, row, reader, problems);
                              auto last = last_seq_by_aggregate.find(row.aggregateid);
                              if (last != last_seq_by_aggregate.end() && last->second >= row.seq) {
                                problems.add("not in commit order: " + describe(record));
                              }
                              last_seq_by_aggregate[row.aggregateid] = row.seq;
                            });
  return problems;
}

}  // namespace outbox_test
