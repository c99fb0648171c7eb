// The end-to-end fixture: the real outbox-relay binary against the real PostgreSQL and Kafka
// that scripts/test.sh starts. Every test has its own table, slot, publication and topics
// (unique suffix). Included by each integration test file; everything in it is internal to
// the including file.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

constexpr int kAggregates = 50;
constexpr int kAggregateTypes = 3;
// Slack between the test's wall clock around COMMIT and the commit time the relay stamps.
constexpr std::int64_t kTimestampSlackMs = 2000;

// One committed outbox row as PostgreSQL prints it.
struct OutboxRow {
  std::string aggregatetype;
  std::string aggregateid;
  std::string type;
  std::string payload;  // payload::text
  std::int64_t seq = 0;
};

// Collects mismatches instead of flooding the output with thousands of failed EXPECTs.
class Problems {
 public:
  void add(const std::string& text) {
    if (texts_.size() < 20) texts_.push_back(text);
    ++count_;
  }
  std::size_t count() const { return count_; }
  std::string describe() const {
    std::string out = std::to_string(count_) + " problem(s), first ones:\n";
    for (const auto& text : texts_) out += "  " + text + "\n";
    return out;
  }

 private:
  std::vector<std::string> texts_;
  std::size_t count_ = 0;
};

std::string describe(const Record& record) {
  std::ostringstream out;
  out << record.topic << "/" << record.partition << "@" << record.offset
      << " key=" << record.key.value_or("(null)") << " value=" << record.value;
  for (const auto& [name, value] : record.headers) out << " " << name << "=" << value;
  return out.str();
}

// `conninfo` with keyword=value added, for both forms libpq takes (a later keyword wins).
std::string with_conninfo_param(const std::string& conninfo, const std::string& keyword,
                                const std::string& value) {
  const bool uri = conninfo.rfind("postgresql://", 0) == 0 || conninfo.rfind("postgres://", 0) == 0;
  if (!uri) return conninfo + " " + keyword + "=" + value;
  return conninfo + (conninfo.find('?') == std::string::npos ? "?" : "&") + keyword + "=" + value;
}

// User + system CPU seconds a process has used so far (/proc/PID/stat), -1 when unreadable.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close_paren + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  // After the command: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Records in Kafka order: by topic, partition, offset.
std::vector<const Record*> in_kafka_order(const std::vector<Record>& records) {
  std::vector<const Record*> sorted;
  sorted.reserve(records.size());
  for (const auto& record : records) sorted.push_back(&record);
  std::sort(sorted.begin(), sorted.end(), [](const Record* a, const Record* b) {
    return std::tie(a->topic, a->partition, a->offset) <
           std::tie(b->topic, b->partition, b->offset);
  });
  return sorted;
}

// A read_until predicate: true once `target` distinct `id` headers have been read. Incremental, so
// polling 50,000 records stays cheap.
class DistinctIds {
 public:
  explicit DistinctIds(std::size_t target) : target_(target) {}
  bool operator()(const std::vector<Record>& records) {
    for (; seen_records_ < records.size(); ++seen_records_) {
      auto it = records[seen_records_].headers.find("id");
      if (it != records[seen_records_].headers.end()) ids_.insert(it->second);
    }
    return ids_.size() >= target_;
  }
  std::size_t count() const { return ids_.size(); }

 private:
  std::size_t target_;
  std::size_t seen_records_ = 0;
  std::unordered_set<std::string> ids_;
};

class RelayIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      const Services services = require_services();
      conninfo_ = services.conninfo;
      brokers_ = services.brokers;
      relay_bin_ = services.relay_bin;
    } catch (const std::exception& e) {
      GTEST_FAIL() << e.what();
    }
    suffix_ = unique_suffix();
    table_ = "outbox_it_" + suffix_;
    slot_ = "it_" + suffix_;
    publication_ = "it_" + suffix_;
    for (const char* name : {"Order", "Customer", "Invoice"}) {
      aggregatetypes_.push_back(name + suffix_);
      topics_.push_back("outbox.event." + aggregatetypes_.back());
    }
    pg_ = std::make_unique<PgClient>(conninfo_);
  }

  void TearDown() override {
    for (auto& relay : relays_) {
      if (relay->is_running() && !relay->terminate(10s)) relay->kill9();
    }
    if (HasFailure()) {
      for (auto& relay : relays_) {
        std::cerr << "---- relay log " << relay->log_path() << " (last lines) ----\n"
                  << tail_file(relay->log_path(), 60);
      }
    }
    if (!pg_) return;
    // The slot only after the relay is gone: an abandoned slot would hold WAL forever.
    try {
      pg_->drop_slot_if_exists(slot_);
      pg_->exec("DROP PUBLICATION IF EXISTS " + publication_);
      pg_->exec("DROP TABLE IF EXISTS public." + table_);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup: " << e.what();
    }
  }

  std::string qualified_table() const { return "public." + table_; }

  void create_outbox_table() {
    pg_->exec("CREATE TABLE " + qualified_table() +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)");
  }

  // Every test names its own table, slot and publication; status updates every second so the
  // confirmed position can be checked within seconds.
  std::vector<std::string> relay_args() const {
    std::vector<std::string> args;
    for (const auto& [flag, value] : {std::pair{"--pg", conninfo_},
                                      {"--brokers", brokers_},
                                      {"--slot", slot_},
                                      {"--publication", publication_},
                                      {"--table", qualified_table()},
                                      {"--status-interval", std::string("1s")}}) {
      args.push_back(flag);
      args.push_back(value);
    }
    return args;
  }

  std::string log_path(const std::string& what) const {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::string(OUTBOX_TEST_LOG_DIR) + "/" + info->name() + "_" + suffix_ + "_" + what +
           ".log";
  }

  RelayProcess& start_relay(std::vector<std::string> extra_args = {}) {
    auto args = relay_args();
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    relays_.push_back(std::make_unique<RelayProcess>(
        relay_bin_, args, log_path("relay" + std::to_string(relays_.size() + 1))));
    std::cerr << "relay log: " << relays_.back()->log_path() << "\n";
    return *relays_.back();
  }

  // The relay created its slot and reached a consistent point (a slot has no confirmed position
  // before that) and streams from it. Rows committed from now on must all reach Kafka.
  void wait_until_streaming(RelayProcess& relay) {
    const bool ready = wait_until(
        [&] {
          return !relay.is_running() ||
                 (pg_->slot_confirmed_flush(slot_).has_value() && pg_->slot_active(slot_));
        },
        60s, 100ms);
    ASSERT_TRUE(relay.is_running())
        << "relay exited early with code " << relay.wait_exit(0ms).value_or(-1);
    ASSERT_TRUE(ready) << "slot " << slot_ << " not created and streaming within 60 s";
  }

  // Waits until the slot's confirmed position reached `lsn`.
  void expect_confirmed_reaches(Lsn lsn, std::chrono::milliseconds timeout) {
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
  }

  // All rows of the outbox table by id.
  std::unordered_map<std::string, OutboxRow> committed_rows() {
    std::unordered_map<std::string, OutboxRow> rows;
    for (auto& row : pg_->query("SELECT id::text, aggregatetype, aggregateid, type, payload::text,"
                                " (payload->>'seq')::bigint FROM " +
                                qualified_table())) {
      rows.emplace(*row[0], OutboxRow{*row[1], *row[2], *row[3], *row[4], std::stoll(*row[5])});
    }
    return rows;
  }

  // What a consumer checks on each record against the row it came from: topic from the template,
  // key, value as PostgreSQL prints it, headers, and that Java clients would pick the same
  // partition for the key.
  void check_record_matches_row(const Record& record, const OutboxRow& row, KafkaReader& reader,
                                Problems& problems) {
    if (record.topic != "outbox.event." + row.aggregatetype) {
      problems.add("topic for " + row.aggregatetype + ": " + describe(record));
    }
    if (record.key != row.aggregateid)
      problems.add("key != " + row.aggregateid + ": " + describe(record));
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

  // SIGTERM: the relay stops within 40 s with exit code 0.
  static void expect_graceful_stop(RelayProcess& relay) {
    const auto exit_code = relay.terminate(40s);
    ASSERT_TRUE(exit_code.has_value()) << "relay did not stop within 40 s of SIGTERM";
    EXPECT_EQ(*exit_code, 0) << "graceful stop on SIGTERM";
  }

  // Calls visit(record, id, row) for each record, in Kafka order, whose id header names a
  // committed row; a record that names none is a problem.
  template <typename Visit>
  static void for_each_committed_record(KafkaReader& reader,
                                        const std::unordered_map<std::string, OutboxRow>& rows,
                                        Problems& problems, Visit visit) {
    for (const Record* record : in_kafka_order(reader.records())) {
      auto id = record->headers.find("id");
      auto row = id == record->headers.end() ? rows.end() : rows.find(id->second);
      if (row == rows.end()) {
        problems.add("not a committed event: " + describe(*record));
        continue;
      }
      visit(*record, id->second, row->second);
    }
  }

  // Every record in Kafka is a committed row, matches it, and each aggregate's records are in
  // commit order.
  Problems check_committed_in_order(KafkaReader& reader,
                                    const std::unordered_map<std::string, OutboxRow>& rows) {
    Problems problems;
    std::map<std::string, std::int64_t> last_seq_by_aggregate;
    for_each_committed_record(
        reader, rows, problems,
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

  std::string conninfo_;
  std::string brokers_;
  std::string relay_bin_;
  std::string suffix_;
  std::string table_;
  std::string slot_;
  std::string publication_;
  std::vector<std::string> aggregatetypes_;
  std::vector<std::string> topics_;
  std::unique_ptr<PgClient> pg_;
  std::vector<std::unique_ptr<RelayProcess>> relays_;
};

}  // namespace
}  // namespace outbox_test
