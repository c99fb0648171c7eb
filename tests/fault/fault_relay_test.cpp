// Fault stories of the relay as an operator lives them, against the real PostgreSQL and Kafka:
// the relay crashes again and again, the broker hangs or dies, the database restarts, a standby
// takes over from a dead or hung relay, poison events arrive, the broker is gone while a million
// events pile up, and busy tables outside the publication must not make the slot retain WAL.
// In every story: no committed event is lost, no rolled-back one appears, per-aggregate order
// holds for first deliveries, and the slot never confirms what Kafka has not acknowledged.
//
// Some tests stop or restart the shared Kafka broker or PostgreSQL cluster; scope guards always
// bring them back. Every test has its own table, slot, publication and topics (unique suffix).
// OUTBOX_FAULT_SCALE=0.1 shrinks the workloads for local runs; CI runs the full sizes.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "fault_fixture.hpp"
#include "outbox_test/kafka_admin.hpp"

namespace outbox_test::fault {
namespace {

std::string mib(std::int64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

// ------------------------------------------------------------------------------------------------
// 5. Poison events. Each kind, under --on-error=fail: exit 3, the slot stays before the poison
// transaction, and one error line names the event id, table, commit LSN and reason. Under
// --on-error=dlq: the event lands on the dead-letter topic with the error headers, the stream goes
// on, later events arrive and the slot moves past the poison transaction.

enum class PoisonKind {
  kTooLargeLocal,   // 1.5 MB payload: librdkafka refuses it (message.max.bytes 1,000,000)
  kTooLargeBroker,  // 1.5 MB incompressible payload, -X message.max.bytes=4000000: the broker
                    // refuses
  kInvalidRecord,   // NULL aggregateid (null key) to a compacted topic: INVALID_RECORD
  kNullPayload,
  kNullId,
  kNullAggregatetype,
  kNotJson,  // --require-json and a text payload that is not JSON
};

struct PoisonCase {
  PoisonKind kind;
  std::string name;
  std::string reason;  // what the error must say
};

const std::vector<PoisonCase>& poison_cases() {
  static const std::vector<PoisonCase> cases = {
      {PoisonKind::kTooLargeLocal, "TooLargeLocal", "MSG_SIZE_TOO_LARGE"},
      {PoisonKind::kTooLargeBroker, "TooLargeBroker", "MSG_SIZE_TOO_LARGE"},
      {PoisonKind::kInvalidRecord, "InvalidRecord", "INVALID_RECORD"},
      {PoisonKind::kNullPayload, "NullPayload", "column payload is NULL"},
      {PoisonKind::kNullId, "NullId", "column id is NULL"},
      {PoisonKind::kNullAggregatetype, "NullAggregatetype", "column aggregatetype is NULL"},
      {PoisonKind::kNotJson, "NotJson", "column payload is not valid JSON"},
  };
  return cases;
}

class Poison : public FaultTest, public ::testing::WithParamInterface<PoisonCase> {
 protected:
  // Nullable columns and a text payload, so that every kind of bad row can be committed.
  void create_lenient_table() {
    pg_->exec("CREATE TABLE " + qualified_table() +
              " (id uuid DEFAULT gen_random_uuid(), aggregatetype text, aggregateid text,"
              " type text, payload text, seq bigint)");
  }

  std::vector<std::string> mode_args(const std::string& mode) const {
    std::vector<std::string> args = {"--on-error", mode, "--dlq-topic", dlq_topic_};
    if (GetParam().kind == PoisonKind::kNotJson) args.push_back("--require-json");
    if (GetParam().kind == PoisonKind::kTooLargeBroker) {
      args.insert(args.end(), {"-X", "message.max.bytes=4000000"});
    }
    return args;
  }

  std::string good_row(int seq, const std::string& aggregate = "agg-1") const {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ + "', '" +
           aggregate + "', 'Good', '{\"seq\": " + std::to_string(seq) + "}', " +
           std::to_string(seq) + ")";
  }

  // The poison event has the key agg-1: under --on-error dlq its aggregate is parked before event
  // 3 may pass it, whether it is refused before it is produced (mapping, librdkafka's own size
  // check) or by the broker (its batch is sent again one record at a time, in order).
  bool parks_before_the_next_event() const { return GetParam().kind != PoisonKind::kInvalidRecord; }

  std::string poison_row(int seq) const {
    const std::string s = std::to_string(seq);
    const std::string cols = " (id, aggregatetype, aggregateid, type, payload, seq) ";
    const std::string t = "INSERT INTO " + qualified_table() + cols;
    const std::string agg = "'" + aggregatetype_ + "'";
    // 47,000 md5 hex digests: 1.5 MB that lz4 cannot shrink below the broker's 1 MiB limit.
    const std::string big =
        "(SELECT '{\"blob\": \"' || string_agg(md5(i::text), '') || '\"}' FROM "
        "generate_series(1, 47000) AS i)";
    switch (GetParam().kind) {
      case PoisonKind::kTooLargeLocal:
      case PoisonKind::kTooLargeBroker:
        return t + "VALUES ('" + poison_id_ + "', " + agg + ", 'agg-1', 'Poison', " + big + ", " +
               s + ")";
      case PoisonKind::kInvalidRecord:
        return t + "VALUES ('" + poison_id_ + "', " + agg + ", NULL, 'Poison', '{\"seq\": " + s +
               "}', " + s + ")";
      case PoisonKind::kNullPayload:
        return t + "VALUES ('" + poison_id_ + "', " + agg + ", 'agg-1', 'Poison', NULL, " + s + ")";
      case PoisonKind::kNullId:
        return t + "VALUES (NULL, " + agg + ", 'agg-1', 'Poison', '{\"seq\": " + s + "}', " + s +
               ")";
      case PoisonKind::kNullAggregatetype:
        return t + "VALUES ('" + poison_id_ + "', NULL, 'agg-1', 'Poison', '{\"seq\": " + s +
               "}', " + s + ")";
      case PoisonKind::kNotJson:
        return t + "VALUES ('" + poison_id_ + "', " + agg +
               ", 'agg-1', 'Poison', 'this is {not JSON', " + s + ")";
    }
    return {};
  }

  // good event 1; poison event 2 (its own transaction); good event 3 (all of aggregate agg-1,
  // but a NULL-key poison); good event 4 of aggregate agg-2. Returns after all four committed;
  // poison_before_/poison_after_ bracket the poison transaction's commit record.
  void commit_story() {
    commit_first();
    commit_rest();
  }
  void commit_first() {
    pg_->exec("BEGIN; " + good_row(1));
    first_before_commit_ = pg_->current_wal_insert_lsn();
    pg_->exec("COMMIT");
    lsn_after_first_ = pg_->current_wal_lsn();
  }
  void commit_rest() {
    pg_->exec("BEGIN; " + poison_row(2));
    poison_before_ = pg_->current_wal_insert_lsn();
    pg_->exec("COMMIT");
    poison_after_ = pg_->current_wal_insert_lsn();
    pg_->exec(good_row(3));
    pg_->exec(good_row(4, "agg-2"));
    lsn_after_last_ = pg_->current_wal_lsn();
  }

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    dlq_topic_ = "outbox.dlq." + suffix_;
    poison_id_ = *pg_->scalar("SELECT gen_random_uuid()::text");
    create_lenient_table();
    if (GetParam().kind == PoisonKind::kInvalidRecord) {
      // The relay's topic exists before it starts, compacted: records need a key there.
      ASSERT_NO_THROW(create_topic(brokers_, topic_, 3, 1, {{"cleanup.policy", "compact"}}));
    }
  }

  // The commit LSN in a text ("... commit LSN 1A/2B3C4D ..."), checked to be the poison
  // transaction's: between the insert positions around its COMMIT.
  void expect_poison_lsn(const std::string& text, const std::string& where) {
    std::smatch match;
    static const std::regex lsn_re("commit LSN ([0-9A-F]+/[0-9A-F]+)");
    std::optional<Lsn> lsn;
    if (std::regex_search(text, match, lsn_re)) lsn = parse_lsn(match[1]);
    ASSERT_TRUE(lsn.has_value()) << where << " names no commit LSN: " << text;
    EXPECT_TRUE(*lsn >= poison_before_ && *lsn <= poison_after_)
        << where << " names commit LSN " << format_lsn(*lsn)
        << ", but the poison transaction committed between " << format_lsn(poison_before_)
        << " and " << format_lsn(poison_after_);
  }

  std::string dlq_topic_;
  std::string poison_id_;
  Lsn first_before_commit_ = 0;  // WAL insert position before good event 1's COMMIT
  Lsn lsn_after_first_ = 0;
  Lsn poison_before_ = 0;
  Lsn poison_after_ = 0;
  Lsn lsn_after_last_ = 0;
};

// The good event committed right before the poison, no wait between them: the relay stops with
// exit 3 and still confirms the good event it delivered (its stop checks the publication once
// more, so the confirmation is not held at the last periodic check), and never the poison.
TEST_P(Poison, FailConfirmsTheGoodEventCommittedJustBeforeIt) {
  RelayProcess& relay = start_relay(mode_args("fail"));
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  commit_first();
  commit_rest();
  const auto exit_code = relay.wait_exit(60s);
  ASSERT_TRUE(exit_code.has_value()) << "relay still running 60 s after a poison event";
  EXPECT_EQ(*exit_code, 3) << "poison event exit code";
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_GT(*confirmed, first_before_commit_)
      << "slot " << slot_ << " confirmed " << format_lsn(*confirmed)
      << ", not past good event 1's commit (after " << format_lsn(first_before_commit_)
      << "), which Kafka acknowledged before the relay stopped: it would be sent again";
  EXPECT_LE(*confirmed, poison_before_)
      << "slot " << slot_ << " confirmed " << format_lsn(*confirmed)
      << " past the poison transaction (commit after " << format_lsn(poison_before_) << ")";
}

TEST_P(Poison, FailStopsBeforeIt) {
  const PoisonCase& c = GetParam();
  RelayProcess& relay = start_relay(mode_args("fail"));
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  // Good event 1 is delivered and confirmed (the slot moves past its commit) before the poison is
  // committed: a relay that confirmed nothing would fail here, and the end state below must keep
  // that confirmation. (The slot is confirmed only up to the last publication check, so a good
  // event committed just before the poison may be confirmed or not when the relay stops.)
  commit_first();
  const auto first_id = pg_->scalar("SELECT id::text FROM " + qualified_table() + " WHERE seq = 1");
  ASSERT_TRUE(first_id.has_value());
  {
    KafkaReader reader(brokers_, {topic_});
    EXPECT_TRUE(reader.read_until(
        [&](const std::vector<Record>& records) {
          return std::any_of(records.begin(), records.end(), [&](const Record& r) {
            auto it = r.headers.find("id");
            return it != r.headers.end() && it->second == *first_id;
          });
        },
        30s))
        << "good event 1 is not in Kafka";
  }
  ASSERT_TRUE(wait_until(
      [&] { return pg_->slot_confirmed_flush(slot_).value_or(0) > first_before_commit_; }, 30s))
      << "slot " << slot_ << " not confirmed past good event 1's commit (after "
      << format_lsn(first_before_commit_) << ") within 30 s of its delivery";
  commit_rest();

  const auto exit_code = relay.wait_exit(60s);
  ASSERT_TRUE(exit_code.has_value())
      << "relay still running 60 s after a poison event (" << c.name << ") under --on-error=fail";
  EXPECT_EQ(*exit_code, 3) << "poison event exit code";

  // The slot stays past good event 1, which is not sent again ...
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_GT(*confirmed, first_before_commit_)
      << "slot " << slot_ << " confirmed " << format_lsn(*confirmed)
      << ", not past good event 1's commit (after " << format_lsn(first_before_commit_) << ")";
  // ... but stays before the poison transaction: it is sent again on the next start.
  EXPECT_LE(*confirmed, poison_before_)
      << "slot " << slot_ << " confirmed " << format_lsn(*confirmed)
      << " past the poison transaction (commit after " << format_lsn(poison_before_) << ")";
  figure("confirmed_vs_poison", format_lsn(*confirmed) + " <= " + format_lsn(poison_before_) +
                                    " (first event ended by " + format_lsn(lsn_after_first_) + ")");

  // One clear line: event id (when it has one), table, commit LSN, reason.
  const std::string log = read_file(relay.log_path());
  std::string fatal_line;
  {
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);) {
      if (line.find("event=fatal") != std::string::npos) fatal_line = line;
    }
  }
  ASSERT_FALSE(fatal_line.empty()) << "no event=fatal line in the log:\n"
                                   << tail_file(relay.log_path(), 20);
  std::cout << "fatal line: " << fatal_line.substr(0, 600) << "\n";
  EXPECT_NE(fatal_line.find("exit_code=3"), std::string::npos) << fatal_line;
  if (c.kind != PoisonKind::kNullId) {
    EXPECT_NE(fatal_line.find(poison_id_), std::string::npos)
        << "the error does not name the event id " << poison_id_ << ": " << fatal_line;
  }
  EXPECT_NE(fatal_line.find(qualified_table()), std::string::npos)
      << "the error does not name the table " << qualified_table() << ": " << fatal_line;
  EXPECT_NE(fatal_line.find(c.reason), std::string::npos)
      << "the error does not give the reason '" << c.reason << "': " << fatal_line.substr(0, 600);
  expect_poison_lsn(fatal_line, "the error");
  // Clear means short and about the failure: not the event's payload (which may be large or
  // personal data) in place of the broker's reason.
  const auto payload = pg_->scalar("SELECT payload FROM " + qualified_table() + " WHERE seq = 2");
  EXPECT_LT(fatal_line.size(), 2048u) << "the error line is " << fatal_line.size() << " bytes long";
  if (payload) {
    EXPECT_EQ(fatal_line.find(payload->substr(0, 64)), std::string::npos)
        << "the error quotes the payload instead of the reason: " << fatal_line.substr(0, 600);
  }

  // Restarted as is, the relay meets the same event again and stops again: nothing skipped.
  RelayProcess& again = start_relay(mode_args("fail"));
  const auto second_exit = again.wait_exit(60s);
  ASSERT_TRUE(second_exit.has_value()) << "restarted relay still running 60 s later";
  EXPECT_EQ(*second_exit, 3);
  EXPECT_LE(pg_->slot_confirmed_flush(slot_).value_or(0), poison_before_);
}

TEST_P(Poison, DlqCarriesOn) {
  const PoisonCase& c = GetParam();
  RelayProcess& relay = start_relay(mode_args("dlq"));
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  commit_story();

  KafkaReader reader(brokers_, {topic_, dlq_topic_});
  auto is_good = [](const Record& r) {
    return r.headers.count("type") && r.headers.at("type") == "Good";
  };
  const bool arrived = reader.read_until(
      [&](const std::vector<Record>& records) {
        std::set<std::string> good;  // values of the good events, wherever they are
        int poison = 0;
        for (const auto& r : records) {
          if (is_good(r)) good.insert(r.value);
          if (r.topic == dlq_topic_ && !is_good(r)) ++poison;
        }
        return (good.size() >= 3 && poison >= 1) || !relay.is_running();
      },
      60s);
  // Per-aggregate order: a good event on the dead-letter topic is one of the poison's aggregate,
  // parked behind it; under a local refusal event 3 is parked, never on its own topic.
  for (const auto& r : reader.records()) {
    if (r.topic != dlq_topic_ || !is_good(r)) continue;
    EXPECT_EQ(r.key, "agg-1") << "an event of another aggregate was dead-lettered: " << describe(r);
    const auto error = r.headers.count("outbox.error") ? r.headers.at("outbox.error") : "";
    EXPECT_EQ(error.rfind("parked: ", 0), 0u) << describe(r);
  }
  std::map<std::string, std::string> topic_of;  // good event value -> topic
  for (const auto& r : reader.records()) {
    if (is_good(r)) topic_of[r.value] = r.topic;
  }
  EXPECT_EQ(topic_of["{\"seq\": 1}"], topic_);
  EXPECT_EQ(topic_of["{\"seq\": 4}"], topic_) << "aggregate agg-2 is not parked";
  if (parks_before_the_next_event()) {
    EXPECT_EQ(topic_of["{\"seq\": 3}"], dlq_topic_)
        << "event 3 of the poison's aggregate must follow it to the dead-letter topic";
  } else if (c.kind == PoisonKind::kInvalidRecord) {
    EXPECT_EQ(topic_of["{\"seq\": 3}"], topic_) << "the NULL key is parked, not agg-1";
  }
  ASSERT_TRUE(relay.is_running()) << "the stream must go on under --on-error=dlq; exit "
                                  << relay.wait_exit(0ms).value_or(-1);
  ASSERT_TRUE(arrived) << "within 60 s: the two good events on " << topic_
                       << " and the poison event on " << dlq_topic_
                       << " (relay running: " << relay.is_running() << ")";
  EXPECT_TRUE(relay.is_running()) << "the stream must go on under --on-error=dlq";
  expect_confirmed_reaches(lsn_after_last_, 30s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();

  std::vector<const Record*> dlq;
  for (const auto& r : reader.records()) {
    if (r.topic == dlq_topic_ && !is_good(r)) dlq.push_back(&r);
    if (r.topic == topic_) {
      EXPECT_NE(r.headers.count("type") ? r.headers.at("type") : "", "Poison")
          << "the poison event reached its own topic: " << describe(r);
    }
  }
  ASSERT_EQ(dlq.size(), 1u) << "exactly one dead-letter record";
  const Record& d = *dlq.front();
  std::cout << "dead-letter record: " << describe(d) << "\n";
  auto header = [&](const std::string& name) -> std::optional<std::string> {
    auto it = d.headers.find(name);
    if (it == d.headers.end()) return std::nullopt;
    return it->second;
  };
  if (c.kind != PoisonKind::kNullId) {
    EXPECT_EQ(header("id"), poison_id_);
  }
  EXPECT_EQ(header("type"), "Poison");
  ASSERT_TRUE(header("outbox.error").has_value());
  EXPECT_NE(header("outbox.error")->find(c.reason), std::string::npos)
      << "outbox.error does not give the reason '" << c.reason << "': " << *header("outbox.error");
  EXPECT_EQ(header("outbox.table"), qualified_table());
  ASSERT_TRUE(header("outbox.original.topic").has_value());
  if (c.kind != PoisonKind::kNullAggregatetype) {
    EXPECT_EQ(header("outbox.original.topic"), topic_);
  }
  ASSERT_TRUE(header("outbox.lsn").has_value());
  expect_poison_lsn("commit LSN " + *header("outbox.lsn"), "outbox.lsn");
  if (c.kind == PoisonKind::kInvalidRecord) {
    EXPECT_FALSE(d.key.has_value()) << "key = the NULL aggregateid";
  } else {
    EXPECT_EQ(d.key, "agg-1");
  }
  const bool too_large =
      c.kind == PoisonKind::kTooLargeLocal || c.kind == PoisonKind::kTooLargeBroker;
  if (too_large) {
    EXPECT_TRUE(header("outbox.value.omitted").has_value()) << "a too large value is left out";
    EXPECT_TRUE(d.value.empty());
  } else if (c.kind != PoisonKind::kNullPayload) {
    EXPECT_FALSE(header("outbox.value.omitted").has_value());
    const auto payload = pg_->scalar("SELECT payload FROM " + qualified_table() + " WHERE seq = 2");
    EXPECT_EQ(d.value, payload.value_or("")) << "value = the payload";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Poison, ::testing::ValuesIn(poison_cases()),
                         [](const auto& info) { return info.param.name; });

// ------------------------------------------------------------------------------------------------
// 6. A batch the broker refuses, in the middle of a stream. 20,000 events of 50 aggregates in one
// transaction to a compacted topic of 3 partitions, the 10,000th with a NULL key (INVALID_RECORD
// for its whole batch, good neighbours included), under --on-error dlq: the poison event alone
// goes to the dead-letter topic, every good event reaches its topic, and each aggregate's first
// deliveries are in commit order: no record of a later batch passes the refused ones.
TEST_F(FaultTest, RefusedBatchKeepsAggregateOrder) {
  pg_->exec("CREATE TABLE " + qualified_table() +
            " (id uuid DEFAULT gen_random_uuid(), aggregatetype text, aggregateid text,"
            " type text, payload text, seq bigint)");
  ASSERT_NO_THROW(create_topic(brokers_, topic_, 3, 1, {{"cleanup.policy", "compact"}}));
  const std::string dlq_topic = "outbox.dlq." + suffix_;
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--dlq-topic", dlq_topic});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kEvents = 20000;
  constexpr int kPoison = 10000;
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) SELECT '" + aggregatetype_ +
            "', CASE WHEN i = " + std::to_string(kPoison) +
            " THEN NULL ELSE 'agg-' || (i % 50) END, CASE WHEN i = " + std::to_string(kPoison) +
            " THEN 'Poison' ELSE 'Good' END, '{\"seq\": ' || i || '}', i"
            " FROM generate_series(1, " +
            std::to_string(kEvents) + ") AS i");
  const Lsn after = pg_->current_wal_lsn();

  std::unordered_map<std::string, CommittedRow> good;
  for (auto& row : pg_->query("SELECT id::text, seq, aggregateid FROM " + qualified_table() +
                              " WHERE aggregateid IS NOT NULL")) {
    good.emplace(*row[0], CommittedRow{std::stoll(*row[1]), *row[2]});
  }
  ASSERT_EQ(good.size(), static_cast<std::size_t>(kEvents - 1));
  const std::string poison_id =
      pg_->scalar("SELECT id::text FROM " + qualified_table() + " WHERE aggregateid IS NULL")
          .value_or("?");

  KafkaReader reader(brokers_, {topic_, dlq_topic});
  std::unordered_set<std::string> good_read;  // ids read on the topic (not the dead-letter one)
  std::size_t scanned = 0;
  bool poison_read = false;
  std::vector<Record> on_topic;
  std::vector<Record> on_dlq;
  const bool arrived = reader.read_until(
      [&](const std::vector<Record>& records) {
        for (; scanned < records.size(); ++scanned) {
          const Record& r = records[scanned];
          if (r.topic == dlq_topic) {
            poison_read = true;
          } else if (r.headers.count("id")) {
            good_read.insert(r.headers.at("id"));
          }
        }
        return (poison_read && good_read.size() >= good.size()) || !relay.is_running();
      },
      180s);
  for (const auto& r : reader.records()) (r.topic == dlq_topic ? on_dlq : on_topic).push_back(r);
  ASSERT_TRUE(relay.is_running()) << "exit " << relay.wait_exit(0ms).value_or(-1) << "\n"
                                  << tail_file(relay.log_path(), 20);
  ASSERT_TRUE(arrived) << "within 180 s: " << good_read.size() << " of " << good.size()
                       << " good events read, " << on_dlq.size() << " dead-letter records";
  expect_confirmed_reaches(after, 60s);

  DeliveryCheck check = check_deliveries(on_topic, good);
  figure("records_on_topic", static_cast<std::int64_t>(check.records));
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  const auto rewinds = count_in_file(relay.log_path(), "event=producer_rewind");
  figure("rejected_batches", static_cast<std::int64_t>(rewinds));
  EXPECT_GE(rewinds, 1u) << "the broker refused no batch: the test did not test anything";
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  ASSERT_EQ(on_dlq.size(), 1u) << "only the poison event is dead-lettered";
  EXPECT_EQ(on_dlq.front().headers.count("id") ? on_dlq.front().headers.at("id") : "", poison_id);
  const auto& error = on_dlq.front().headers.count("outbox.error")
                          ? on_dlq.front().headers.at("outbox.error")
                          : std::string();
  EXPECT_NE(error.find("INVALID_RECORD"), std::string::npos) << describe(on_dlq.front());
}

// ------------------------------------------------------------------------------------------------
// 7. Idle slot: 200 MiB of writes to a table outside the publication and no outbox writes; with
// the relay's default status interval the slot's retained WAL drops under 16 MiB within 30 s.
TEST_F(FaultTest, IdleSlotKeepsMoving) {
  constexpr std::int64_t kWriteBytes = 200LL << 20;
  constexpr std::int64_t kRetainedLimit = 16LL << 20;
  create_outbox_table();
  const std::string other = "public.ft_busy_" + suffix_;
  extra_tables_.push_back(other);
  pg_->exec("CREATE TABLE " + other + " (id bigint, pad text)");
  status_interval_ = "10s";  // the default: a user does not tune it for this
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));

  const Lsn start = pg_->current_wal_lsn();
  std::int64_t max_retained = 0;
  std::int64_t batch = 0;
  while (static_cast<std::int64_t>(pg_->current_wal_lsn() - start) < scaled(kWriteBytes)) {
    // ~1 KB rows of md5 text (below the TOAST threshold, so the WAL carries them whole).
    pg_->exec("INSERT INTO " + other + " SELECT g, repeat(md5(g::text), 30) FROM generate_series(" +
              std::to_string(batch * 20000) + ", " + std::to_string(batch * 20000 + 19999) +
              ") AS g");
    ++batch;
    const auto confirmed = pg_->slot_confirmed_flush(slot_);
    if (confirmed) {
      max_retained = std::max<std::int64_t>(
          max_retained, static_cast<std::int64_t>(pg_->current_wal_lsn() - *confirmed));
    }
  }
  const Lsn end = pg_->current_wal_lsn();
  const auto written_at = Clock::now();
  figure("idle_slot_wal_written", mib(static_cast<std::int64_t>(end - start)));
  figure("idle_slot_max_retained_during_writes", mib(max_retained));

  std::int64_t retained = -1;
  const bool small = wait_until(
      [&] {
        const auto confirmed = pg_->slot_confirmed_flush(slot_);
        if (!confirmed) return false;
        retained = static_cast<std::int64_t>(pg_->current_wal_lsn() - *confirmed);
        return retained < kRetainedLimit;
      },
      30s, 200ms);
  figure("idle_slot_retained_after_writes", mib(retained));
  figure("idle_slot_ms_to_under_16MiB", small ? ms_since(written_at) : -1);
  EXPECT_TRUE(small) << "slot " << slot_ << " still retains " << mib(retained)
                     << " of WAL 30 s after 200 MiB of writes outside the publication";
  EXPECT_TRUE(relay.is_running());
}

// ------------------------------------------------------------------------------------------------
// 2. Broker outage during a workload, 30 s long: the broker hangs (SIGSTOP) or dies (kill -9,
// then restarted). While it is out the slot does not move past events committed during the
// outage; afterwards everything arrives, in per-aggregate commit order.

enum class Outage { kSigstop, kKill };

class BrokerOutage : public FaultTest, public ::testing::WithParamInterface<Outage> {};

TEST_P(BrokerOutage, SlotHoldsAndEverythingArrives) {
  constexpr auto kOutage = 30s;
  const std::string services_log = log_path("services");
  BrokerBack broker_back(services_log);  // whatever happens below, for the other tests
  RelayProcess* started = nullptr;
  ASSERT_NO_FATAL_FAILURE(start_relay_beside_broker({}, started));
  RelayProcess& relay = *started;

  // Warm: the first transaction of the load is in Kafka and confirmed before the outage.
  KafkaReader reader(brokers_, {topic_});
  const int transactions = scaled(450, 60);
  Workload& load = start_workload(plan_uniform(transactions, 10), 45s, 50);
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 10; }, 60s));
  ASSERT_TRUE(load.wait_committed(std::int64_t{transactions} * 10 / 9, 30s));

  std::optional<BrokerPause> pause;
  const auto outage_start = Clock::now();
  if (GetParam() == Outage::kSigstop) {
    pause.emplace();
    ASSERT_TRUE(pause->paused()) << "could not SIGSTOP the broker";
  } else {
    const pid_t pid = kafka_pid();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_TRUE(wait_until([&] { return ::kill(pid, 0) != 0; }, 30s)) << "broker survived kill -9";
  }
  // Transactions that began after this point cannot be acknowledged before the broker is back.
  const std::size_t commits_at_outage = load.commits().size();

  std::optional<Lsn> bound;  // before-commit position of the first such transaction
  Lsn max_confirmed = 0;
  std::size_t samples = 0;
  auto watch = [&] {
    if (!bound) {
      const auto commits = load.commits();
      if (commits.size() > commits_at_outage + 1)
        bound = commits[commits_at_outage + 1].before_commit;
    }
    if (auto confirmed = pg_->slot_confirmed_flush(slot_)) {
      max_confirmed = std::max(max_confirmed, *confirmed);
      ++samples;
    }
    return !relay.is_running();
  };
  // The outage: 30 s of watching the slot (the deadline is the outage length itself).
  const bool relay_died = wait_until(watch, kOutage, 100ms);
  if (GetParam() == Outage::kSigstop) {
    pause->resume();
  } else {
    // The restart takes ~13 s more; the slot is still watched while it runs, until the new
    // broker process exists: from then on it may acknowledge, and the relay confirms what it
    // acknowledged within about a second.
    auto restarted = std::async(std::launch::async, [&] { return kafka_up(services_log); });
    while (restarted.wait_for(100ms) != std::future_status::ready) {
      if (kafka_pid() > 0) break;
      watch();
    }
    ASSERT_TRUE(restarted.get()) << "kafka-up.sh failed; see " << services_log;
  }
  const auto outage_ms = ms_since(outage_start);
  ASSERT_FALSE(relay_died) << "the relay must ride out the broker outage; exit "
                           << relay.wait_exit(0ms).value_or(-1);
  ASSERT_TRUE(bound.has_value()) << "no transaction committed during the outage";
  figure("broker_outage_ms", outage_ms);
  figure("max_confirmed_during_outage",
         format_lsn(max_confirmed) + " (first commit after outage start > " + format_lsn(*bound) +
             ", " + std::to_string(samples) + " samples)");
  EXPECT_LE(max_confirmed, *bound) << "slot " << slot_ << " confirmed " << format_lsn(max_confirmed)
                                   << " during the outage, past a transaction committed after it "
                                      "began (commit after "
                                   << format_lsn(*bound) << ")";

  load.join();
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(transactions) * 10);
  DistinctIds all(rows.size());
  const auto back = Clock::now();
  ASSERT_TRUE(reader.read_until(std::ref(all), 180s))
      << all.count() << " of " << rows.size() << " events in Kafka within 180 s";
  figure("ms_until_all_in_kafka_after_load", ms_since(back));
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  EXPECT_TRUE(relay.is_running());
}

INSTANTIATE_TEST_SUITE_P(Modes, BrokerOutage, ::testing::Values(Outage::kSigstop, Outage::kKill),
                         [](const auto& info) {
                           return info.param == Outage::kSigstop ? "Sigstop" : "KillRestart";
                         });

// ------------------------------------------------------------------------------------------------
// 3. PostgreSQL restarts (fast and immediate shutdown) during a workload: the relay reconnects by
// itself, nothing is lost, and nothing Kafka acknowledged is sent again (an immediate shutdown
// moves confirmed_flush back to the last checkpoint's; the relay starts past it).

class PgRestart : public FaultTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(PgRestart, RelayReconnectsNothingLost) {
  const std::string mode = GetParam();
  const std::string services_log = log_path("services");
  ScopeGuard pg_back([&] { pg_up(services_log); });
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  KafkaReader reader(brokers_, {topic_});

  const int transactions = scaled(300, 40);
  Workload& load = start_workload(plan_uniform(transactions, 10), 20s, 50);
  ASSERT_TRUE(load.wait_committed(std::int64_t{transactions} * 10 / 3, 60s));
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 100; }, 60s));

  ASSERT_NO_FATAL_FAILURE(restart_pg_under(relay, mode, services_log));

  load.join();
  figure("workload_transactions_cut_by_restart", load.failed_transactions());
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 120s))
      << all.count() << " of " << rows.size() << " committed events in Kafka within 120 s";
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  figure("committed_events", static_cast<std::int64_t>(rows.size()));
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  EXPECT_EQ(check.duplicates, 0u) << "events Kafka had acknowledged were sent again";
  EXPECT_GE(count_in_file(relay.log_path(), "event=reconnect"), 1u)
      << "the relay log shows no event=reconnect";
  EXPECT_TRUE(relay.is_running());
}

INSTANTIATE_TEST_SUITE_P(Modes, PgRestart, ::testing::Values("fast", "immediate"),
                         [](const auto& info) { return info.param; });

// No re-send after a PostgreSQL crash: five immediate stops while the relay catches up after a
// burst. After crash recovery the slot's confirmed_flush_lsn is the one last written at a
// checkpoint, far behind what Kafka acknowledged; the relay, alive throughout, starts past its own
// acknowledged position and skips what the server sends again: not one event twice.
TEST_F(FaultTest, PgCrashesDuringCatchUpResendNothing) {
  constexpr int kCrashes = 5;
  constexpr int kTxnSize = 2000;
  const int txns_per_burst = scaled(15, 3);
  const std::string services_log = log_path("services");
  ScopeGuard pg_back([&] { pg_up(services_log); });
  create_outbox_table();
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  KafkaReader reader(brokers_, {topic_});
  std::int64_t next_seq = 1;
  for (int crash = 0; crash < kCrashes; ++crash) {
    const std::size_t before = reader.records().size();
    for (int t = 0; t < txns_per_burst; ++t) {
      pg_->exec(
          Workload::insert_sql(qualified_table(), aggregatetype_, 50, next_seq, kTxnSize, false));
      next_seq += kTxnSize;
    }
    // Crash while the relay is catching up: some of the burst in Kafka, most not yet.
    ASSERT_TRUE(reader.read_until(
        [&](const auto& r) { return r.size() >= before + kTxnSize * 3 / 2; }, 60s))
        << "the relay did not catch up on burst " << crash;
    ASSERT_TRUE(pg_restart("immediate", services_log))
        << "pg_ctl -m immediate restart failed; see " << services_log;
    ASSERT_TRUE(reconnect_pg());
    const bool back =
        wait_until([&] { return !relay.is_running() || pg_->slot_active(slot_); }, 60s, 50ms);
    ASSERT_TRUE(relay.is_running()) << "relay exited with " << relay.wait_exit(0ms).value_or(-1);
    ASSERT_TRUE(back) << "relay did not stream again within 60 s of crash " << crash;
  }
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(next_seq - 1));
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 180s))
      << all.count() << " of " << rows.size() << " events in Kafka within 180 s";
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  figure("events", static_cast<std::int64_t>(rows.size()));
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  EXPECT_EQ(check.duplicates, 0u) << "events Kafka had acknowledged were sent again";
  EXPECT_GE(count_in_file(relay.log_path(), "event=resuming"), std::size_t{kCrashes});
  figure("crashes_that_cut_a_transaction",
         static_cast<std::int64_t>(count_in_file(relay.log_path(), "cut_transaction=")) -
             static_cast<std::int64_t>(count_in_file(relay.log_path(), "cut_transaction=none")));
  EXPECT_TRUE(relay.is_running());
}

// ------------------------------------------------------------------------------------------------
// 1. Crash loop: 100,000 events in transactions of 1 to 2,000 events over 200 aggregates, 5% of
// the transactions rolled back, while the relay is kill -9ed and restarted at 10 random moments.
TEST_F(FaultTest, CrashLoop) {
  constexpr int kKills = 10;
  const int events = scaled(100000, 2000);
  const std::uint64_t seed = static_cast<std::uint64_t>(wall_clock_ms());
  std::cout << "seed " << seed << "\n";
  RecordProperty("seed", std::to_string(seed));
  auto plan = plan_mixed(events, 2000, 0.05, seed);
  int rolled_back = 0;
  for (const auto& t : plan) rolled_back += t.rollback ? 1 : 0;
  figure("transactions", static_cast<std::int64_t>(plan.size()));
  figure("rolled_back_transactions", rolled_back);

  create_outbox_table();
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  Workload& load = start_workload(plan, 40s, 200);

  // Kill moments: random points of the workload's progress (in committed events).
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> moments;
  std::uniform_int_distribution<std::int64_t> at(1, events - 1);
  for (int i = 0; i < kKills; ++i) moments.push_back(at(rng));
  std::sort(moments.begin(), moments.end());
  int kills = 0;
  for (const auto moment : moments) {
    ASSERT_TRUE(load.wait_committed(moment, 120s)) << "workload stalled before " << moment;
    // Between kills the relay reads Kafka's acknowledgements: keep the reader current.
    reader.read_for(10ms);
    ASSERT_TRUE(relay->is_running())
        << "relay exited by itself with " << relay->wait_exit(0ms).value_or(-1);
    relay->kill9();
    ++kills;
    relay = &start_relay();
  }
  figure("kills", kills);
  load.join();
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(events));
  DistinctIds all(rows.size());
  const auto after_load = Clock::now();
  ASSERT_TRUE(reader.read_until(std::ref(all), 300s))
      << all.count() << " of " << rows.size() << " events in Kafka within 300 s";
  figure("ms_until_all_in_kafka_after_load", ms_since(after_load));
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.ghosts, 0u) << "rolled-back events in Kafka";
  EXPECT_EQ(check.missing, 0u) << "committed events missing";
  figure("records_in_kafka", static_cast<std::int64_t>(check.records));
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  EXPECT_TRUE(relay->is_running());
}

// Prompt confirmation: the slot follows what Kafka acknowledged within about a second whatever
// --status-interval is (the default 10 s here), so a SIGKILL at a steady 2,000 events/s, 9.6 s into
// the load (just before a status period would end), re-sends about a second of events.
TEST_F(FaultTest, SigkillResendsAboutOneSecond) {
  constexpr int kRate = 2000;  // events per second
  constexpr int kSeconds = 12;
  constexpr int kEvents = kRate * kSeconds;
  status_interval_ = "10s";
  create_outbox_table();
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  Workload& load = start_workload(plan_uniform(kEvents / 10, 10), std::chrono::seconds(kSeconds));
  ASSERT_TRUE(load.wait_committed(kEvents * 8 / 10, 120s)) << "workload stalled";
  reader.read_for(10ms);
  ASSERT_TRUE(relay->is_running()) << "relay exited with " << relay->wait_exit(0ms).value_or(-1);
  relay->kill9();
  relay = &start_relay();
  load.join();
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(kEvents));
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 120s))
      << all.count() << " of " << rows.size() << " events in Kafka within 120 s";
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  figure("duplicates_ms_of_load", static_cast<std::int64_t>(check.duplicates * 1000 / kRate));
  EXPECT_LE(check.duplicates, static_cast<std::size_t>(kRate * 3 / 2))
      << "a SIGKILL re-sent " << check.duplicates << " events, more than 1.5 s of the load";
  EXPECT_TRUE(relay->is_running());
}

// ------------------------------------------------------------------------------------------------
// 4. Takeover: two relays on one slot, the second waits as standby; the active one is killed and
// the standby delivers the rest, nothing lost.

std::optional<std::string> slot_active_pid(PgClient& pg, const std::string& slot) {
  return pg.scalar("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = $1",
                   {slot});
}

TEST_F(FaultTest, TakeoverByStandby) {
  create_outbox_table();
  RelayProcess& active = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(active));
  RelayProcess& standby = start_relay();
  ASSERT_TRUE(
      wait_until([&] { return count_in_file(standby.log_path(), "event=standby") > 0; }, 30s))
      << "second relay did not report standby:\n"
      << tail_file(standby.log_path(), 10);
  EXPECT_EQ(count_in_file(standby.log_path(), "event=standby"), 1u) << "standby is logged once";
  KafkaReader reader(brokers_, {topic_});
  const int transactions = scaled(300, 40);
  Workload& load = start_workload(plan_uniform(transactions, 10), 25s, 50);
  ASSERT_TRUE(load.wait_committed(std::int64_t{transactions} * 10 / 3, 60s));
  const auto walsender = slot_active_pid(*pg_, slot_);

  active.kill9();
  const auto killed_at = Clock::now();
  ASSERT_TRUE(wait_until([&] { return slot_active_pid(*pg_, slot_) != walsender; }, 60s, 20ms));
  const auto released_ms = ms_since(killed_at);
  ASSERT_TRUE(wait_until([&] { return count_in_file(standby.log_path(), "event=streaming") > 0; },
                         90s, 20ms))
      << "standby did not take over within 90 s";
  figure("takeover_kill9_slot_released_ms", released_ms);
  figure("takeover_kill9_standby_streaming_ms", ms_since(killed_at));

  load.join();
  const Lsn lsn_after_load = pg_->current_wal_lsn();
  auto rows = committed_seqs();
  DistinctIds all(rows.size());
  ASSERT_TRUE(reader.read_until(std::ref(all), 120s))
      << all.count() << " of " << rows.size() << " events in Kafka within 120 s";
  expect_confirmed_reaches(lsn_after_load, 60s);
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  figure("duplicates", static_cast<std::int64_t>(check.duplicates));
  EXPECT_TRUE(standby.is_running());
}

// Takeover time after the active relay dies (kill -9: the kernel closes its connection) or hangs
// (SIGSTOP: its TCP connection stays open, so only wal_sender_timeout frees the slot), with
// wal_sender_timeout at its default 60 s and at 10 s. The scenarios of one timeout run side by
// side, each on its own table and slot.
struct TakeoverFigures {
  std::int64_t released_ms = -1;   // fault -> the slot's walsender is gone
  std::int64_t streaming_ms = -1;  // fault -> the standby streams
  std::int64_t delivered_ms = -1;  // fault -> an event committed after the fault is in Kafka
  std::string error;
};

class Takeover : public FaultTest {
 protected:
  TakeoverFigures run_scenario(bool hang, const std::string& tag) {
    TakeoverFigures f;
    const std::string sfx = suffix_ + "_" + tag;
    const std::string table = "public.outbox_ft_" + sfx;
    const std::string slot = "ft_" + sfx;
    const std::string aggregatetype = "Takeover" + sfx;
    PgClient pg(conninfo_);
    std::vector<std::unique_ptr<RelayProcess>> relays;
    ScopeGuard cleanup([&] {
      for (auto& r : relays) {
        ::kill(r->pid(), SIGCONT);
        if (r->is_running() && !r->terminate(15s)) r->kill9();
      }
      try {
        pg.drop_slot_if_exists(slot);
        pg.exec("DROP PUBLICATION IF EXISTS " + slot);
        pg.exec("DROP TABLE IF EXISTS " + table);
      } catch (const std::exception& e) {
        f.error += std::string(" cleanup: ") + e.what();
      }
    });
    try {
      pg.exec("CREATE TABLE " + table +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL,"
              " seq bigint NOT NULL)");
      auto start = [&](const std::string& what) -> RelayProcess& {
        relays.push_back(std::make_unique<RelayProcess>(
            relay_bin_,
            std::vector<std::string>{"--pg", conninfo_, "--brokers", brokers_, "--slot", slot,
                                     "--publication", slot, "--table", table, "--status-interval",
                                     "1s", "--metrics-addr", "off"},
            log_path(tag + "_" + what)));
        return *relays.back();
      };
      RelayProcess& active = start("active");
      // Streaming, as its log says: the slot is also active while the relay creates it, and a
      // standby started then took the slot first (failed once: "no standby").
      if (!wait_until(
              [&] {
                return count_in_file(active.log_path(), "event=streaming") > 0 &&
                       pg.slot_active(slot) && pg.slot_confirmed_flush(slot);
              },
              60s)) {
        f.error = "active relay not streaming";
        return f;
      }
      RelayProcess& standby = start("standby");
      if (!wait_until([&] { return count_in_file(standby.log_path(), "event=standby") > 0; },
                      30s)) {
        f.error = "no standby";
        return f;
      }
      KafkaReader reader(brokers_, {"outbox.event." + aggregatetype});
      // Delivered means a record with that event's id (a duplicate of an earlier event is not it).
      auto has_id = [&reader](const std::string& id) {
        for (const auto& r : reader.records()) {
          auto it = r.headers.find("id");
          if (it != r.headers.end() && it->second == id) return true;
        }
        return false;
      };
      auto id_of_seq = [&](int seq) {
        return pg.scalar("SELECT id::text FROM " + table + " WHERE seq = " + std::to_string(seq))
            .value_or("");
      };
      pg.exec(Workload::insert_sql(table, aggregatetype, 5, 1, 1, false));
      const std::string first_id = id_of_seq(1);
      if (!reader.read_until([&](const auto&) { return has_id(first_id); }, 60s)) {
        f.error = "first event not delivered";
        return f;
      }
      const auto walsender = slot_active_pid(pg, slot);
      ::kill(active.pid(), hang ? SIGSTOP : SIGKILL);
      const auto fault_at = Clock::now();
      pg.exec(Workload::insert_sql(table, aggregatetype, 5, 2, 1, false));
      const std::string next_id = id_of_seq(2);
      // Waits up to the longest takeover expected: timeout 60 s plus the standby's 30 s backoff.
      bool streaming = false;
      bool delivered = false;
      wait_until(
          [&] {
            if (f.released_ms < 0 && slot_active_pid(pg, slot) != walsender) {
              f.released_ms = ms_since(fault_at);
            }
            if (!streaming && count_in_file(standby.log_path(), "event=streaming") > 0) {
              streaming = true;
              f.streaming_ms = ms_since(fault_at);
            }
            reader.read_for(1ms);
            if (!delivered && has_id(next_id)) {
              delivered = true;
              f.delivered_ms = ms_since(fault_at);
            }
            return streaming && delivered;
          },
          150s, 20ms);
      if (!delivered) f.error = "event committed after the fault not delivered within 150 s";
    } catch (const std::exception& e) {
      f.error = e.what();
    }
    return f;
  }

  void report(const std::string& name, const TakeoverFigures& f) {
    figure(name + "_slot_released_ms", f.released_ms);
    figure(name + "_standby_streaming_ms", f.streaming_ms);
    figure(name + "_next_event_delivered_ms", f.delivered_ms);
    EXPECT_TRUE(f.error.empty()) << name << ": " << f.error;
    EXPECT_GE(f.delivered_ms, 0) << name << ": the standby never delivered";
  }
};

TEST_F(Takeover, TimesAfterKillAndHang) {
  // wal_sender_timeout is reset whatever happens (other tests and engineers share the server).
  ScopeGuard reset_timeout([&] {
    if (reconnect_pg(30s)) {
      pg_->exec("ALTER SYSTEM RESET wal_sender_timeout");
      pg_->query("SELECT pg_reload_conf()");
    }
  });
  for (const std::string timeout : {"60s", "10s"}) {
    if (timeout == "60s") {
      pg_->exec("ALTER SYSTEM RESET wal_sender_timeout");
    } else {
      pg_->exec("ALTER SYSTEM SET wal_sender_timeout = '" + timeout + "'");
    }
    pg_->query("SELECT pg_reload_conf()");
    ASSERT_TRUE(wait_until(
        [&] {
          PgClient fresh(conninfo_);
          const auto shown = fresh.scalar("SHOW wal_sender_timeout");
          return shown == (timeout == "60s" ? "1min" : timeout);
        },
        10s));
    const std::string tag = "wst" + timeout.substr(0, timeout.size() - 1);
    auto killed =
        std::async(std::launch::async, [&] { return run_scenario(false, tag + "_kill"); });
    auto hung = std::async(std::launch::async, [&] { return run_scenario(true, tag + "_hang"); });
    report("takeover_kill9_" + tag, killed.get());
    report("takeover_sigstop_" + tag, hung.get());
  }
}

// ------------------------------------------------------------------------------------------------
// 6. Memory bound: 1,000,000 events of 1 KiB wait in the WAL while the broker is stopped. The
// relay reads up to its in-flight bounds and no further (backpressure): its peak RSS stays under
// --max-inflight-bytes + 64 MiB. Once the broker is back, all events arrive.
TEST_F(FaultTest, MemoryBoundWhileBrokerDown) {
  constexpr std::int64_t kMaxInflightBytes = 256LL << 20;
  constexpr std::int64_t kSlack = 64LL << 20;
  const int events = scaled(1000000, 20000);
  const int per_txn = 10000;
  const std::string services_log = log_path("services");
  ScopeGuard broker_back([&] {
    if (kafka_pid() <= 0) kafka_up(services_log);
  });
  create_outbox_table();
  const std::vector<std::string> flags = {"--max-inflight-bytes", "256MiB", "--summary-interval",
                                          "1s"};
  RelayProcess& first = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(first));
  // The relay is stopped while the million rows are written, so the broker is paused only for
  // as long as the measurement needs (it is shared).
  ASSERT_EQ(first.terminate(30s), std::optional<int>(0));
  const auto insert_start = Clock::now();
  for (int first_seq = 1; first_seq <= events; first_seq += per_txn) {
    const int n = std::min(per_txn, events - first_seq + 1);
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload, seq) SELECT '" + aggregatetype_ +
              "', 'agg-' || (g % 200), 'Event', jsonb_build_object('seq', g, 'pad', "
              "repeat('x', 1000)), g FROM generate_series(" +
              std::to_string(first_seq) + ", " + std::to_string(first_seq + n - 1) + ") AS g");
  }
  const Lsn lsn_after_inserts = pg_->current_wal_lsn();
  figure("insert_ms", ms_since(insert_start));

  BrokerPause pause;
  ASSERT_TRUE(pause.paused()) << "could not SIGSTOP the broker";
  RelayProcess& relay = start_relay(flags);
  // In-flight grows until a bound stops the reading: the summary line says backpressured.
  const bool bounded = wait_until(
      [&] {
        return !relay.is_running() || count_in_file(relay.log_path(), "state=backpressured") >= 3;
      },
      180s, 200ms);
  const std::int64_t hwm_kib = vm_hwm_kib(relay.pid());
  pause.resume();
  ASSERT_TRUE(relay.is_running()) << "relay exited with " << relay.wait_exit(0ms).value_or(-1);
  EXPECT_TRUE(bounded) << "no backpressure within 180 s:\n" << tail_file(relay.log_path(), 5);
  std::string last_summary;
  {
    std::istringstream in(read_file(relay.log_path()));
    for (std::string line; std::getline(in, line);) {
      if (line.find("state=backpressured") != std::string::npos) last_summary = line;
    }
  }
  std::cout << "while backpressured: " << last_summary << "\n";
  figure("peak_rss", mib(hwm_kib * 1024));
  figure("peak_rss_limit", mib(kMaxInflightBytes + kSlack));
  EXPECT_LT(hwm_kib * 1024, kMaxInflightBytes + kSlack)
      << "peak RSS (VmHWM) above --max-inflight-bytes + 64 MiB";

  const auto resumed = Clock::now();
  std::int64_t in_kafka = 0;
  const bool all = wait_until(
      [&] {
        try {
          in_kafka = topic_end_offset_sum(brokers_, topic_);
        } catch (const std::exception&) {
          return false;  // the broker is still waking up
        }
        return in_kafka >= events;
      },
      300s, 500ms);
  figure("records_in_kafka", in_kafka);
  figure("ms_until_all_in_kafka", ms_since(resumed));
  EXPECT_TRUE(all) << in_kafka << " of " << events << " records in Kafka within 300 s";
  expect_confirmed_reaches(lsn_after_inserts, 120s);

  // What a consumer sees: every event once, per-aggregate order, and each value the row's
  // payload as PostgreSQL prints it. Values are reduced to "seq=N" when they are exactly that
  // (a million 1 KiB values are not kept).
  const std::string pad(1000, 'x');
  const std::string head = "{\"pad\": \"" + pad + "\", \"seq\": ";
  KafkaReader reader(brokers_, {topic_});
  reader.set_value_transform([&head](std::string_view value) -> std::string {
    if (value.starts_with(head) && value.ends_with("}")) {
      const auto digits = value.substr(head.size(), value.size() - head.size() - 1);
      if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos) {
        return "seq=" + std::string(digits);
      }
    }
    return "unexpected value: " + std::string(value.substr(0, 120));
  });
  DistinctIds all_ids(static_cast<std::size_t>(events));
  EXPECT_TRUE(reader.read_until(std::ref(all_ids), 300s))
      << all_ids.count() << " of " << events << " events read back";
  EXPECT_TRUE(reader.read_to_end()) << "could not read to the end of " << topic_;
  const auto rows = committed_seqs();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(events));
  const auto check = check_deliveries(reader.records(), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.ghosts, 0u);
  EXPECT_EQ(check.duplicates, 0u) << "no relay restart: one record per event";
  std::size_t wrong_values = 0;
  std::string first_wrong;
  for (const Record& record : reader.records()) {
    auto id = record.headers.find("id");
    auto row = id == record.headers.end() ? rows.end() : rows.find(id->second);
    if (row == rows.end()) continue;  // counted as a ghost above
    if (record.value != "seq=" + std::to_string(row->second.seq)) {
      if (wrong_values++ == 0) first_wrong = describe(record);
    }
  }
  EXPECT_EQ(wrong_values, 0u) << "values not the row's payload, first: " << first_wrong;
}

// ------------------------------------------------------------------------------------------------
// 6. --delivery exactly-once: read back with read_committed (KafkaReader's default isolation), each
// committed event exactly once, in per-aggregate order, whatever fails.

class ExactlyOnce : public FaultTest {
 protected:
  RelayProcess& start_eos_relay() { return start_relay({"--delivery", "exactly-once"}); }

  // Every committed event present once, nothing else, per-aggregate order.
  void expect_exactly_once(KafkaReader& reader, std::chrono::seconds timeout) {
    const Lsn lsn_after_load = pg_->current_wal_lsn();
    auto rows = committed_seqs();
    DistinctIds all(rows.size());
    ASSERT_TRUE(reader.read_until(std::ref(all), timeout))
        << all.count() << " of " << rows.size() << " events in Kafka within " << timeout.count()
        << " s";
    expect_confirmed_reaches(lsn_after_load, 60s);
    EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
    const auto check = check_deliveries(reader.records(), rows);
    EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
    EXPECT_EQ(check.missing, 0u);
    EXPECT_EQ(check.ghosts, 0u);
    figure("events", static_cast<std::int64_t>(rows.size()));
    figure("duplicates", static_cast<std::int64_t>(check.duplicates));
    EXPECT_EQ(check.duplicates, 0u) << "an event is visible twice to a read_committed consumer";
  }

  // Freezes `zombie` (SIGSTOP), ends its walsender (as wal_sender_timeout would) and starts a
  // successor, which takes the slot and so fences the zombie's transactional.ids.
  void take_over_from_frozen(RelayProcess& zombie, RelayProcess*& successor) {
    ASSERT_EQ(::kill(zombie.pid(), SIGSTOP), 0);
    pg_->exec(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '" +
        slot_ + "'");
    successor = &start_eos_relay();
    ASSERT_TRUE(wait_until(
        [&] { return count_in_file(successor->log_path(), "event=streaming") > 0; }, 60s, 50ms))
        << "the successor did not take the slot";
  }

  // Woken (SIGCONT), the zombie commits nothing more: it learns it was fenced and stops, rather
  // than waiting for ever as a standby whose producers can never commit.
  void wake_and_expect_fenced(RelayProcess& zombie) {
    ASSERT_EQ(::kill(zombie.pid(), SIGCONT), 0);
    const auto code = zombie.wait_exit(60s);
    ASSERT_TRUE(code.has_value()) << "the fenced relay did not stop";
    EXPECT_EQ(*code, 1) << "README (Failure behaviour): a fenced relay exits 1";
    EXPECT_GE(count_in_file(zombie.log_path(), "fenced"), 1u) << "no fencing in the zombie's log";
  }
};

// Relay crash loop: kill -9 at random moments of a mixed workload (rolled-back transactions too).
TEST_F(ExactlyOnce, CrashLoopReadCommitted) {
  constexpr int kKills = 6;
  const int events = scaled(30000, 2000);
  const std::uint64_t seed = static_cast<std::uint64_t>(wall_clock_ms());
  RecordProperty("seed", std::to_string(seed));
  create_outbox_table();
  RelayProcess* relay = &start_eos_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  KafkaReader reader(brokers_, {topic_});
  Workload& load = start_workload(plan_mixed(events, 500, 0.05, seed), 20s, 100);
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> moments;
  std::uniform_int_distribution<std::int64_t> at(1, events - 1);
  for (int i = 0; i < kKills; ++i) moments.push_back(at(rng));
  std::sort(moments.begin(), moments.end());
  for (const auto moment : moments) {
    ASSERT_TRUE(load.wait_committed(moment, 120s)) << "workload stalled before " << moment;
    reader.read_for(10ms);
    ASSERT_TRUE(relay->is_running())
        << "relay exited by itself with " << relay->wait_exit(0ms).value_or(-1);
    relay->kill9();
    relay = &start_eos_relay();
  }
  load.join();
  ASSERT_NO_FATAL_FAILURE(expect_exactly_once(reader, 300s));
  EXPECT_TRUE(relay->is_running());
}

// PostgreSQL crashes (immediate stop) while the relay catches up after bursts.
TEST_F(ExactlyOnce, PgCrashes) {
  const std::string services_log = log_path("services");
  ScopeGuard pg_back([&] { pg_up(services_log); });
  create_outbox_table();
  RelayProcess& relay = start_eos_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  KafkaReader reader(brokers_, {topic_});
  std::int64_t next_seq = 1;
  for (int crash = 0; crash < 3; ++crash) {
    const std::size_t before = reader.records().size();
    for (int t = 0; t < scaled(10, 2); ++t) {
      pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 50, next_seq, 2000, false));
      next_seq += 2000;
    }
    ASSERT_TRUE(reader.read_until([&](const auto& r) { return r.size() >= before + 1000; }, 60s));
    ASSERT_TRUE(pg_restart("immediate", services_log));
    ASSERT_TRUE(reconnect_pg());
    ASSERT_TRUE(
        wait_until([&] { return !relay.is_running() || pg_->slot_active(slot_); }, 60s, 50ms));
    ASSERT_TRUE(relay.is_running()) << "relay exited with " << relay.wait_exit(0ms).value_or(-1);
  }
  ASSERT_NO_FATAL_FAILURE(expect_exactly_once(reader, 180s));
  EXPECT_TRUE(relay.is_running());
}

// The broker killed and restarted in the middle of Kafka transactions.
TEST_F(ExactlyOnce, BrokerRestart) {
  const std::string services_log = log_path("services");
  BrokerBack broker_back(services_log);
  RelayProcess* started = nullptr;
  ASSERT_NO_FATAL_FAILURE(start_relay_beside_broker({"--delivery", "exactly-once"}, started));
  RelayProcess& relay = *started;
  KafkaReader reader(brokers_, {topic_});
  const int transactions = scaled(300, 60);
  Workload& load = start_workload(plan_uniform(transactions, 10), 20s, 50);
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 100; }, 60s));
  const pid_t pid = kafka_pid();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(wait_until([&] { return ::kill(pid, 0) != 0; }, 30s)) << "broker survived kill -9";
  ASSERT_TRUE(kafka_up(services_log)) << "Kafka did not come back; see " << services_log;
  load.join();
  ASSERT_NO_FATAL_FAILURE(expect_exactly_once(reader, 240s));
  EXPECT_TRUE(relay.is_running());
}

// Takeover from a frozen relay: the first relay is SIGSTOPped with a Kafka transaction open, its
// walsender ended (as wal_sender_timeout would), a second relay takes the slot and fences the
// first's transactional.id; woken (SIGCONT), the zombie stops without committing anything.
TEST_F(ExactlyOnce, FrozenRelayIsFenced) {
  create_outbox_table();
  RelayProcess& zombie = start_eos_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(zombie));
  KafkaReader reader(brokers_, {topic_});
  Workload& load = start_workload(plan_uniform(scaled(400, 60), 10), 10s, 50);
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 200; }, 60s));
  ScopeGuard wake([&] { ::kill(zombie.pid(), SIGCONT); });
  RelayProcess* successor = nullptr;
  ASSERT_NO_FATAL_FAILURE(take_over_from_frozen(zombie, successor));
  load.join();
  ASSERT_NO_FATAL_FAILURE(wake_and_expect_fenced(zombie));
  ASSERT_NO_FATAL_FAILURE(expect_exactly_once(reader, 180s));
  EXPECT_TRUE(successor->is_running());
}

// The same takeover while the first relay is idle: every event committed in Kafka, and the
// Kafka transaction it holds open is empty (begun, never sent to the coordinator). Woken, it must
// still learn that it was fenced and stop, not wait as a standby that could never commit.
TEST_F(ExactlyOnce, IdleFrozenRelayIsFenced) {
  create_outbox_table();
  RelayProcess& zombie = start_eos_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(zombie));
  KafkaReader reader(brokers_, {topic_});
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 100, false));
  ASSERT_TRUE(reader.read_until([](const auto& r) { return r.size() >= 100; }, 60s));
  expect_confirmed_reaches(pg_->current_wal_lsn(), 60s);
  ScopeGuard wake([&] { ::kill(zombie.pid(), SIGCONT); });
  RelayProcess* successor = nullptr;
  ASSERT_NO_FATAL_FAILURE(take_over_from_frozen(zombie, successor));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 101, 100, false));
  ASSERT_NO_FATAL_FAILURE(wake_and_expect_fenced(zombie));
  ASSERT_NO_FATAL_FAILURE(expect_exactly_once(reader, 180s));
  EXPECT_TRUE(successor->is_running());
}

}  // namespace
}  // namespace outbox_test::fault
