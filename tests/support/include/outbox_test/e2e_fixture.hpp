// The one end-to-end fixture: the real outbox-relay binary against the real PostgreSQL and Kafka
// that scripts/test.sh starts, used by the integration and the fault tests. Every test gets its
// own table, slot, publication and topics (unique suffix); the fixture starts relays with those
// names, waits on the slot, reads the committed rows back, and in TearDown stops every relay it
// started (SIGTERM, then SIGKILL), prints their logs on failure, and drops the slot (after the
// relays: an abandoned slot holds WAL forever), the publication and the tables.
// A missing service fails the test in SetUp, never skips it.
// Thread-safety: a fixture is used by its test's thread.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/record_checks.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {

// How a test suite names its objects and where the relays' logs go.
struct E2eNames {
  // Table public.outbox_<prefix>_<suffix>; slot and publication <prefix>_<suffix>.
  std::string prefix;
  // Aggregate types, each made unique with the suffix; topics outbox.event.<type><suffix>.
  std::vector<std::string> aggregatetypes;
  // Directory of the relays' stdout/stderr and the commands' output (the test target's logs/).
  std::string log_dir;
  // The relays publish to NATS JetStream (OUTBOX_NATS, --nats) instead of Kafka: the topics are
  // then subjects, and OUTBOX_BROKERS is not needed.
  bool nats = false;
  // The relays publish to Amazon EventBridge (--eventbridge E2eTest::eventbridge_bus_, moto in
  // tests/aws): no Kafka needed either.
  bool eventbridge = false;
  // The relays publish to Amazon SQS (--sqs E2eTest::sqs_queue_url_, moto in tests/aws): no
  // Kafka needed either.
  bool sqs = false;
};

// One committed outbox row as PostgreSQL prints it.
struct OutboxRow {
  std::string aggregatetype;
  std::string aggregateid;
  std::string type;
  std::string payload;  // payload::text
  std::int64_t seq = 0;
};

class E2eTest : public ::testing::Test {
 protected:
  explicit E2eTest(E2eNames names) : names_(std::move(names)) {}

  // Reads the services (fails the test when one is missing), names everything, connects pg_.
  void SetUp() override;
  // Stops the relays, prints their logs on failure, drops slot, publications and tables.
  void TearDown() override;

  std::string qualified_table() const { return "public." + table_; }
  // id uuid, aggregatetype, aggregateid, type, payload jsonb NOT NULL, then `extra_columns`
  // (", seq bigint NOT NULL" for instance).
  void create_outbox_table(const std::string& extra_columns = "");
  // --pg --brokers (--nats with E2eNames::nats, --eventbridge with E2eNames::eventbridge, --sqs
  // with E2eNames::sqs) --slot --publication --table --status-interval status_interval_, and
  // --metrics-addr metrics_addr_ when that is not empty.
  std::vector<std::string> relay_args() const;
  // <log_dir>/<Suite>.<test>_<suffix>_<what>.log
  std::string log_path(const std::string& what) const;
  // A relay with relay_args() + extra_args, stopped in TearDown.
  RelayProcess& start_relay(std::vector<std::string> extra_args = {});
  // The relay logged event=streaming (its own log: the slot may be active for another relay, a
  // standby that won) and the slot exists with a confirmed position and is active. Rows committed
  // from now on must all reach Kafka. ASSERT-fails when the relay exits or the timeout passes.
  void wait_until_streaming(RelayProcess& relay,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Waits until the slot's confirmed position reached `lsn`; EXPECT-fails otherwise.
  bool expect_confirmed_reaches(Lsn lsn, std::chrono::milliseconds timeout);
  // SIGTERM: the relay stops within 40 s with exit code 0.
  static void expect_graceful_stop(RelayProcess& relay);
  // All rows of the outbox table by id; seq is seq_sql_ (by default the payload's "seq").
  std::unordered_map<std::string, OutboxRow> committed_rows();
  // A fresh connection (after a PostgreSQL restart), waiting up to `timeout` for the server.
  bool reconnect_pg(std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // What a consumer checks on each record against the row it came from: topic from the template,
  // key, value as PostgreSQL prints it, type header, and that Java clients would pick the same
  // partition for the key.
  static void check_record_matches_row(const Record& record, const OutboxRow& row,
                                       KafkaReader& reader, Problems& problems);
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
  static Problems check_committed_in_order(KafkaReader& reader,
                                           const std::unordered_map<std::string, OutboxRow>& rows);

  E2eNames names_;
  std::string conninfo_;
  std::string brokers_;
  std::string nats_;  // E2eNames::nats: the server's URL
  std::string
      eventbridge_bus_;        // E2eNames::eventbridge: --eventbridge of relay_args(), by the test
  std::string sqs_queue_url_;  // E2eNames::sqs: --sqs of relay_args(), set by the test
  std::string relay_bin_;
  std::string suffix_;
  std::string table_;
  std::string slot_;
  std::string publication_;
  std::vector<std::string> aggregatetypes_;
  std::vector<std::string> topics_;
  std::string status_interval_ = "1s";  // --status-interval of relay_args()
  // --metrics-addr of relay_args(); empty: no flag, the relay's default 127.0.0.1:9187. Port 0
  // by default (the kernel's choice): relays of tests running at once in other lanes
  // (docs/testing.md) never meet on the default port.
  std::string metrics_addr_ = "127.0.0.1:0";
  std::string seq_sql_ = "(payload->>'seq')::bigint";  // OutboxRow::seq in committed_rows()
  std::vector<std::string> extra_tables_;              // also dropped in TearDown (CASCADE)
  std::vector<std::string> extra_publications_;        // also dropped in TearDown
  std::unique_ptr<PgClient> pg_;
  std::vector<std::unique_ptr<RelayProcess>> relays_;
};

}  // namespace outbox_test
