// --format cloudevents (the Kafka protocol binding of CloudEvents 1.0, binary content mode) and
// the W3C trace context columns (--column-traceparent, --column-tracestate): the headers an event
// carries, the attributes CloudEvents requires rejected with the column named when a row cannot
// give them, ce_time from the commit time or the timestamp column, and no allocation per event.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "allocation_counter.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::mapping {
namespace {

using pgoutput::Insert;
using pgoutput::Relation;
using pgoutput::TupleValue;
using pgoutput::ValueKind;

constexpr std::uint32_t kRelid = 16'500;
constexpr std::uint32_t kText = 25, kUuid = 2950, kJsonb = 3802, kBytea = 17, kTimestamptz = 1184;
constexpr std::string_view kId = "0f8fad5b-d9cb-469f-a165-70867728950e";
constexpr std::string_view kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
// 2026-12-01T05:55:23.123456Z
constexpr std::int64_t kCommitUs = 1'796'104'523'123'456;

Relation relation(std::uint32_t payload_type = kJsonb,
                  const std::vector<std::pair<std::string_view, std::uint32_t>>& extra = {}) {
  Relation r{.relid = kRelid, .nspname = "public", .relname = "outbox", .columns = {}};
  r.columns = {{.flags = 1, .name = "id", .type_oid = kUuid},
               {.flags = 0, .name = "aggregatetype", .type_oid = kText},
               {.flags = 0, .name = "aggregateid", .type_oid = kText},
               {.flags = 0, .name = "type", .type_oid = kText},
               {.flags = 0, .name = "payload", .type_oid = payload_type}};
  for (const auto& [name, oid] : extra)
    r.columns.push_back({.flags = 0, .name = name, .type_oid = oid});
  return r;
}

TupleValue text(std::string_view data) { return {.kind = ValueKind::kText, .data = data}; }
TupleValue null() { return {.kind = ValueKind::kNull, .data = {}}; }

Insert row(TupleValue payload, std::vector<TupleValue> extra = {},
           TupleValue type = text("OrderPaid"), TupleValue key = text("order-7")) {
  Insert insert{.relid = kRelid, .new_tuple = {text(kId), text("Order"), key, type, payload}};
  for (TupleValue& v : extra) insert.new_tuple.push_back(v);
  return insert;
}

MapperConfig cloudevents() {
  MapperConfig config;
  config.format = Format::kCloudEvents;
  return config;
}

Mapper mapper_for(MapperConfig config, const Relation& r) {
  Mapper mapper{std::move(config)};
  mapper.on_relation(r);
  return mapper;
}

using Headers = std::vector<std::pair<std::string, std::optional<std::string>>>;

Headers headers_of(const MapResult& result) {
  Headers out;
  if (const auto* error = std::get_if<MapError>(&result)) {
    ADD_FAILURE() << "unexpected MapError: " << error->column << " " << error->reason;
    return out;
  }
  for (const ExtraHeader& h : std::get<Event>(result).headers) {
    out.emplace_back(std::string(h.name),
                     h.value ? std::optional<std::string>(*h.value) : std::nullopt);
  }
  return out;
}

std::optional<std::string> header(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v.value_or("(null)");
  }
  return std::nullopt;
}

MapError as_error(const MapResult& result) {
  const auto* error = std::get_if<MapError>(&result);
  if (error == nullptr) {
    ADD_FAILURE() << "expected a MapError";
    return {};
  }
  return *error;
}

// ---- --format cloudevents

TEST(CloudEvents, BinaryModeHeadersBesideTheDebeziumOnes) {
  Mapper mapper = mapper_for(cloudevents(), relation());
  const MapResult result = mapper.map_insert(row(text("{\"total\": 12}")), kCommitUs);
  EXPECT_EQ(headers_of(result), (Headers{{"ce_specversion", "1.0"},
                                         {"ce_id", std::string(kId)},
                                         {"ce_source", "/outbox/Order"},
                                         {"ce_type", "OrderPaid"},
                                         {"ce_time", "2026-12-01T05:55:23.123456Z"},
                                         {"ce_subject", "order-7"},
                                         {"content-type", "application/json"}}));
  // The rest of the record is the default one: the value is the payload, the key the aggregate
  // id, id and type stay for the Pipeline's own headers, the Kafka timestamp the commit time.
  const Event& event = std::get<Event>(result);
  EXPECT_EQ(event.value, "{\"total\": 12}");
  EXPECT_EQ(event.key, "order-7");
  EXPECT_EQ(event.id, kId);
  EXPECT_EQ(event.type, "OrderPaid");
  EXPECT_EQ(event.topic, "outbox.event.Order");
  EXPECT_EQ(event.timestamp_ms, std::nullopt);
  EXPECT_EQ(mapper.max_headers(), 7u);
}

TEST(CloudEvents, DefaultFormatHasNoneOfThem) {
  Mapper mapper = mapper_for(MapperConfig{}, relation());
  const MapResult result = mapper.map_insert(row(text("{}")), kCommitUs);
  EXPECT_TRUE(headers_of(result).empty());
  EXPECT_EQ(mapper.max_headers(), 0u);
}

TEST(CloudEvents, SourceFromATemplateOverColumns) {
  MapperConfig config = cloudevents();
  config.ce_source = "https://shop.example/${tenant}/${aggregatetype}";
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"tenant", kText}}));
  EXPECT_EQ(header(headers_of(mapper.map_insert(row(text("{}"), {text("acme")}), kCommitUs)),
                   "ce_source"),
            "https://shop.example/acme/Order");
  // A NULL column the template needs: the event cannot have a source.
  const MapError error = as_error(mapper.map_insert(row(text("{}"), {null()}), kCommitUs));
  EXPECT_EQ(error.column, "tenant");
  EXPECT_NE(error.reason.find("is NULL"), std::string::npos) << error.reason;
  EXPECT_NE(error.reason.find("ce_source"), std::string::npos) << error.reason;
  EXPECT_EQ(error.id, kId);
  EXPECT_EQ(error.topic, "outbox.event.Order");  // the dead-letter record names it

  config.ce_source = "${tenant}";
  Mapper empty = mapper_for(config, relation(kJsonb, {{"tenant", kText}}));
  EXPECT_NE(as_error(empty.map_insert(row(text("{}"), {text("")}), kCommitUs))
                .reason.find("empty ce_source"),
            std::string::npos);
}

TEST(CloudEvents, DefaultSourceFollowsTheAggregateTypeColumn) {
  MapperConfig config = cloudevents();
  config.column_aggregatetype = "type";
  config.topic_template = "events.${type}";
  Mapper mapper = mapper_for(config, relation());
  EXPECT_EQ(header(headers_of(mapper.map_insert(row(text("{}")), kCommitUs)), "ce_source"),
            "/outbox/OrderPaid");
}

TEST(CloudEvents, NullOrMissingTypeIsAMappingErrorNeverADrop) {
  Mapper mapper = mapper_for(cloudevents(), relation());
  MapError error = as_error(mapper.map_insert(row(text("{\"a\":1}"), {}, null()), kCommitUs));
  EXPECT_EQ(error.column, "type");
  EXPECT_EQ(error.reason, "is NULL, but a CloudEvent needs a type (ce_type)");
  EXPECT_EQ(error.payload, "{\"a\":1}");
  EXPECT_EQ(error.aggregateid, "order-7");
  error = as_error(mapper.map_insert(row(text("{}"), {}, text("")), kCommitUs));
  EXPECT_EQ(error.reason, "is empty, but a CloudEvent needs a type (ce_type)");

  // The default format sends such a row without a type header, as before.
  Mapper debezium = mapper_for(MapperConfig{}, relation());
  EXPECT_EQ(std::get<Event>(debezium.map_insert(row(text("{}"), {}, null()))).type, std::nullopt);

  Relation no_type = relation();
  no_type.columns.erase(no_type.columns.begin() + 3);
  Mapper missing = mapper_for(cloudevents(), no_type);
  Insert insert = row(text("{}"));
  insert.new_tuple.erase(insert.new_tuple.begin() + 3);
  error = as_error(missing.map_insert(insert, kCommitUs));
  EXPECT_EQ(error.column, "type");
  EXPECT_NE(error.reason.find("is missing from the table"), std::string::npos) << error.reason;
}

TEST(CloudEvents, NullOrEmptyIdIsAMappingError) {
  Mapper mapper = mapper_for(cloudevents(), relation(kText));
  Insert insert = row(text("{}"));
  insert.new_tuple[0] = null();
  EXPECT_EQ(as_error(mapper.map_insert(insert, kCommitUs)).column, "id");
  insert.new_tuple[0] = text("");
  const MapError error = as_error(mapper.map_insert(insert, kCommitUs));
  EXPECT_EQ(error.column, "id");
  EXPECT_EQ(error.reason, "is empty, but a CloudEvent needs an id (ce_id)");
}

TEST(CloudEvents, NullKeyLeavesTheSubjectOut) {
  Mapper mapper = mapper_for(cloudevents(), relation());
  const Headers headers =
      headers_of(mapper.map_insert(row(text("{}"), {}, text("T"), null()), kCommitUs));
  EXPECT_EQ(header(headers, "ce_subject"), std::nullopt);
  EXPECT_EQ(header(headers, "ce_type"), "T");
  EXPECT_EQ(headers.size(), 6u);
}

TEST(CloudEvents, ContentTypeByPayloadColumnOrAsConfigured) {
  for (const auto& [oid, expected] :
       std::vector<std::pair<std::uint32_t, std::string>>{{kJsonb, "application/json"},
                                                          {kText, "application/json"},
                                                          {114, "application/json"},
                                                          {kBytea, "application/octet-stream"}}) {
    Mapper mapper = mapper_for(cloudevents(), relation(oid));
    const std::string_view payload = oid == kBytea ? "\\x0a01" : "{}";
    EXPECT_EQ(header(headers_of(mapper.map_insert(row(text(payload)), kCommitUs)), "content-type"),
              expected)
        << "payload type " << oid;
  }
  MapperConfig config = cloudevents();
  config.content_type = "application/x-protobuf; messageType=shop.OrderPaid";
  Mapper mapper = mapper_for(config, relation(kBytea));
  const MapResult result = mapper.map_insert(row(text("\\x0a01")), kCommitUs);
  EXPECT_EQ(header(headers_of(result), "content-type"),
            "application/x-protobuf; messageType=shop.OrderPaid");
  EXPECT_EQ(std::get<Event>(result).value, std::string("\x0a\x01", 2));
}

TEST(CloudEvents, TombstoneHasNoContentType) {
  MapperConfig config = cloudevents();
  config.tombstone_on_empty_payload = true;
  Mapper mapper = mapper_for(config, relation());
  const MapResult result = mapper.map_insert(row(null()), kCommitUs);
  EXPECT_EQ(std::get<Event>(result).value, std::nullopt);
  const Headers headers = headers_of(result);
  EXPECT_EQ(header(headers, "content-type"), std::nullopt);
  EXPECT_EQ(header(headers, "ce_id"), std::string(kId));
}

TEST(CloudEvents, TimeIsRfc3339InUtcWithMicroseconds) {
  Mapper mapper = mapper_for(cloudevents(), relation());
  const auto time_at = [&](std::int64_t us) {
    return header(headers_of(mapper.map_insert(row(text("{}")), us)), "ce_time");
  };
  EXPECT_EQ(time_at(kCommitUs), "2026-12-01T05:55:23.123456Z");
  EXPECT_EQ(time_at(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(time_at(951'782'400'000'001), "2000-02-29T00:00:00.000001Z");
  EXPECT_EQ(time_at(1'704'067'199'999'999), "2023-12-31T23:59:59.999999Z");
  EXPECT_EQ(time_at(253'402'300'799'999'999), "9999-12-31T23:59:59.999999Z");
  EXPECT_EQ(time_at(-1), "1969-12-31T23:59:59.999999Z");
  // Past what RFC 3339 writes: an error naming the commit time, not a malformed header.
  const MapError error = as_error(mapper.map_insert(row(text("{}")), 253'402'300'800'000'000));
  EXPECT_EQ(error.column, "");
  EXPECT_NE(error.reason.find("commit time"), std::string::npos) << error.reason;
}

TEST(CloudEvents, TimeFromTheTimestampColumnKeepsItsMicroseconds) {
  MapperConfig config = cloudevents();
  config.column_timestamp = "occurred_at";
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"occurred_at", kTimestamptz}}));
  const auto mapped = [&](TupleValue at) {
    return mapper.map_insert(row(text("{}"), {at}), kCommitUs);
  };
  MapResult result = mapped(text("2021-03-04 10:36:07.891234+05:30"));
  EXPECT_EQ(header(headers_of(result), "ce_time"), "2021-03-04T05:06:07.891234Z");
  EXPECT_EQ(std::get<Event>(result).timestamp_ms, 1'614'834'367'891);
  result = mapped(text("2021-03-04 05:06:07+00"));
  EXPECT_EQ(header(headers_of(result), "ce_time"), "2021-03-04T05:06:07.000000Z");
  // NULL: the commit time, for ce_time as for the Kafka timestamp.
  result = mapped(null());
  EXPECT_EQ(header(headers_of(result), "ce_time"), "2026-12-01T05:55:23.123456Z");
  EXPECT_EQ(std::get<Event>(result).timestamp_ms, std::nullopt);
  const MapError error = as_error(mapped(text("12026-01-01 00:00:00+00")));
  EXPECT_EQ(error.column, "occurred_at");
  EXPECT_NE(error.reason.find("RFC 3339"), std::string::npos) << error.reason;
}

TEST(CloudEvents, PlacementsComeAfterTheAttributesAndCanBeExtensions) {
  MapperConfig config = cloudevents();
  config.additional_placements = {
      {.column = "tenant", .kind = Placement::Kind::kHeader, .alias = "ce_tenant"}};
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"tenant", kText}}));
  const Headers headers = headers_of(mapper.map_insert(row(text("{}"), {text("acme")}), kCommitUs));
  ASSERT_EQ(headers.size(), 8u);
  EXPECT_EQ(headers.back(),
            (std::pair<std::string, std::optional<std::string>>{"ce_tenant", "acme"}));
}

// ---- --column-traceparent, --column-tracestate

MapperConfig traced(Format format = Format::kDebezium) {
  MapperConfig config;
  config.format = format;
  config.column_traceparent = "traceparent";
  config.column_tracestate = "tracestate";
  return config;
}

const Relation kTraced = relation(kJsonb, {{"traceparent", kText}, {"tracestate", kText}});

TEST(TraceContext, ValidTraceparentAndTracestateBecomeHeaders) {
  Mapper mapper = mapper_for(traced(), kTraced);
  const MapResult result =
      mapper.map_insert(row(text("{}"), {text(kTraceparent), text("rojo=00f067aa0ba902b7")}));
  EXPECT_EQ(headers_of(result), (Headers{{"traceparent", std::string(kTraceparent)},
                                         {"tracestate", "rojo=00f067aa0ba902b7"}}));
  EXPECT_FALSE(std::get<Event>(result).invalid_traceparent);
  // Without a tracestate column, or with a NULL or empty one: traceparent alone.
  EXPECT_EQ(headers_of(mapper.map_insert(row(text("{}"), {text(kTraceparent), null()}))),
            (Headers{{"traceparent", std::string(kTraceparent)}}));
  EXPECT_EQ(headers_of(mapper.map_insert(row(text("{}"), {text(kTraceparent), text("")}))),
            (Headers{{"traceparent", std::string(kTraceparent)}}));
  MapperConfig parent_only = traced();
  parent_only.column_tracestate.clear();
  Mapper alone = mapper_for(parent_only, relation(kJsonb, {{"traceparent", kText}}));
  EXPECT_EQ(headers_of(alone.map_insert(row(text("{}"), {text(kTraceparent)}))),
            (Headers{{"traceparent", std::string(kTraceparent)}}));
}

TEST(TraceContext, NullTraceparentSendsNoHeaderAndCountsNothing) {
  Mapper mapper = mapper_for(traced(), kTraced);
  const MapResult result = mapper.map_insert(row(text("{}"), {null(), text("rojo=1")}));
  EXPECT_TRUE(headers_of(result).empty());
  EXPECT_FALSE(std::get<Event>(result).invalid_traceparent);
}

TEST(TraceContext, InvalidTraceparentIsLeftOutWithItsTracestateButTheEventGoes) {
  Mapper mapper = mapper_for(traced(), kTraced);
  for (const std::string_view bad : {
           "", "garbage",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     // short flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // forbidden version
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // version 00 is 55 long
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // no '-' after 55
       }) {
    const MapResult result = mapper.map_insert(row(text("{}"), {text(bad), text("rojo=1")}));
    ASSERT_TRUE(std::holds_alternative<Event>(result)) << bad;
    EXPECT_TRUE(headers_of(result).empty()) << bad;
    EXPECT_TRUE(std::get<Event>(result).invalid_traceparent) << bad;
  }
  // A later version may carry more fields after the 55 characters of version 00.
  const MapResult later = mapper.map_insert(
      row(text("{}"),
          {text("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-follows"), null()}));
  EXPECT_FALSE(std::get<Event>(later).invalid_traceparent);
  EXPECT_EQ(headers_of(later).size(), 1u);
  // The flag does not stick to the next event.
  const MapResult good = mapper.map_insert(row(text("{}"), {text(kTraceparent), null()}));
  EXPECT_FALSE(std::get<Event>(good).invalid_traceparent);
}

TEST(TraceContext, MissingColumnsAreMappingErrors) {
  Mapper mapper = mapper_for(traced(), relation(kJsonb, {{"traceparent", kText}}));
  MapError error = as_error(mapper.map_insert(row(text("{}"), {text(kTraceparent)})));
  EXPECT_EQ(error.column, "tracestate");
  EXPECT_EQ(error.reason, "is missing from the table");
  Mapper none = mapper_for(traced(), relation());
  error = as_error(none.map_insert(row(text("{}"))));
  EXPECT_EQ(error.column, "traceparent");
}

TEST(TraceContext, InCloudEventsAfterTheAttributesBeforeThePlacements) {
  MapperConfig config = traced(Format::kCloudEvents);
  config.additional_placements = {
      {.column = "tenant", .kind = Placement::Kind::kHeader, .alias = "tenant"}};
  Mapper mapper = mapper_for(
      config, relation(kJsonb, {{"traceparent", kText}, {"tracestate", kText}, {"tenant", kText}}));
  EXPECT_EQ(mapper.max_headers(), 10u);
  const Headers headers = headers_of(mapper.map_insert(
      row(text("{}"), {text(kTraceparent), text("rojo=1"), text("acme")}), kCommitUs));
  ASSERT_EQ(headers.size(), 10u);
  EXPECT_EQ(headers[6].first, "content-type");
  EXPECT_EQ(headers[7], (std::pair<std::string, std::optional<std::string>>{
                            "traceparent", std::string(kTraceparent)}));
  EXPECT_EQ(headers[8].first, "tracestate");
  EXPECT_EQ(headers[9].first, "tenant");
}

// ---- allocations

TEST(CloudEvents, NoHeapAllocationPerEventAfterWarmUp) {
  if (!test::counting_allocations()) GTEST_SKIP() << "allocations are not counted under ASan";
  MapperConfig config = traced(Format::kCloudEvents);
  config.ce_source = "/shop/${aggregatetype}/${tenant}";
  config.column_timestamp = "occurred_at";
  config.additional_placements = {
      {.column = "tenant", .kind = Placement::Kind::kHeader, .alias = "ce_tenant"}};
  Mapper mapper = mapper_for(config, relation(kBytea, {{"traceparent", kText},
                                                       {"tracestate", kText},
                                                       {"tenant", kText},
                                                       {"occurred_at", kTimestamptz}}));
  const std::string big = "\\x" + std::string(600, 'a');
  const Insert large = row(
      text(big), {text(kTraceparent), text("rojo=1"), text("a-rather-long-tenant-name-beyond-sso"),
                  text("2026-12-01 05:55:23.5+00")});
  const Insert small = row(text("\\x00"), {text("bad"), null(), text("t"), null()});
  (void)mapper.map_insert(large, kCommitUs);  // warm-up: scratch strings reach their size
  const std::size_t before = test::allocation_count();
  for (int i = 0; i < 100; ++i) {
    const MapResult a = mapper.map_insert(small, kCommitUs + i);
    const MapResult b = mapper.map_insert(large, kCommitUs + i);
    if (!std::holds_alternative<Event>(a) || !std::holds_alternative<Event>(b)) break;
  }
  EXPECT_EQ(test::allocation_count() - before, 0u);
  EXPECT_EQ(headers_of(mapper.map_insert(large, kCommitUs)).size(), 10u);
}

}  // namespace
}  // namespace outbox::mapping
