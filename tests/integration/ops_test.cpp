// Operating the relay as an operator does: scrape /metrics during a workload and check the
// figures against what really happened (events counted in Kafka, the slot's confirmed_flush_lsn
// in PostgreSQL), probe /healthz and /readyz, and manage the slot with the setup, status and drop
// commands of the real binary.
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "outbox/version.hpp"
#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// Sum of every sample of a family (all label sets), as integers.
std::uint64_t sum_of(const std::map<std::string, std::string>& samples, const std::string& name) {
  std::uint64_t total = 0;
  for (const auto& [series, value] : samples) {
    if (series == name || series.rfind(name + "{", 0) == 0) total += std::stoull(value);
  }
  return total;
}

std::optional<std::uint64_t> value_of(const std::map<std::string, std::string>& samples,
                                      const std::string& series) {
  auto it = samples.find(series);
  if (it == samples.end()) return std::nullopt;
  return std::stoull(it->second);
}

// The end-to-end fixture with two aggregate types.
class OpsIntegration : public E2eTest {
 protected:
  OpsIntegration() : E2eTest({"ops", {"OpsOrder", "OpsCustomer"}, OUTBOX_TEST_LOG_DIR}) {}

  // Runs `outbox-relay <args>` to its end (30 s at most); stdout and stderr apart.
  CommandResult command(const std::string& name, const std::vector<std::string>& args) {
    const std::string n = name + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 30s);
  }

  void insert_events(int transactions, int per_transaction, int first_seq) {
    for (int t = 0; t < transactions; ++t) {
      const int from = first_seq + t * per_transaction;
      pg_->query("INSERT INTO public." + table_ +
                     " (aggregatetype, aggregateid, type, payload)"
                     " SELECT (ARRAY['" +
                     aggregatetypes_[0] + "', '" + aggregatetypes_[1] +
                     "'])[g % 2 + 1], 'agg-' || (g % 13), 'Created',"
                     " jsonb_build_object('seq', g, 'pad', repeat('x', (g % 50)::int))"
                     " FROM generate_series($1::bigint, $2::bigint) AS g ORDER BY g",
                 {std::to_string(from), std::to_string(from + per_transaction - 1)});
    }
  }

  int commands_ = 0;
};

// The figures of /metrics agree with Kafka and PostgreSQL: every event counted once by topic,
// bytes equal to the keys and values in Kafka, nothing in flight after quiescence, and the
// confirmed LSN gauge equal to pg_replication_slots.confirmed_flush_lsn.
TEST_F(OpsIntegration, MetricsMatchKafkaAndTheSlot) {
  constexpr int kTransactions = 40;
  constexpr int kPerTransaction = 50;
  constexpr int kEvents = kTransactions * kPerTransaction;

  create_outbox_table();
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay({"--summary-interval", "1s"});

  // Ready means streaming: the slot exists and is held by the relay.
  HttpResult ready;
  ASSERT_TRUE(wait_until(
      [&] {
        ready = http_get(port, "/readyz");
        return ready.status == 200 || !relay.is_running();
      },
      60s, 100ms))
      << "/readyz: " << ready.status << " " << ready.body;
  ASSERT_TRUE(relay.is_running()) << "relay exited with " << relay.wait_exit(0ms).value_or(-1);
  ASSERT_EQ(ready.status, 200) << ready.body;
  EXPECT_TRUE(pg_->slot_active(slot_));
  HttpResult health = http_get(port, "/healthz");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(http_get(port, "/nothing-here").status, 404);

  // A scrape in the middle of the workload is well-formed and never counts more than was sent.
  insert_events(kTransactions / 2, kPerTransaction, 1);
  HttpResult mid = http_get(port, "/metrics");
  ASSERT_EQ(mid.status, 200);
  auto mid_samples = parse_samples(mid.body);
  EXPECT_EQ(sum_of(mid_samples, "outbox_relay_state"), 1u) << mid.body;
  EXPECT_LE(sum_of(mid_samples, "outbox_relay_events_published_total"),
            static_cast<std::uint64_t>(kEvents / 2));
  insert_events(kTransactions / 2, kPerTransaction, kEvents / 2 + 1);

  KafkaReader reader(brokers_, topics_);
  ASSERT_TRUE(
      reader.read_until([&](const auto& records) { return records.size() >= kEvents; }, 120s))
      << reader.records().size() << " of " << kEvents << " events in Kafka within 120 s";
  // Anything more (duplicates) is in Kafka once the slot confirmed the last insert.
  expect_confirmed_reaches(pg_->current_wal_lsn(), 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  std::map<std::string, std::uint64_t> in_kafka_by_topic;
  std::uint64_t kafka_bytes = 0;
  std::set<std::string> ids;
  for (const auto& r : reader.records()) {
    ++in_kafka_by_topic[r.topic];
    kafka_bytes += (r.key ? r.key->size() : 0) + r.value.size();
    ids.insert(r.headers.count("id") ? r.headers.at("id") : "");
  }
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kEvents));

  // Quiescence: nothing in flight, and the gauge equals what PostgreSQL shows for the slot.
  std::map<std::string, std::string> s;
  std::optional<Lsn> slot_confirmed;
  const bool settled = wait_until(
      [&] {
        HttpResult m = http_get(port, "/metrics");
        if (m.status != 200) return false;
        s = parse_samples(m.body);
        slot_confirmed = pg_->slot_confirmed_flush(slot_);
        return value_of(s, "outbox_relay_events_in_flight") == 0u &&
               sum_of(s, "outbox_relay_events_published_total") >= kEvents && slot_confirmed &&
               value_of(s, "outbox_relay_confirmed_lsn") == *slot_confirmed;
      },
      30s, 200ms);
  EXPECT_TRUE(settled) << "confirmed_lsn gauge "
                       << format_lsn(value_of(s, "outbox_relay_confirmed_lsn").value_or(0))
                       << " vs slot " << (slot_confirmed ? format_lsn(*slot_confirmed) : "(none)")
                       << ", in flight " << s["outbox_relay_events_in_flight"];

  for (const auto& topic : topics_) {
    EXPECT_EQ(value_of(s, "outbox_relay_events_published_total{topic=\"" + topic + "\"}"),
              in_kafka_by_topic[topic])
        << topic;
  }
  EXPECT_EQ(sum_of(s, "outbox_relay_events_published_total"), static_cast<std::uint64_t>(kEvents));
  EXPECT_EQ(value_of(s, "outbox_relay_bytes_published_total"), kafka_bytes);
  EXPECT_EQ(value_of(s, "outbox_relay_bytes_in_flight"), 0u);
  EXPECT_EQ(value_of(s, "outbox_relay_commit_to_ack_seconds_count"),
            static_cast<std::uint64_t>(kEvents));
  EXPECT_EQ(value_of(s, "outbox_relay_commit_to_ack_seconds_bucket{le=\"+Inf\"}"),
            static_cast<std::uint64_t>(kEvents));
  EXPECT_GE(value_of(s, "outbox_relay_transactions_confirmed_total").value_or(0),
            static_cast<std::uint64_t>(kTransactions));
  EXPECT_EQ(sum_of(s, "outbox_relay_delivery_errors_total"), 0u);
  EXPECT_EQ(value_of(s, "outbox_relay_dlq_events_total"), 0u);
  EXPECT_EQ(value_of(s, "outbox_relay_reconnects_total"), 0u);
  EXPECT_EQ(value_of(s, "outbox_relay_state{state=\"streaming\"}"), 1u);
  EXPECT_EQ(value_of(s, "outbox_relay_producer_healthy"), 1u);
  EXPECT_GE(value_of(s, "outbox_relay_server_wal_end_lsn").value_or(0),
            value_of(s, "outbox_relay_confirmed_lsn").value_or(1));
  EXPECT_EQ(
      value_of(s, "outbox_relay_info{slot=\"" + slot_ + "\",publication=\"" + publication_ +
                      "\",table=\"public." + table_ + "\",version=\"" OUTBOX_RELAY_VERSION "\"}"),
      1u);
  EXPECT_EQ(http_get(port, "/readyz").status, 200);

  // The summary line names the slot and the figures.
  EXPECT_TRUE(wait_until(
      [&] { return read_file(relay.log_path()).find("event=summary") != std::string::npos; }, 10s))
      << tail_file(relay.log_path(), 20);

  // Stopping: exit 0, and the endpoint goes away with the process.
  EXPECT_EQ(relay.terminate(30s), 0);
  EXPECT_EQ(http_get(port, "/healthz").status, 0);
}

// setup (twice: idempotent) -> status --json shows the slot, exit 0 -> drop refuses without
// --yes -> drop --yes removes both -> status exits 1 for the missing slot.
TEST_F(OpsIntegration, SetupStatusDrop) {
  const std::vector<std::string> where = {"--pg", conninfo_, "--slot", slot_};
  auto with = [&](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<std::string> setup_args =
      with(with({"setup"}, where),
           {"--publication", publication_, "--table", "public." + table_, "--create-table"});

  CommandResult first = command("setup", setup_args);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("table public." + table_ + ": created"), std::string::npos) << first.out;
  // The columns of docs/records.md, created_at being the time column of prune and reconcile.
  EXPECT_EQ(pg_->scalar("SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) ||"
                        " CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END ||"
                        " coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''), ', '"
                        " ORDER BY attnum) FROM pg_attribute a LEFT JOIN pg_attrdef d"
                        " ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                        " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
                        {"public." + table_}),
            "id uuid NOT NULL DEFAULT gen_random_uuid(), aggregatetype text NOT NULL, aggregateid "
            "text NOT NULL, type text NOT NULL, payload jsonb, created_at timestamp with time zone "
            "NOT NULL DEFAULT now()");
  EXPECT_NE(first.out.find("publication " + publication_ + ": created"), std::string::npos)
      << first.out;
  EXPECT_NE(first.out.find("slot " + slot_ + ": created"), std::string::npos) << first.out;
  EXPECT_TRUE(pg_->slot_exists(slot_));
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND "
                        "tablename = $2",
                        {publication_, table_}),
            "1");

  CommandResult second = command("setup", setup_args);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("table public." + table_ + ": exists"), std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("publication " + publication_ + ": exists"), std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("slot " + slot_ + ": exists"), std::string::npos) << second.out;

  const Lsn confirmed = pg_->slot_confirmed_flush(slot_).value_or(0);
  CommandResult status = command("status", with(with({"status"}, where), {"--json"}));
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  EXPECT_NE(status.out.find("\"slot\":\"" + slot_ + "\",\"exists\":true"), std::string::npos)
      << status.out;
  EXPECT_NE(status.out.find("\"plugin\":\"pgoutput\""), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"active\":false"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"confirmed_flush_lsn\":\"" + format_lsn(confirmed) + "\""),
            std::string::npos)
      << status.out;
  EXPECT_NE(status.out.find("\"healthy\":true"), std::string::npos) << status.out;

  // Retaining more than allowed is unhealthy. Any slot retains at least a few bytes.
  CommandResult strict = command("status", with(with({"status"}, where), {"--max-retained", "1"}));
  EXPECT_EQ(strict.exit_code, 1) << strict.out;
  EXPECT_NE(strict.out.find("UNHEALTHY: retained WAL"), std::string::npos) << strict.out;

  CommandResult refused =
      command("drop", with(with({"drop"}, where), {"--publication", publication_}));
  EXPECT_EQ(refused.exit_code, 1) << "README (Commands): drop refused is exit 1";
  EXPECT_NE(refused.err.find("without --yes"), std::string::npos) << refused.err;
  EXPECT_TRUE(pg_->slot_exists(slot_));

  CommandResult dropped =
      command("drop", with(with({"drop"}, where), {"--publication", publication_, "--yes"}));
  EXPECT_EQ(dropped.exit_code, 0) << dropped.out << dropped.err;
  EXPECT_FALSE(pg_->slot_exists(slot_));
  EXPECT_EQ(pg_->scalar("SELECT count(*) FROM pg_publication WHERE pubname = $1", {publication_}),
            "0");

  CommandResult missing = command("status", with(with({"status"}, where), {"--json"}));
  EXPECT_EQ(missing.exit_code, 1) << missing.out << missing.err;
  EXPECT_NE(missing.out.find("\"exists\":false"), std::string::npos) << missing.out;

  // Errors name the object and carry the server's message.
  CommandResult no_table = command(
      "setup", with(with({"setup"}, where), {"--table", "public.no_such_table_" + suffix_}));
  EXPECT_EQ(no_table.exit_code, 1);
  EXPECT_NE(no_table.err.find("table public.no_such_table_" + suffix_ + " does not exist"),
            std::string::npos)
      << no_table.err;
  CommandResult bad_flag = command("status", with({"status", "--bogus"}, {}));
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_EQ(bad_flag.err, "outbox-relay: unknown flag --bogus (see --help)\n");
}

}  // namespace
}  // namespace outbox_test
