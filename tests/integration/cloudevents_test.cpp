// --format cloudevents and the W3C trace context columns end to end, against the real PostgreSQL
// and Kafka: the records are read back and handed to a consumer written with the CloudEvents SDK
// (PyPI's cloudevents, cloudevents_sdk_read.py, in the venv scripts/cloudevents-sdk.sh makes),
// which must read each as a valid event with the attributes the rows give. Rows CloudEvents cannot
// carry are dead-lettered (--on-error dlq), never dropped; an invalid traceparent is left out and
// counted, and its event still goes.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out += kDigits[static_cast<unsigned char>(c) >> 4];
    out += kDigits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

// What the SDK read of one record: its output line (JSON, sorted keys), searched by field.
struct SdkEvent {
  std::string json;
  bool has(const std::string& field, const std::string& value) const {
    return json.find("\"" + field + "\": \"" + value + "\"") != std::string::npos;
  }
  bool ok() const {
    return json.rfind("{", 0) == 0 && json.find("\"ok\": true") != std::string::npos;
  }
  bool lacks(const std::string& field) const {
    return json.find("\"" + field + "\": ") == std::string::npos;
  }
};

class CloudEventsIntegration : public E2eTest {
 protected:
  CloudEventsIntegration() : E2eTest({"ce", {"Order"}, OUTBOX_TEST_LOG_DIR}) {}

  void create_table(const std::string& payload_type, const std::string& extra = "") {
    pg_->exec("CREATE TABLE " + qualified_table() +
              " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,"
              " aggregateid text, type text, payload " +
              payload_type + ", seq int NOT NULL" + extra + ")");
  }
  std::string dlq_topic() const { return "outbox.dlq." + suffix_; }

  // Reads the topics until `count` records arrived, then to their end; by seq (the id header).
  std::map<int, Record> read_by_seq(std::size_t count, const std::vector<std::string>& topics) {
    KafkaReader reader(brokers_, topics);
    const bool arrived = reader.read_until(
        [&](const std::vector<Record>& records) { return records.size() >= count; }, 60s);
    EXPECT_TRUE(arrived) << reader.records().size() << " of " << count << " records in Kafka";
    EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
    std::map<std::string, int> seq_by_id;
    for (const auto& r : pg_->query("SELECT seq, id::text FROM " + qualified_table())) {
      seq_by_id[r[1].value()] = std::stoi(r[0].value());
    }
    std::map<int, Record> out;
    for (const Record* r : in_kafka_order(reader.records())) {
      const auto id = r->headers.find("id");
      const auto seq = id == r->headers.end() ? seq_by_id.end() : seq_by_id.find(id->second);
      EXPECT_NE(seq, seq_by_id.end()) << "not a committed row: " << describe(*r);
      if (seq == seq_by_id.end()) continue;
      EXPECT_FALSE(out.contains(seq->second)) << "twice: " << describe(*r);
      out[seq->second] = *r;
    }
    EXPECT_EQ(out.size(), count);
    return out;
  }

  // Hands `records` to the SDK consumer; one SdkEvent per record, in order.
  std::vector<SdkEvent> read_with_sdk(const std::vector<const Record*>& records) {
    const std::string input = log_path("sdk_in");
    {
      std::ofstream out(input, std::ios::trunc);
      for (const Record* r : records) {
        out << (r->key ? to_hex(*r->key) : "-") << '\t' << (r->null_value ? "-" : to_hex(r->value));
        for (const auto& [name, value] : r->headers)
          out << '\t' << to_hex(name) << '=' << to_hex(value);
        for (const std::string& name : r->null_headers) out << '\t' << to_hex(name) << "=-";
        out << '\n';
      }
    }
    const CommandResult run = run_to_end(OUTBOX_CE_PYTHON, {OUTBOX_CE_READER, input},
                                         log_path("sdk_out"), log_path("sdk_err"), 60s);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::vector<SdkEvent> events;
    std::istringstream lines(run.out);
    for (std::string line; std::getline(lines, line);) events.push_back({line});
    EXPECT_EQ(events.size(), records.size()) << run.out << run.err;
    events.resize(records.size());
    return events;
  }
};

std::string header_or(const Record& r, const std::string& name, const std::string& otherwise) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? otherwise : it->second;
}

// The default shape (jsonb payload) as CloudEvents: the SDK reads every record as a valid event
// with id, source, type, time (the commit time, or the timestamp column), subject (the aggregate
// id, absent for a NULL one), content-type and a placement as an extension; the Debezium headers
// id and type stay, the key is the aggregate id, the value the payload. The W3C trace context
// goes along; an invalid traceparent is left out (with its tracestate) and counted. A NULL type
// is a mapping error: dead-lettered, and the aggregate's later event follows it.
TEST_F(CloudEventsIntegration, ConsumerWithTheSdkReadsValidEvents) {
  create_table("jsonb NOT NULL",
               ", occurred_at timestamptz, traceparent text, tracestate text, tenant text");
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay(
      {"--format", "cloudevents", "--column-timestamp", "occurred_at", "--column-traceparent",
       "traceparent", "--column-tracestate", "tracestate", "--additional-placement",
       "tenant:header:ce_tenant", "--on-error", "dlq", "--dlq-topic", dlq_topic()});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const auto insert = [&](int seq, const std::string& aggregate, const std::string& type,
                          const std::string& at, const std::string& traceparent,
                          const std::string& tracestate) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq, occurred_at, traceparent, "
           "tracestate, tenant) VALUES ('" +
           aggregatetypes_[0] + "', " + aggregate + ", " + type +
           ", '{\"seq\": " + std::to_string(seq) + "}', " + std::to_string(seq) + ", " + at + ", " +
           traceparent + ", " + tracestate + ", 'acme');";
  };
  const std::string tp = std::string("'") + kTraceparent + "'";
  const std::int64_t before = wall_clock_ms();
  pg_->exec("BEGIN;" +
            insert(1, "'order-1'", "'OrderCreated'", "NULL", tp, "'rojo=00f067aa0ba902b7'") +
            insert(2, "'order-2'", "'OrderPaid'", "'2021-03-04 10:36:07.891234+05:30'", "NULL",
                   "'ignored=1'") +
            insert(3, "'order-1'", "'OrderShipped'", "NULL", "'00-not-a-traceparent'", "'rojo=1'") +
            insert(4, "NULL", "'Broadcast'", "NULL", "NULL", "NULL") +
            insert(5, "'order-5'", "NULL", "NULL", tp, "NULL") +
            insert(6, "'order-5'", "'OrderPaid'", "NULL", "NULL", "NULL") + "COMMIT;");
  const std::int64_t after = wall_clock_ms();
  const Lsn lsn = pg_->current_wal_lsn();
  std::map<int, Record> by_seq = read_by_seq(6, {topics_[0], dlq_topic()});
  expect_confirmed_reaches(lsn, 30s);
  ASSERT_EQ(by_seq.size(), 6u);

  // The dead-lettered ones: the NULL type, and its aggregate's next event behind it.
  EXPECT_EQ(by_seq[5].topic, dlq_topic()) << describe(by_seq[5]);
  EXPECT_NE(header_or(by_seq[5], "outbox.error", "").find("ce_type"), std::string::npos)
      << describe(by_seq[5]);
  EXPECT_EQ(by_seq[6].topic, dlq_topic()) << describe(by_seq[6]);
  EXPECT_EQ(header_or(by_seq[6], "outbox.error", "").rfind("parked", 0), 0u);
  // A parked record keeps the event's CloudEvents headers.
  EXPECT_EQ(header_or(by_seq[6], "ce_type", ""), "OrderPaid") << describe(by_seq[6]);

  std::vector<const Record*> relayed;
  for (const int seq : {1, 2, 3, 4}) {
    const Record& r = by_seq[seq];
    EXPECT_EQ(r.topic, topics_[0]) << describe(r);
    EXPECT_EQ(r.value, "{\"seq\": " + std::to_string(seq) + "}") << describe(r);
    EXPECT_EQ(header_or(r, "ce_id", "(none)"), header_or(r, "id", "")) << describe(r);
    EXPECT_EQ(header_or(r, "ce_type", "(none)"), header_or(r, "type", "")) << describe(r);
    relayed.push_back(&r);
  }
  EXPECT_EQ(by_seq[1].key, "order-1");
  EXPECT_EQ(by_seq[4].key, std::nullopt);
  EXPECT_EQ(header_or(by_seq[1], "traceparent", "(none)"), kTraceparent);
  EXPECT_EQ(header_or(by_seq[1], "tracestate", "(none)"), "rojo=00f067aa0ba902b7");
  EXPECT_EQ(header_or(by_seq[2], "tracestate", "(none)"), "(none)") << "no traceparent";
  EXPECT_EQ(header_or(by_seq[3], "traceparent", "(none)"), "(none)") << describe(by_seq[3]);
  EXPECT_EQ(header_or(by_seq[3], "tracestate", "(none)"), "(none)") << describe(by_seq[3]);

  const std::vector<SdkEvent> events = read_with_sdk(relayed);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const SdkEvent& e = events[i];
    const Record& r = *relayed[i];
    EXPECT_TRUE(e.ok()) << e.json;
    EXPECT_TRUE(e.has("specversion", "1.0")) << e.json;
    EXPECT_TRUE(e.has("id", header_or(r, "id", "?"))) << e.json;
    EXPECT_TRUE(e.has("type", header_or(r, "type", "?"))) << e.json;
    EXPECT_TRUE(e.has("source", "/outbox/" + aggregatetypes_[0])) << e.json;
    EXPECT_TRUE(e.has("datacontenttype", "application/json")) << e.json;
    EXPECT_TRUE(e.has("tenant", "acme")) << e.json;
    EXPECT_NE(e.json.find("\"data\": {\"json\": {\"seq\": " + std::to_string(i + 1) + "}}"),
              std::string::npos)
        << e.json;
  }
  EXPECT_TRUE(events[0].has("subject", "order-1")) << events[0].json;
  EXPECT_TRUE(events[3].lacks("subject")) << events[3].json;
  EXPECT_TRUE(events[1].has("time", "2021-03-04T05:06:07.891234+00:00")) << events[1].json;
  // The others carry the commit time, microseconds included; the record timestamp is its
  // milliseconds.
  const std::string commit_time = header_or(by_seq[1], "ce_time", "");
  EXPECT_EQ(commit_time.size(), 27u) << commit_time;
  EXPECT_TRUE(events[0].has("legacy_time", commit_time)) << events[0].json;
  EXPECT_GE(by_seq[1].timestamp_ms, before - 2000);
  EXPECT_LE(by_seq[1].timestamp_ms, after + 2000);
  EXPECT_EQ(header_or(by_seq[3], "ce_time", ""), commit_time) << "one transaction, one time";

  // The invalid traceparent is counted.
  std::map<std::string, std::string> samples;
  EXPECT_TRUE(wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        return samples["outbox_relay_invalid_traceparent_total"] == "1";
      },
      10s, 100ms))
      << "outbox_relay_invalid_traceparent_total = "
      << samples["outbox_relay_invalid_traceparent_total"];
  expect_graceful_stop(relay);
}

// A bytea payload (a protobuf message) with --content-type: the SDK reads the same bytes as data
// and the content type given; a tombstone is an event without data. The default format carries
// the trace context too, with no ce_ header.
TEST_F(CloudEventsIntegration, ByteaPayloadWithContentTypeAndTheDefaultFormat) {
  create_table("bytea", ", traceparent text");
  RelayProcess& relay =
      start_relay({"--format", "cloudevents", "--content-type", "application/x-protobuf",
                   "--ce-source", "urn:shop:${aggregatetype}:${aggregateid}",
                   "--tombstone-on-empty-payload", "--column-traceparent", "traceparent"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  // A protobuf message (1: "order-7", 2: 1000, 3: bytes 00 ff c3): NUL and invalid UTF-8.
  constexpr char kMessage[] = "\x0a\x07order-7\x10\xe8\x07\x1a\x03\x00\xff\xc3";
  const std::string bytes(kMessage, sizeof kMessage - 1);
  const auto insert = [&](int seq, const std::string& payload) {
    return "INSERT INTO " + qualified_table() +
           " (aggregatetype, aggregateid, type, payload, seq, traceparent) VALUES ('" +
           aggregatetypes_[0] + "', 'order-7', 'OrderPaid', " + payload + ", " +
           std::to_string(seq) + ", '" + kTraceparent + "');";
  };
  pg_->exec("BEGIN;" + insert(1, "decode('" + to_hex(bytes) + "', 'hex')") + insert(2, "NULL") +
            "COMMIT;");
  std::map<int, Record> by_seq = read_by_seq(2, {topics_[0]});
  ASSERT_EQ(by_seq.size(), 2u);
  EXPECT_EQ(by_seq[1].value, bytes);
  EXPECT_TRUE(by_seq[2].null_value);
  EXPECT_EQ(header_or(by_seq[1], "traceparent", ""), kTraceparent);
  const std::vector<SdkEvent> events = read_with_sdk({&by_seq[1], &by_seq[2]});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].ok()) << events[0].json;
  EXPECT_TRUE(events[0].has("datacontenttype", "application/x-protobuf")) << events[0].json;
  EXPECT_TRUE(events[0].has("source", "urn:shop:" + aggregatetypes_[0] + ":order-7"))
      << events[0].json;
  EXPECT_NE(events[0].json.find("\"data\": {\"bytes\": \"" + to_hex(bytes) + "\"}"),
            std::string::npos)
      << events[0].json;
  EXPECT_TRUE(events[1].ok()) << events[1].json;
  EXPECT_NE(events[1].json.find("\"data\": null"), std::string::npos) << events[1].json;
  EXPECT_TRUE(events[1].lacks("datacontenttype")) << events[1].json;
  expect_graceful_stop(relay);

  // The default format, same table: the Debezium record with the traceparent, no ce_ header.
  pg_->exec(insert(3, "decode('00', 'hex')"));
  RelayProcess& plain = start_relay({"--column-traceparent", "traceparent"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(plain));
  pg_->exec(insert(4, "decode('01', 'hex')"));
  by_seq = read_by_seq(4, {topics_[0]});
  ASSERT_TRUE(by_seq.contains(4));
  const Record& r = by_seq[4];
  EXPECT_EQ(header_or(r, "traceparent", ""), kTraceparent) << describe(r);
  for (const auto& [name, value] : r.headers) {
    EXPECT_NE(name.rfind("ce_", 0), 0u) << describe(r);
    EXPECT_NE(name, "content-type") << describe(r);
  }
  expect_graceful_stop(plain);
}

}  // namespace
}  // namespace outbox_test
