// The EventBridge sink without a server: a record as a PutEvents entry (Source, DetailType, the
// Detail object carrying the event id and the payload as JSON, text or base64), the 256 KiB
// entry limit as EventBridge counts it, how queued entries form calls (10 entries, 256 KiB), and
// the bus, region and endpoint the flags and environment give.
#include "aws/eventbridge_batching.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <map>
#include <string>
#include <vector>

#include "outbox/aws/eventbridge_publisher.hpp"

namespace {

namespace aws = outbox::aws;
namespace sink = outbox::sink;

sink::Record record(std::optional<std::string_view> value, std::span<const sink::Header> headers,
                    std::optional<std::string_view> key = "order-1",
                    std::string_view topic = "outbox.event.Order") {
  sink::Record r;
  r.topic = topic;
  r.key = key;
  r.value = value;
  r.headers = headers;
  return r;
}

const sink::Header kIdAndType[] = {{"id", "e-1"}, {"type", "OrderPlaced"}};

TEST(EventBridgeDetail, AJsonPayloadIsEmbeddedBesideTheIdTypeAndAggregateId) {
  const auto r = record(R"({"total": 42, "items": [1, 2]})", kIdAndType);
  const std::string detail = aws::build_detail(r);
  EXPECT_EQ(detail, R"({"id":"e-1","type":"OrderPlaced","aggregateid":"order-1",)"
                    R"("payload":{"total": 42, "items": [1, 2]}})");
  simdjson::dom::parser p;
  simdjson::dom::object o;
  ASSERT_EQ(p.parse(detail).get(o), simdjson::SUCCESS);
  EXPECT_EQ(std::int64_t(o["payload"]["total"]), 42);

  const aws::MappedEntry m = aws::map_record(r, "orders-bus");
  EXPECT_TRUE(m.error.empty());
  EXPECT_EQ(m.entry.source, "outbox.event.Order");
  EXPECT_EQ(m.entry.detail_type, "OrderPlaced");
  EXPECT_EQ(m.entry.event_bus_name, "orders-bus");
  EXPECT_EQ(m.entry.detail, detail);
  EXPECT_EQ(m.size, m.entry.source.size() + m.entry.detail_type.size() + detail.size());
}

TEST(EventBridgeDetail, JsonScalarsAreJsonTooButTextIsAString) {
  EXPECT_EQ(aws::build_detail(record("\"just a string\"", kIdAndType, std::nullopt)),
            R"({"id":"e-1","type":"OrderPlaced","payload":"just a string"})");
  EXPECT_EQ(aws::build_detail(record("17", kIdAndType, std::nullopt)),
            R"({"id":"e-1","type":"OrderPlaced","payload":17})");
  // Not one JSON text: a JSON string of it, escaped.
  EXPECT_EQ(aws::build_detail(record("plain \"text\"\n", kIdAndType, std::nullopt)),
            R"({"id":"e-1","type":"OrderPlaced","payload":"plain \"text\"\n"})");
  EXPECT_EQ(aws::build_detail(record(R"({"a":1} {"b":2})", kIdAndType, std::nullopt)),
            R"({"id":"e-1","type":"OrderPlaced","payload":"{\"a\":1} {\"b\":2}"})");
  EXPECT_EQ(aws::build_detail(record("", kIdAndType, std::nullopt)),
            R"({"id":"e-1","type":"OrderPlaced","payload":""})");
}

TEST(EventBridgeDetail, BytesThatAreNotUtf8AreBase64AndSaidSo) {
  const std::string bytes("\x00\xff\xfe\x01", 4);
  const std::string detail = aws::build_detail(record(bytes, kIdAndType, std::nullopt));
  EXPECT_EQ(
      detail,
      R"({"id":"e-1","type":"OrderPlaced","payload_encoding":"base64","payload":"AP/+AQ=="})");
}

TEST(EventBridgeDetail, ATombstoneHasANullPayloadAndOtherHeadersAreAnObject) {
  const sink::Header headers[] = {{"id", "e-2"},
                                  {"type", "OrderDeleted"},
                                  {"tenant", "acme"},
                                  {"traceparent", std::nullopt},
                                  {"outbox.error", "say \"why\""}};
  EXPECT_EQ(aws::build_detail(record(std::nullopt, headers)),
            R"({"id":"e-2","type":"OrderDeleted","aggregateid":"order-1",)"
            R"("headers":{"tenant":"acme","traceparent":null,"outbox.error":"say \"why\""},)"
            R"("payload":null})");
}

TEST(EventBridgeDetail, AnEventWithoutATypeGetsTheDefaultDetailType) {
  const sink::Header only_id[] = {{"id", "e-3"}};
  const aws::MappedEntry m = aws::map_record(record("{}", only_id), "b");
  EXPECT_TRUE(m.error.empty());
  EXPECT_EQ(m.entry.detail_type, aws::kDefaultDetailType);
  EXPECT_EQ(m.entry.detail, R"({"id":"e-3","aggregateid":"order-1","payload":{}})");
  const sink::Header empty_type[] = {{"id", "e-4"}, {"type", ""}};
  EXPECT_EQ(aws::map_record(record("{}", empty_type), "b").entry.detail_type,
            aws::kDefaultDetailType);
}

TEST(EventBridgeDetail, AnEntryOver256KiBAsEventBridgeCountsItIsRefusedAsTooLarge) {
  // Detail's overhead here: {"id":"e-1","type":"OrderPlaced","aggregateid":"order-1","payload":""}
  const std::string overhead_detail = aws::build_detail(record("", kIdAndType));
  const std::size_t fixed = std::string_view("outbox.event.Order").size() +
                            std::string_view("OrderPlaced").size() + overhead_detail.size();
  const std::string fits(aws::kPutEventsMaxBytes - fixed, 'x');
  aws::MappedEntry m = aws::map_record(record(fits, kIdAndType), "b");
  EXPECT_TRUE(m.error.empty()) << m.error;
  EXPECT_EQ(m.size, aws::kPutEventsMaxBytes);
  const std::string one_more = fits + "x";
  m = aws::map_record(record(one_more, kIdAndType), "b");
  EXPECT_TRUE(m.size_error);
  EXPECT_EQ(m.error.rfind("EntryTooLarge: ", 0), 0u) << m.error;
  EXPECT_EQ(m.size, aws::kPutEventsMaxBytes + 1);

  m = aws::map_record(record("{}", kIdAndType, "k", ""), "b");
  EXPECT_FALSE(m.size_error);
  EXPECT_EQ(m.error.rfind("InvalidSource: ", 0), 0u) << m.error;
}

std::size_t batch(const std::vector<std::size_t>& sizes) {
  return aws::next_batch(sizes.size(), [&](std::size_t i) { return sizes[i]; });
}

TEST(EventBridgeBatching, TenEntriesOr256KiBPerCall) {
  EXPECT_EQ(batch({}), 0u);
  EXPECT_EQ(batch({5}), 1u);
  EXPECT_EQ(batch(std::vector<std::size_t>(25, 100)), 10u);
  EXPECT_EQ(batch(std::vector<std::size_t>(10, 100)), 10u);
  // 100 KiB each: two fit, a third would pass 256 KiB.
  EXPECT_EQ(batch(std::vector<std::size_t>(5, 100 * 1024)), 2u);
  // Exactly 256 KiB together still goes.
  EXPECT_EQ(batch({128 * 1024, 128 * 1024, 1}), 2u);
  EXPECT_EQ(batch({aws::kPutEventsMaxBytes, 1}), 1u);
  // Something over the limit at the front still goes, alone (a solo entry is counted so).
  EXPECT_EQ(batch({aws::kPutEventsMaxBytes + 1, 1}), 1u);
  EXPECT_EQ(batch({1, aws::kPutEventsMaxBytes + 1}), 1u);
}

TEST(EventBridgeConfig, BusNamesAndArns) {
  EXPECT_EQ(aws::check_event_bus("orders"), "");
  EXPECT_EQ(aws::check_event_bus("aws.partner/acme.com/123/orders"), "");
  EXPECT_EQ(aws::check_event_bus("arn:aws:events:eu-west-1:123456789012:event-bus/orders"),
            "eu-west-1");
  EXPECT_THROW(aws::check_event_bus(""), aws::EventBridgeConfigError);
  EXPECT_THROW(aws::check_event_bus("bad name"), aws::EventBridgeConfigError);
  EXPECT_THROW(aws::check_event_bus(std::string(257, 'a')), aws::EventBridgeConfigError);
  EXPECT_THROW(aws::check_event_bus("arn:aws:sqs:eu-west-1:123456789012:q"),
               aws::EventBridgeConfigError);
  EXPECT_THROW(aws::check_event_bus("arn:aws:events:eu-west-1:123456789012:rule/r"),
               aws::EventBridgeConfigError);
  EXPECT_THROW(aws::check_event_bus("arn:aws:events::123456789012:event-bus/orders"),
               aws::EventBridgeConfigError);
}

aws::EnvLookup env_of(std::map<std::string, std::string> vars) {
  vars.emplace("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
  vars.emplace("AWS_SECRET_ACCESS_KEY", "secret");
  vars.emplace("AWS_CONFIG_FILE", "/nonexistent/config");
  vars.emplace("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials");
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(EventBridgeConfig, RegionAndEndpointAsTheSdksFindThem) {
  aws::EventBridgeSinkOptions o;
  o.bus = "orders";
  o.dlq_topic = "outbox.dlq";
  // No region anywhere.
  EXPECT_THROW(aws::resolve_eventbridge_config(o, env_of({})), aws::EventBridgeConfigError);

  auto c = aws::resolve_eventbridge_config(o, env_of({{"AWS_REGION", "eu-west-1"}}));
  EXPECT_EQ(c.events.region, "eu-west-1");
  EXPECT_EQ(c.events.endpoint_url, "https://events.eu-west-1.amazonaws.com");
  EXPECT_FALSE(c.events.credentials_provider);  // the caller's (the sink's) to set
  EXPECT_EQ(c.bus, "orders");
  EXPECT_EQ(c.dlq_bus, "");
  EXPECT_EQ(c.dlq_topic, "outbox.dlq");

  // The ARN's region when nothing else gives one; China's domain.
  o.bus = "arn:aws-cn:events:cn-north-1:123456789012:event-bus/orders";
  c = aws::resolve_eventbridge_config(o, env_of({}));
  EXPECT_EQ(c.events.region, "cn-north-1");
  EXPECT_EQ(c.events.endpoint_url, "https://events.cn-north-1.amazonaws.com.cn");

  // AWS_ENDPOINT_URL_EVENTS before AWS_ENDPOINT_URL; the flags before both.
  c = aws::resolve_eventbridge_config(o, env_of({{"AWS_ENDPOINT_URL", "http://127.0.0.1:1"},
                                                 {"AWS_ENDPOINT_URL_EVENTS", "http://127.0.0.1:2"},
                                                 {"AWS_REGION", "us-east-1"}}));
  EXPECT_EQ(c.events.endpoint_url, "http://127.0.0.1:2");
  EXPECT_EQ(c.events.region, "us-east-1");
  c = aws::resolve_eventbridge_config(o, env_of({{"AWS_ENDPOINT_URL", "http://127.0.0.1:1"}}));
  EXPECT_EQ(c.events.endpoint_url, "http://127.0.0.1:1");
  o.region = "ap-south-1";
  o.endpoint_url = "http://localhost:3";
  o.max_calls = 3;
  o.dlq_bus = "dead";
  c = aws::resolve_eventbridge_config(
      o, env_of({{"AWS_ENDPOINT_URL_EVENTS", "http://x:2"}, {"AWS_REGION", "us-east-1"}}));
  EXPECT_EQ(c.events.endpoint_url, "http://localhost:3");
  EXPECT_EQ(c.events.region, "ap-south-1");
  EXPECT_EQ(c.events.http.max_connections, 3u);
  EXPECT_EQ(c.dlq_bus, "dead");

  o.endpoint_url = "ftp://x";
  EXPECT_THROW(aws::resolve_eventbridge_config(o, env_of({})), aws::EventBridgeConfigError);
  o.endpoint_url.clear();
  o.dlq_bus = "not a bus";
  EXPECT_THROW(aws::resolve_eventbridge_config(o, env_of({})), aws::EventBridgeConfigError);
}

}  // namespace
