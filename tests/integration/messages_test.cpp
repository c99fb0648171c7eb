// The table-less outbox end to end against the real PostgreSQL and Kafka: transactional logical
// decoding messages (pg_logical_emit_message) relayed with --messages PREFIX, alone or
// interleaved with outbox inserts, in commit order; emitted through the SQL function that
// `setup --messages` installs and through the C++ client helper (protobuf envelope); poison
// messages (non-transactional, unparseable) dead-lettered, or skipped under --on-error fail (a
// message never stops the relay). And the trust boundary (docs/security.md): after
// `setup --messages --message-writer ROLE` an ordinary login can neither publish a forged event
// nor stop the relay, and the relay refuses --messages while PUBLIC may emit.
// Each test checks what a consumer sees: the records, nothing extra, in order, the exact bytes.

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "outbox/client/emit.hpp"
#include "outbox_test/e2e_fixture.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class MessagesIntegration : public E2eTest {
 protected:
  MessagesIntegration() : E2eTest({"msg", {"Order"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    prefix_ = "outbox_" + suffix_;
    // What `setup --messages` does (docs/security.md): the relay refuses --messages while PUBLIC
    // may emit. The tests emit as the superuser of scripts/test.sh, who always may.
    // Serialized: two tests revoking at once would update the same catalog rows concurrently.
    pg_->exec("BEGIN; SELECT pg_advisory_xact_lock(2505); " + std::string(kRevokeEmitFromPublic) +
              "; COMMIT");
  }

  void TearDown() override {
    E2eTest::TearDown();
    if (!pg_) return;
    try {
      if (drop_function_) pg_->exec("DROP SCHEMA IF EXISTS outbox CASCADE");
      if (!database_.empty()) {
        // A logical slot is dropped from its own database, and holds the database until then.
        PgClient(conninfo_ + " dbname=" + database_)
            .exec(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "
                "database = current_database()");
        pg_->exec("DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)");
      }
      for (const std::string& role : roles_) {
        pg_->exec("DROP OWNED BY " + role + "; DROP ROLE IF EXISTS " + role);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup: " << e.what();
    }
  }

  // The statements docs/security.md gives for running by hand.
  static constexpr const char* kRevokeEmitFromPublic =
      "DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid::regprocedure FROM "
      "pg_catalog.pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = "
      "'pg_logical_emit_message' LOOP EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', "
      "f); END LOOP; END $$";

  // A LOGIN role dropped in TearDown (with what was granted to it).
  std::string create_role(const std::string& name, const std::string& options = "LOGIN") {
    const std::string role = name + "_" + suffix_;
    pg_->exec("CREATE ROLE " + role + " " + options);
    roles_.push_back(role);
    return role;
  }

  // A database of the test's own, dropped in TearDown: what a fresh database grants PUBLIC.
  std::string create_database() {
    database_ = "sec_" + suffix_;
    pg_->exec("CREATE DATABASE " + database_);
    return conninfo_ + " dbname=" + database_;
  }

  // A relay of messages only: relay_args() without --table (and with `conninfo` when given).
  void slot_lost_while_down_stops_the_restart(const std::vector<std::string>& mode);

  RelayProcess& start_messages_relay(std::vector<std::string> extra,
                                     const std::string& conninfo = "") {
    std::vector<std::string> args;
    const std::vector<std::string> all = relay_args();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] == "--table") {
        ++i;
        continue;
      }
      args.push_back(all[i]);
      if (all[i] == "--pg" && !conninfo.empty()) {
        args.push_back(conninfo);
        ++i;
      }
    }
    args.insert(args.end(), {"--messages", prefix_});
    args.insert(args.end(), extra.begin(), extra.end());
    relays_.push_back(std::make_unique<RelayProcess>(
        relay_bin_, args, log_path("relay" + std::to_string(relays_.size() + 1))));
    return *relays_.back();
  }

  // The JSON envelope of event `seq` of aggregate `key`, as SQL text.
  std::string emit_json(int seq, const std::string& key, bool transactional = true) const {
    return "SELECT pg_logical_emit_message(" + std::string(transactional ? "true" : "false") +
           ", '" + prefix_ + "', jsonb_build_object('id', gen_random_uuid(), 'aggregatetype', '" +
           aggregatetypes_[0] + "', 'aggregateid', '" + key +
           "', 'type', 'Message', 'payload', jsonb_build_object('seq', " + std::to_string(seq) +
           "))::text);";
  }

  std::string dlq_topic() const { return "outbox.dlq." + suffix_; }

  // Reads `topics` until `count` records arrived, then to their end (the high watermark); in
  // Kafka order.
  std::vector<Record> read_all(std::size_t count, const std::vector<std::string>& topics) {
    KafkaReader reader(brokers_, topics);
    const bool arrived = reader.read_until(
        [&](const std::vector<Record>& records) { return records.size() >= count; }, 60s);
    EXPECT_TRUE(arrived) << reader.records().size() << " of " << count << " records in Kafka";
    EXPECT_TRUE(reader.read_to_end()) << "the topics could not be read to their end";
    std::vector<Record> out;
    for (const Record* r : in_kafka_order(reader.records())) out.push_back(*r);
    return out;
  }

  std::string prefix_;
  bool drop_function_ = false;
  std::vector<std::string> roles_;
  std::string database_;
};

std::string header_or(const Record& r, const std::string& name, const std::string& otherwise = "") {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? otherwise : it->second;
}

// The "seq" of a payload {"seq": N}; -1 when there is none.
int seq_of(const std::string& value) {
  const auto at = value.find("\"seq\": ");
  return at == std::string::npos ? -1 : std::stoi(value.substr(at + 7));
}

// setup --messages without --table: no table, an empty publication, outbox.emit() installed; the
// relay relays what outbox.emit() emits, committed only, in commit order per aggregate, and
// ignores other prefixes.
TEST_F(MessagesIntegration, MessagesOnlyThroughTheSqlFunction) {
  drop_function_ = true;
  const CommandResult setup = run_to_end(relay_bin_,
                                         {"setup", "--pg", conninfo_, "--slot", slot_,
                                          "--publication", publication_, "--messages", prefix_},
                                         log_path("setup_out"), log_path("setup_err"), 60s);
  ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;
  EXPECT_NE(setup.out.find("function outbox.emit: installed"), std::string::npos) << setup.out;
  EXPECT_NE(setup.out.find("no tables"), std::string::npos) << setup.out;
  EXPECT_EQ(
      pg_->scalar("SELECT count(*) FROM pg_publication_tables WHERE pubname = $1", {publication_}),
      "0");

  RelayProcess& relay = start_messages_relay({});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kTransactions = 10, kPerTransaction = 3;
  std::string sql;
  int seq = 0;
  for (int t = 0; t < kTransactions; ++t) {
    sql += "BEGIN;";
    for (int k = 0; k < kPerTransaction; ++k, ++seq) {
      sql += "SELECT outbox.emit('" + aggregatetypes_[0] + "', 'a" + std::to_string(k) +
             "', 'Emitted', '{\"seq\": " + std::to_string(seq) + "}', '{\"h\": \"v" +
             std::to_string(seq) + "\", \"n\": 7}');";
    }
    sql += "COMMIT;";
  }
  sql += "BEGIN; SELECT outbox.emit('" + aggregatetypes_[0] +
         "', 'a0', 'Ghost', '{\"seq\": 999}'); ROLLBACK;";
  sql += "SELECT pg_logical_emit_message(true, 'someone-else', 'not ours');";
  pg_->exec(sql);
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(kTransactions * kPerTransaction, {topics_[0]});
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));

  ASSERT_EQ(records.size(), static_cast<std::size_t>(kTransactions * kPerTransaction));
  std::map<std::string, int> last_seq;
  std::set<std::string> ids;
  for (const Record& r : records) {
    const int s = seq_of(r.value);
    ASSERT_GE(s, 0) << describe(r);
    EXPECT_EQ(r.key, "a" + std::to_string(s % kPerTransaction)) << describe(r);
    EXPECT_EQ(r.value, "{\"seq\": " + std::to_string(s) + "}") << "the payload as jsonb prints it";
    EXPECT_EQ(header_or(r, "type"), "Emitted");
    EXPECT_EQ(header_or(r, "h"), "v" + std::to_string(s));
    EXPECT_EQ(header_or(r, "n"), "7") << "header values as text";
    EXPECT_TRUE(r.create_time);
    EXPECT_TRUE(ids.insert(header_or(r, "id")).second) << "id repeated: " << describe(r);
    EXPECT_GT(s, last_seq.contains(*r.key) ? last_seq[*r.key] : -1) << "order of " << *r.key;
    last_seq[*r.key] = s;
  }
}

// A relay of messages loses its slot while it is down: messages leave no rows, so the gap cannot
// be read back. The restart stops (exit 4) naming the slot and the position it delivered
// through, and makes no slot; --gap-repair-column is refused (exit 2) for a relay of messages.
// In each delivery mode (`mode`: exactly-once's record is its committed checkpoint).
void MessagesIntegration::slot_lost_while_down_stops_the_restart(
    const std::vector<std::string>& mode) {
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), mode.begin(), mode.end());
    return more;
  };
  RelayProcess& relay = start_messages_relay(with({}));
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("BEGIN;" + emit_json(0, "a") + emit_json(1, "a") + emit_json(2, "b") + "COMMIT;");
  const Lsn lsn = pg_->current_wal_lsn();
  ASSERT_EQ(read_all(3, {topics_[0]}).size(), 3u);
  ASSERT_TRUE(expect_confirmed_reaches(lsn, 30s));
  ASSERT_EQ(relay.terminate(30s), 0) << tail_file(relay.log_path(), 20);
  pg_->drop_slot_if_exists(slot_);
  pg_->exec("BEGIN;" + emit_json(3, "a") + emit_json(4, "b") + "COMMIT;");

  RelayProcess& restarted = start_messages_relay(with({}));
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ + " does not exist, but its progress record"),
            std::string::npos)
      << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";

  RelayProcess& repairing = start_messages_relay(with({"--gap-repair-column", "created_at"}));
  const auto refused = repairing.wait_exit(30s);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, 2) << tail_file(repairing.log_path(), 5);
  EXPECT_EQ(read_all(3, {topics_[0]}).size(), 3u) << "nothing was sent past the loss";
}

TEST_F(MessagesIntegration, ASlotLostWhileDownStopsTheRestart) {
  slot_lost_while_down_stops_the_restart({});
}

TEST_F(MessagesIntegration, ASlotLostWhileDownStopsTheRestartExactlyOnce) {
  slot_lost_while_down_stops_the_restart({"--delivery", "exactly-once"});
}

// Inserts and messages in one transaction and across transactions, one aggregate (one
// partition): Kafka has them in commit order, and within a transaction in WAL order.
TEST_F(MessagesIntegration, InterleavedWithInsertsInCommitOrder) {
  create_outbox_table();
  RelayProcess& relay = start_relay({"--messages", prefix_});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto insert = [&](int seq) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
           "', 'same', 'Row', '{\"seq\": " + std::to_string(seq) + "}');";
  };
  std::string sql;
  int seq = 0;
  for (int t = 0; t < 20; ++t) {
    sql += "BEGIN;";
    if (t % 5 == 4) {
      sql += emit_json(seq++, "same");  // a transaction of messages only
      sql += emit_json(seq++, "same");
    } else if (t % 5 == 3) {
      sql += insert(seq++);  // of inserts only
    } else {
      sql += insert(seq++);
      sql += emit_json(seq++, "same");
      sql += insert(seq++);
    }
    sql += "COMMIT;";
  }
  pg_->exec(sql);
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(static_cast<std::size_t>(seq), {topics_[0]});
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  ASSERT_EQ(records.size(), static_cast<std::size_t>(seq));
  for (int i = 0; i < seq; ++i) {
    EXPECT_EQ(seq_of(records[i].value), i) << describe(records[i]);
    EXPECT_EQ(records[i].key, "same");
  }
  EXPECT_EQ(header_or(records[1], "type"), "Message");
  EXPECT_EQ(header_or(records[0], "type"), "Row");
}

// The C++ client helper (protobuf outbox.v1.Event) in the caller's transaction: binary payloads
// arrive byte for byte, the headers beside id and type, nothing of a rolled-back transaction.
TEST_F(MessagesIntegration, ProtobufThroughTheClientHelper) {
  RelayProcess& relay = start_messages_relay({"--message-format", "protobuf"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  std::unique_ptr<PGconn, decltype(&PQfinish)> conn(PQconnectdb(conninfo_.c_str()), &PQfinish);
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  const auto run = [&](const char* sql) {
    std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(conn.get(), sql), &PQclear);
    ASSERT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << PQerrorMessage(conn.get());
  };
  std::vector<std::string> ids;
  std::vector<std::string> payloads;
  ASSERT_NO_FATAL_FAILURE(run("BEGIN"));
  for (int i = 0; i < 5; ++i) {
    payloads.push_back(std::string("\x00\xff\x80{", 4) + std::to_string(i));
    ids.push_back(outbox::client::emit(
        conn.get(), prefix_,
        outbox::client::event(aggregatetypes_[0], "agg-" + std::to_string(i % 2), "Binary",
                              payloads.back(), {{"traceparent", "00-" + std::to_string(i)}})));
  }
  ASSERT_NO_FATAL_FAILURE(run("COMMIT"));
  ASSERT_NO_FATAL_FAILURE(run("BEGIN"));
  outbox::client::emit(conn.get(), prefix_,
                       outbox::client::event(aggregatetypes_[0], "agg-0", "Ghost", "x"));
  ASSERT_NO_FATAL_FAILURE(run("ROLLBACK"));
  const Lsn lsn = pg_->current_wal_lsn();
  std::vector<Record> records = read_all(ids.size(), {topics_[0]});
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  ASSERT_EQ(records.size(), ids.size());
  std::map<std::string, const Record*> by_id;
  for (const Record& r : records) by_id[header_or(r, "id")] = &r;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(by_id.contains(ids[i])) << "event " << ids[i] << " missing";
    const Record& r = *by_id[ids[i]];
    EXPECT_EQ(r.value, payloads[i]) << "the bytes as they are";
    EXPECT_EQ(r.key, "agg-" + std::to_string(i % 2));
    EXPECT_EQ(header_or(r, "type"), "Binary");
    EXPECT_EQ(header_or(r, "traceparent"), "00-" + std::to_string(i));
  }
}

// --on-error dlq: a non-transactional message with the prefix and an unparseable one go to the
// dead-letter topic with their raw content and the reason; the good ones around them (one
// aggregate, one partition) arrive in order and
// the slot moves past all of them.
TEST_F(MessagesIntegration, PoisonMessagesAreDeadLettered) {
  RelayProcess& relay = start_messages_relay({"--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("BEGIN;" + emit_json(1, "same") + "COMMIT;");
  pg_->exec(emit_json(2, "k2", /*transactional=*/false));
  pg_->exec("BEGIN; SELECT pg_logical_emit_message(true, '" + prefix_ +
            "', 'not an envelope'); COMMIT;");
  pg_->exec("BEGIN;" + emit_json(3, "same") + "COMMIT;");
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(4, {topics_[0], dlq_topic()});
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  std::vector<int> relayed;
  std::vector<const Record*> dead;
  for (const Record& r : records) {
    if (r.topic == dlq_topic()) {
      dead.push_back(&r);
    } else {
      relayed.push_back(seq_of(r.value));
    }
  }
  EXPECT_EQ(relayed, (std::vector<int>{1, 3}));
  ASSERT_EQ(dead.size(), 2u);
  std::map<std::string, const Record*> by_value;
  for (const Record* r : dead) by_value[r->value] = r;
  ASSERT_TRUE(by_value.contains("not an envelope"));
  EXPECT_NE(header_or(*by_value["not an envelope"], "outbox.error").find("not a valid protobuf"),
            std::string::npos);
  const Record* untransactional = by_value.begin()->first == "not an envelope"
                                      ? by_value.rbegin()->second
                                      : by_value.begin()->second;
  EXPECT_EQ(seq_of(untransactional->value), 2) << "the raw envelope";
  EXPECT_NE(header_or(*untransactional, "outbox.error").find("not transactional"),
            std::string::npos)
      << describe(*untransactional);
}

// --on-error fail (the default): a non-transactional message with the prefix is no event, but it
// must not stop the relay (whoever may emit could otherwise halt it for good: the slot would stay
// before the message and every restart meet it again). It is logged with its LSN, counted and
// skipped; the next event is delivered and the slot moves past it.
TEST_F(MessagesIntegration, NonTransactionalMessageIsSkippedNotAFailStop) {
  RelayProcess& relay = start_messages_relay({});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const std::optional<std::string> at =
      pg_->scalar("SELECT pg_logical_emit_message(false, '" + prefix_ + "', 'anything')::text");
  ASSERT_TRUE(at);
  pg_->exec("BEGIN; SELECT pg_logical_emit_message(true, '" + prefix_ +
            "', 'not an envelope'); COMMIT;");
  pg_->exec("BEGIN;" + emit_json(1, "after") + "COMMIT;");
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(1, {topics_[0]});
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(seq_of(records[0].value), 1) << "the next event is delivered";
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s)) << "the slot moves past the skipped messages";
  EXPECT_TRUE(relay.is_running());
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("event=message_rejected"), std::string::npos) << log;
  EXPECT_NE(log.find("lsn=" + *at), std::string::npos) << log;
  expect_graceful_stop(relay);
}

// The attack of issue 25, after `setup --messages PREFIX --message-writer ROLE` as documented: a
// role created with nothing but LOGIN can call neither pg_logical_emit_message (any overload) nor
// outbox.emit(), so no forged event reaches Kafka and nothing it does stops the relay; the writer
// role emits through outbox.emit() and its events arrive.
TEST_F(MessagesIntegration, AnOrdinaryLoginCanNeitherForgeNorStop) {
  // A database of its own: outbox.emit() is one per database, and other tests install theirs.
  const std::string fresh = create_database();
  const std::string writer = create_role("writer");
  const std::string intruder = create_role("intruder");
  const CommandResult setup =
      run_to_end(relay_bin_,
                 {"setup", "--pg", fresh, "--slot", slot_, "--publication", publication_,
                  "--messages", prefix_, "--message-writer", writer},
                 log_path("setup_out"), log_path("setup_err"), 60s);
  ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;
  EXPECT_NE(setup.out.find("EXECUTE revoked from PUBLIC, granted to " + writer), std::string::npos)
      << setup.out;
  RelayProcess& relay = start_messages_relay({}, fresh);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  PgClient as_intruder(fresh + " user=" + intruder);
  const std::string forged =
      "'{\"id\":\"6f1c1f6e-0000-4000-8000-000000000001\",\"aggregatetype\":\"" +
      aggregatetypes_[0] +
      "\",\"aggregateid\":\"o-7\",\"type\":\"OrderPaid\",\"payload\":{\"seq\":666}}'";
  for (const std::string& sql :
       {"SELECT pg_logical_emit_message(true, '" + prefix_ + "', " + forged + ")",
        "SELECT pg_logical_emit_message(true, '" + prefix_ + "', convert_to(" + forged +
            ", 'UTF8'))",
        "SELECT pg_logical_emit_message(false, '" + prefix_ + "', 'halt')",
        "SELECT outbox.emit('" + aggregatetypes_[0] + "', 'o-7', 'OrderPaid', '{\"seq\": 666}')"}) {
    try {
      as_intruder.exec(sql);
      ADD_FAILURE() << "the intruder may run " << sql;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("permission denied"), std::string::npos) << e.what();
    }
  }
  PgClient as_writer(fresh + " user=" + writer);
  as_writer.exec("SELECT outbox.emit('" + aggregatetypes_[0] +
                 "', 'o-8', 'OrderPlaced', '{\"seq\": 1}')");
  as_writer.exec("SELECT pg_logical_emit_message(true, '" + prefix_ + "', " +
                 "jsonb_build_object('id', gen_random_uuid(), 'aggregatetype', '" +
                 aggregatetypes_[0] +
                 "', 'aggregateid', 'o-8', 'type', 'OrderPaid', 'payload', "
                 "jsonb_build_object('seq', 2))::text)");
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(2, {topics_[0]});
  ASSERT_EQ(records.size(), 2u) << "the writer's two events, and no forged one";
  EXPECT_EQ(seq_of(records[0].value), 1);
  EXPECT_EQ(seq_of(records[1].value), 2);
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// Where PUBLIC may emit (a fresh database grants it), `setup --messages` run by a role that may
// not revoke it exits 5 and prints the statements for a superuser; the relay with --messages
// refuses to start (exit 5); and a relay already streaming stops (exit 5) at its next publication
// check once EXECUTE is granted back to PUBLIC.
TEST_F(MessagesIntegration, RefusedWhilePublicMayEmit) {
  const std::string fresh = create_database();
  PgClient db(fresh);
  // The overload with a text message, as the server names it: (boolean,text,text) up to 16,
  // (boolean,text,text,boolean) from 17 on (a flush argument with a default).
  const std::optional<std::string> text_overload = db.scalar(
      "SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p WHERE p.proname = "
      "'pg_logical_emit_message' AND p.proargtypes[2] = 'text'::regtype ORDER BY p.pronargs "
      "LIMIT 1");
  ASSERT_TRUE(text_overload.has_value()) << "no pg_logical_emit_message with a text message";
  const std::string owner = create_role("owner", "LOGIN CREATEDB");
  db.exec("GRANT CREATE ON DATABASE " + database_ + " TO " + owner);
  const CommandResult not_superuser =
      run_to_end(relay_bin_,
                 {"setup", "--pg", fresh + " user=" + owner, "--slot", slot_, "--publication",
                  publication_, "--messages", prefix_},
                 log_path("setup1_out"), log_path("setup1_err"), 60s);
  EXPECT_EQ(not_superuser.exit_code, 5) << not_superuser.out << not_superuser.err;
  EXPECT_NE(not_superuser.err.find("PUBLIC may still execute pg_logical_emit_message"),
            std::string::npos)
      << not_superuser.err;
  EXPECT_NE(not_superuser.err.find("REVOKE EXECUTE ON FUNCTION " + *text_overload + " FROM PUBLIC"),
            std::string::npos)
      << not_superuser.err;

  std::vector<std::string> args = {"--pg",
                                   fresh,
                                   "--brokers",
                                   brokers_,
                                   "--slot",
                                   slot_,
                                   "--publication",
                                   publication_,
                                   "--messages",
                                   prefix_,
                                   "--publication-check-interval",
                                   "1s"};
  relays_.push_back(std::make_unique<RelayProcess>(relay_bin_, args, log_path("refused")));
  RelayProcess& refused = *relays_.back();
  std::optional<int> code = refused.wait_exit(60s);
  ASSERT_TRUE(code) << "the relay did not stop";
  EXPECT_EQ(*code, 5);
  std::string log = read_file(refused.log_path());
  EXPECT_NE(log.find("PUBLIC may execute pg_logical_emit_message"), std::string::npos) << log;

  db.exec(kRevokeEmitFromPublic);
  relays_.push_back(std::make_unique<RelayProcess>(relay_bin_, args, log_path("streaming")));
  RelayProcess& relay = *relays_.back();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  db.exec("GRANT EXECUTE ON FUNCTION " + *text_overload + " TO PUBLIC");
  code = relay.wait_exit(60s);
  ASSERT_TRUE(code) << "the relay did not notice";
  EXPECT_EQ(*code, 5);
  log = read_file(relay.log_path());
  EXPECT_NE(log.find("PUBLIC may execute " + *text_overload), std::string::npos) << log;
}

// --delivery exactly-once with messages and inserts: the same records, in commit order, and the
// slot confirmed after the Kafka commits.
TEST_F(MessagesIntegration, ExactlyOnceWithMessagesAndInserts) {
  create_outbox_table();
  RelayProcess& relay = start_relay({"--messages", prefix_, "--delivery", "exactly-once"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  std::string sql;
  int seq = 0;
  for (int t = 0; t < 10; ++t) {
    const int message = seq++;
    const int row = seq++;
    sql += "BEGIN;" + emit_json(message, "same") + "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
           "', 'same', 'Row', '{\"seq\": " + std::to_string(row) + "}');COMMIT;";
  }
  pg_->exec(sql);
  const Lsn lsn = pg_->current_wal_lsn();
  const std::vector<Record> records = read_all(static_cast<std::size_t>(seq), {topics_[0]});
  EXPECT_TRUE(expect_confirmed_reaches(lsn, 30s));
  ASSERT_EQ(records.size(), static_cast<std::size_t>(seq));
  for (int i = 0; i < seq; ++i) EXPECT_EQ(seq_of(records[i].value), i) << describe(records[i]);
  EXPECT_NE(read_file(relay.log_path()).find("event=checkpoint_read"), std::string::npos);
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
