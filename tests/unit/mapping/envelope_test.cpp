// The envelope of a table-less outbox event (protobuf outbox.v1.Event or JSON), and the mapping of
// logical messages with the relay's prefix to events.
#include "outbox/mapping/envelope.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "allocation_counter.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/v1/event.pb.h"

namespace outbox::mapping {
namespace {

constexpr std::string_view kJson =
    R"({"id": "e-1", "aggregatetype": "order", "aggregateid": "42", "type": "OrderPaid",
        "payload": {"total": 9.5, "lines": [1, 2]}, "headers": {"traceparent": "00-ab", "b": "c"}})";

std::string protobuf_event(bool with_payload = true) {
  outbox::v1::Event e;
  e.set_id("e-2");
  e.set_aggregate_type("order");
  e.set_aggregate_id("42");
  e.set_type("OrderPaid");
  if (with_payload) e.set_payload(std::string("\x00\x01{bin", 6));
  (*e.mutable_headers())["z"] = "last";
  (*e.mutable_headers())["a"] = "first";
  return e.SerializeAsString();
}

TEST(Envelope, ReadsJson) {
  EnvelopeReader reader;
  Envelope e;
  ASSERT_EQ(reader.read(kJson, MessageFormat::kAuto, e), "");
  EXPECT_EQ(e.id, "e-1");
  EXPECT_EQ(e.aggregate_type, "order");
  EXPECT_EQ(e.aggregate_id, "42");
  EXPECT_EQ(e.type, "OrderPaid");
  EXPECT_EQ(e.payload, R"({"total": 9.5, "lines": [1, 2]})") << "the payload's JSON as written";
  ASSERT_EQ(e.headers.size(), 2u);
  EXPECT_EQ(e.headers[0].name, "traceparent");
  EXPECT_EQ(e.headers[0].value, "00-ab");
}

TEST(Envelope, JsonScalarPayloadsStayJsonAndNullIsAbsent) {
  EnvelopeReader reader;
  Envelope e;
  ASSERT_EQ(
      reader.read(R"({"id":"1","aggregate_type":"t","payload":"hi"})", MessageFormat::kJson, e),
      "");
  EXPECT_EQ(e.payload, R"("hi")") << "as a jsonb column prints it";
  EXPECT_EQ(e.aggregate_type, "t") << "the protobuf field name is accepted too";
  EXPECT_FALSE(e.aggregate_id);
  ASSERT_EQ(reader.read(R"({"id":"1","aggregatetype":"t","payload":null,"aggregateid":null})",
                        MessageFormat::kJson, e),
            "");
  EXPECT_FALSE(e.payload);
  EXPECT_FALSE(e.aggregate_id);
  ASSERT_EQ(reader.read(R"({"id":"1","aggregatetype":"t","payload":12 ,"x":[1]})",
                        MessageFormat::kJson, e),
            "");
  EXPECT_EQ(e.payload, "12");
}

TEST(Envelope, RejectsMalformedJson) {
  EnvelopeReader reader;
  Envelope e;
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"{not json", "not a valid JSON envelope"},
      {R"({"aggregatetype": "t"})", "without an id"},
      {R"({"id": "1"})", "without an aggregate type"},
      {R"({"id": "", "aggregatetype": "t"})", "without an id"},
      {R"({"id": 7, "aggregatetype": "t"})", "\"id\" is not a string"},
      {R"({"id": "1", "aggregatetype": "t", "headers": {"a": 1}})", "header \"a\" is not a string"},
      {R"({"id": "1", "aggregatetype": "t", "headers": []})", "\"headers\" is not an object"},
      {R"({"id": "1", "id": "2", "aggregatetype": "t"})", "\"id\" twice"},
      {R"({"id": "1", "aggregatetype": "t"} {})", "more after its object"},
      {R"(["id"])", "must be an object"},
  };
  for (const auto& [content, reason] : cases) {
    const std::string error = reader.read(content, MessageFormat::kJson, e);
    EXPECT_NE(error.find(reason), std::string::npos) << content << " -> " << error;
  }
}

TEST(Envelope, ReadsProtobuf) {
  EnvelopeReader reader;
  Envelope e;
  const std::string bytes = protobuf_event();
  ASSERT_NE(bytes[0], '{');
  ASSERT_EQ(reader.read(bytes, MessageFormat::kAuto, e), "");
  EXPECT_EQ(e.id, "e-2");
  EXPECT_EQ(e.aggregate_type, "order");
  EXPECT_EQ(e.aggregate_id, "42");
  EXPECT_EQ(e.type, "OrderPaid");
  EXPECT_EQ(e.payload, std::string_view("\x00\x01{bin", 6)) << "bytes as they are";
  ASSERT_EQ(e.headers.size(), 2u);
  EXPECT_EQ(e.headers[0].name, "a") << "by name";
  EXPECT_EQ(e.headers[1].value, "last");
  ASSERT_EQ(reader.read(protobuf_event(false), MessageFormat::kProtobuf, e), "");
  EXPECT_FALSE(e.payload) << "absent, not empty";
}

TEST(Envelope, RejectsMalformedProtobuf) {
  EnvelopeReader reader;
  Envelope e;
  std::string truncated = protobuf_event();
  truncated.resize(truncated.size() - 3);
  EXPECT_NE(reader.read(truncated, MessageFormat::kAuto, e).find("not a valid protobuf"),
            std::string::npos);
  outbox::v1::Event no_type;
  no_type.set_id("1");
  EXPECT_NE(reader.read(no_type.SerializeAsString(), MessageFormat::kProtobuf, e)
                .find("without an aggregate type"),
            std::string::npos);
  EXPECT_NE(reader.read("", MessageFormat::kAuto, e).find("without an id"), std::string::npos)
      << "an empty message is an Event without fields";
  EXPECT_NE(reader.read(kJson, MessageFormat::kProtobuf, e), "") << "format forced";
}

pgoutput::LogicalMessage message(std::string_view content, bool transactional = true,
                                 std::string_view prefix = "outbox") {
  return {.transactional = transactional,
          .lsn = pgoutput::Lsn{0x16B3748},
          .prefix = prefix,
          .content = content};
}

MapperConfig messages_config() {
  MapperConfig c;
  c.table.clear();
  c.message_prefix = "outbox";
  return c;
}

TEST(MapperMessages, MapsTheEnvelopeToAnEvent) {
  MapperConfig config = messages_config();
  config.topic_template = "events.${aggregatetype}.${type}";
  Mapper mapper(config);
  const MessageMapResult r = mapper.map_message(message(kJson));
  ASSERT_TRUE(std::holds_alternative<Event>(r));
  const Event& e = std::get<Event>(r);
  EXPECT_EQ(e.topic, "events.order.OrderPaid");
  EXPECT_EQ(e.key, "42");
  EXPECT_EQ(e.id, "e-1");
  EXPECT_EQ(e.type, "OrderPaid");
  EXPECT_EQ(e.value, R"({"total": 9.5, "lines": [1, 2]})");
  ASSERT_EQ(e.headers.size(), 2u);
  EXPECT_EQ(e.headers[1].name, "b");
  EXPECT_FALSE(e.timestamp_ms) << "the commit time";
}

TEST(MapperMessages, OtherPrefixesAreNotEvents) {
  Mapper mapper(messages_config());
  EXPECT_TRUE(std::holds_alternative<OtherPrefix>(mapper.map_message(message(kJson, true, "x"))));
  EXPECT_TRUE(std::holds_alternative<OtherPrefix>(mapper.map_message(message(kJson, false, "x"))));
  Mapper without(MapperConfig{});
  EXPECT_TRUE(std::holds_alternative<OtherPrefix>(without.map_message(message(kJson))));
}

TEST(MapperMessages, NonTransactionalIsAMappingErrorWithTheRawContent) {
  Mapper mapper(messages_config());
  const MessageMapResult r = mapper.map_message(message(kJson, false));
  ASSERT_TRUE(std::holds_alternative<MapError>(r));
  const MapError& e = std::get<MapError>(r);
  EXPECT_NE(e.reason.find("not transactional"), std::string::npos) << e.reason;
  EXPECT_NE(e.reason.find("0/16B3748"), std::string::npos) << e.reason;
  EXPECT_EQ(e.payload, kJson);
  EXPECT_EQ(e.table, "logical messages with prefix 'outbox'");
}

TEST(MapperMessages, MissingFieldsAndPayloads) {
  Mapper mapper(messages_config());
  const auto reason = [&](std::string_view content) {
    const MessageMapResult r = mapper.map_message(message(content));
    return std::holds_alternative<MapError>(r) ? std::get<MapError>(r).reason : "(mapped)";
  };
  EXPECT_NE(reason(R"({"id":"1","aggregatetype":"t"})").find("has no payload"), std::string::npos);
  EXPECT_NE(reason(R"({"id":"1","aggregatetype":"a b","payload":1})").find("not a valid Kafka"),
            std::string::npos);
  EXPECT_NE(reason("\x0a\x01").find("not a valid protobuf"), std::string::npos);

  MapperConfig tombstones = messages_config();
  tombstones.tombstone_on_empty_payload = true;
  Mapper mapper2(tombstones);
  const MessageMapResult r = mapper2.map_message(message(R"({"id":"1","aggregatetype":"t"})"));
  ASSERT_TRUE(std::holds_alternative<Event>(r));
  EXPECT_FALSE(std::get<Event>(r).value) << "a tombstone";

  MapperConfig by_key = messages_config();
  by_key.topic_template = "k.${aggregateid}";
  Mapper mapper3(by_key);
  const MessageMapResult missing = mapper3.map_message(message(R"({"id":"1","aggregatetype":"t",
      "payload":1})"));
  ASSERT_TRUE(std::holds_alternative<MapError>(missing));
  EXPECT_NE(std::get<MapError>(missing).reason.find("has no aggregateid"), std::string::npos);
}

TEST(MapperMessages, TemplatesMayReferenceOnlyEnvelopeFields) {
  MapperConfig config = messages_config();
  config.topic_template = "t.${tenant}";
  EXPECT_THROW(Mapper{config}, std::invalid_argument);
  config.column_aggregatetype = "kind";
  config.topic_template = "t.${kind}";
  Mapper mapper(config);
  const MessageMapResult r = mapper.map_message(message(kJson));
  ASSERT_TRUE(std::holds_alternative<Event>(r));
  EXPECT_EQ(std::get<Event>(r).topic, "t.order") << "a column name maps to its envelope field";
}

TEST(MapperMessages, NoHeapAllocationPerJsonMessageAfterWarmUp) {
  if (!test::counting_allocations()) GTEST_SKIP() << "allocations are not counted under ASan";
  Mapper mapper(messages_config());
  const pgoutput::LogicalMessage m = message(kJson);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(std::holds_alternative<Event>(mapper.map_message(m)));
  const std::size_t before = test::allocation_count();
  for (int i = 0; i < 100; ++i) (void)mapper.map_message(m);
  EXPECT_EQ(test::allocation_count() - before, 0u);
}

}  // namespace
}  // namespace outbox::mapping
