// The outbox shapes of Debezium's event router beyond the defaults: additional placements
// (headers, partition), the timestamp column, tombstones on an empty payload, bytea payloads.
// Each as Debezium does it, and each rejected with the column named when the row cannot carry it.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "allocation_counter.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::mapping {
namespace {

using pgoutput::Column;
using pgoutput::Insert;
using pgoutput::Relation;
using pgoutput::TupleValue;
using pgoutput::ValueKind;

constexpr std::uint32_t kRelid = 16'400;
constexpr std::uint32_t kText = 25, kUuid = 2950, kJsonb = 3802, kBytea = 17, kInt2 = 21,
                        kInt4 = 23, kInt8 = 20, kTimestamp = 1114, kTimestamptz = 1184;

constexpr std::string_view kId = "0f8fad5b-d9cb-469f-a165-70867728950e";

// The default outbox columns (payload of type `payload_type`), then `extra` (name, type OID).
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

Insert row(TupleValue payload, std::vector<TupleValue> extra = {}) {
  Insert insert{
      .relid = kRelid,
      .new_tuple = {text(kId), text("Order"), text("order-7"), text("OrderPaid"), payload}};
  for (TupleValue& v : extra) insert.new_tuple.push_back(v);
  return insert;
}

Mapper mapper_for(MapperConfig config, const Relation& r) {
  Mapper mapper{std::move(config)};
  mapper.on_relation(r);
  return mapper;
}

const Event& as_event(const MapResult& result) {
  if (const auto* error = std::get_if<MapError>(&result)) {
    ADD_FAILURE() << "unexpected MapError: " << error->column << " " << error->reason;
  }
  static const Event kEmpty{};
  const auto* event = std::get_if<Event>(&result);
  return event != nullptr ? *event : kEmpty;
}

MapError as_error(const MapResult& result) {
  const auto* error = std::get_if<MapError>(&result);
  if (error == nullptr) {
    ADD_FAILURE() << "expected a MapError";
    return {};
  }
  return *error;
}

Placement header(std::string column, std::string alias = {}) {
  return {
      .column = column, .kind = Placement::Kind::kHeader, .alias = alias.empty() ? column : alias};
}
Placement partition(std::string column) {
  return {.column = column, .kind = Placement::Kind::kPartition, .alias = column};
}

// ---- additional placements

TEST(Placement, HeadersCarryTheColumnTextUnderTheAliasInOrder) {
  MapperConfig config;
  config.additional_placements = {header("tenant"), header("type", "eventType"),
                                  header("version", "schema-version")};
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"tenant", kText}, {"version", kInt4}}));
  const Insert insert = row(text("{}"), {text("acme"), text("3")});
  const MapResult result = mapper.map_insert(insert);
  const Event& event = as_event(result);
  ASSERT_EQ(event.headers.size(), 3u);
  EXPECT_EQ(event.headers[0].name, "tenant");
  EXPECT_EQ(event.headers[0].value, "acme");
  EXPECT_EQ(event.headers[1].name, "eventType");
  EXPECT_EQ(event.headers[1].value, "OrderPaid");
  EXPECT_EQ(event.headers[2].name, "schema-version");
  EXPECT_EQ(event.headers[2].value, "3");
  // The defaults are untouched: id and type headers, key, value, no partition, commit time.
  EXPECT_EQ(event.id, kId);
  EXPECT_EQ(event.type, "OrderPaid");
  EXPECT_EQ(event.key, "order-7");
  EXPECT_EQ(event.value, "{}");
  EXPECT_EQ(event.partition, std::nullopt);
  EXPECT_EQ(event.timestamp_ms, std::nullopt);
}

TEST(Placement, HeaderNamesSurviveMovingTheMapper) {
  MapperConfig config;
  config.additional_placements = {header("t", "x")};  // short strings: stored inside the Mapper
  Mapper first{config};
  Mapper mapper = std::move(first);
  mapper.on_relation(relation(kJsonb, {{"t", kText}}));
  std::vector<Mapper> moved;
  moved.push_back(std::move(mapper));
  const MapResult result = moved[0].map_insert(row(text("{}"), {text("v")}));
  const Event& event = as_event(result);
  ASSERT_EQ(event.headers.size(), 1u);
  EXPECT_EQ(event.headers[0].name, "x");
  EXPECT_EQ(event.headers[0].value, "v");
}

TEST(Placement, NullColumnGivesAHeaderWithoutValue) {
  MapperConfig config;
  config.additional_placements = {header("tenant")};
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"tenant", kText}}));
  const MapResult result = mapper.map_insert(row(text("{}"), {null()}));
  const Event& event = as_event(result);
  ASSERT_EQ(event.headers.size(), 1u);
  EXPECT_EQ(event.headers[0].name, "tenant");
  EXPECT_EQ(event.headers[0].value, std::nullopt);
}

TEST(Placement, MissingColumnIsAMappingErrorAsInDebezium) {
  MapperConfig config;
  config.additional_placements = {header("tenant")};
  Mapper mapper = mapper_for(config, relation());
  const MapError error = as_error(mapper.map_insert(row(text("{\"a\":1}"))));
  EXPECT_EQ(error.column, "tenant");
  EXPECT_EQ(error.reason, "is missing from the table");
  EXPECT_EQ(error.id, kId);
  EXPECT_EQ(error.payload, "{\"a\":1}");
  EXPECT_EQ(error.topic, "outbox.event.Order");
}

TEST(Placement, PartitionComesFromAnIntegerColumn) {
  for (const std::uint32_t oid : {kInt2, kInt4, kInt8}) {
    MapperConfig config;
    config.additional_placements = {partition("shard")};
    Mapper mapper = mapper_for(config, relation(kJsonb, {{"shard", oid}}));
    const MapResult result = mapper.map_insert(row(text("{}"), {text("5")}));
    EXPECT_EQ(as_event(result).partition, 5) << "type " << oid;
    EXPECT_TRUE(as_event(result).headers.empty());
    const MapResult zero = mapper.map_insert(row(text("{}"), {text("0")}));
    EXPECT_EQ(as_event(zero).partition, 0);
    // NULL: the partitioner chooses, by the key.
    const MapResult unset = mapper.map_insert(row(text("{}"), {null()}));
    EXPECT_EQ(as_event(unset).partition, std::nullopt);
  }
}

TEST(Placement, PartitionThatNoTopicCanHaveIsAMappingError) {
  MapperConfig config;
  config.additional_placements = {partition("shard")};
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"shard", kInt8}}));
  EXPECT_EQ(as_error(mapper.map_insert(row(text("{}"), {text("-1")}))).reason,
            "is negative, which is no partition");
  const MapError big = as_error(mapper.map_insert(row(text("{}"), {text("2147483648")})));
  EXPECT_EQ(big.column, "shard");
  EXPECT_EQ(big.reason, "is larger than the largest partition number (2147483647)");
  EXPECT_EQ(as_event(mapper.map_insert(row(text("{}"), {text("2147483647")}))).partition,
            2147483647);

  Mapper texty = mapper_for(config, relation(kJsonb, {{"shard", kText}}));
  const MapError error = as_error(texty.map_insert(row(text("{}"), {text("3")})));
  EXPECT_EQ(error.column, "shard");
  EXPECT_NE(error.reason.find("needs an integer column"), std::string::npos) << error.reason;
}

TEST(Placement, HeadersAndPartitionTogether) {
  MapperConfig config;
  config.additional_placements = {header("tenant"), partition("shard"), header("region", "rg")};
  Mapper mapper = mapper_for(
      config, relation(kJsonb, {{"region", kText}, {"shard", kInt4}, {"tenant", kText}}));
  const MapResult result =
      mapper.map_insert(row(text("{}"), {text("eu"), text("2"), text("acme")}));
  const Event& event = as_event(result);
  ASSERT_EQ(event.headers.size(), 2u);
  EXPECT_EQ(event.headers[0].value, "acme");
  EXPECT_EQ(event.headers[1].name, "rg");
  EXPECT_EQ(event.headers[1].value, "eu");
  EXPECT_EQ(event.partition, 2);
}

// ---- --column-timestamp

TEST(Timestamp, TimestamptzGivesTheRecordTimestampInMilliseconds) {
  MapperConfig config;
  config.column_timestamp = "occurred_at";
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"occurred_at", kTimestamptz}}));
  const auto ms = [&](std::string_view value) {
    const Insert insert = row(text("{}"), {text(value)});
    return as_event(mapper.map_insert(insert)).timestamp_ms;
  };
  // 2026-12-01T05:55:23.123Z
  EXPECT_EQ(ms("2026-12-01 05:55:23.123456+00"), 1'796'104'523'123);
  EXPECT_EQ(ms("2026-12-01 05:55:23+00"), 1'796'104'523'000);
  EXPECT_EQ(ms("2026-12-01 07:55:23.1+02"), 1'796'104'523'100);
  EXPECT_EQ(ms("2026-12-01 11:25:23.999999+05:30"), 1'796'104'523'999);
  EXPECT_EQ(ms("2026-11-30 21:55:23-08"), 1'796'104'523'000);
  EXPECT_EQ(ms("1970-01-01 00:00:00.001+00"), 1);
  EXPECT_EQ(ms("2000-02-29 00:00:00+00"), 951'782'400'000);
}

TEST(Timestamp, TimestampWithoutTimeZoneIsTakenAsUtcAsDebeziumDoes) {
  MapperConfig config;
  config.column_timestamp = "created";
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"created", kTimestamp}}));
  const Insert insert = row(text("{}"), {text("2026-12-01 05:55:23.123456")});
  EXPECT_EQ(as_event(mapper.map_insert(insert)).timestamp_ms, 1'796'104'523'123);
}

TEST(Timestamp, NullFallsBackToTheCommitTime) {
  MapperConfig config;
  config.column_timestamp = "occurred_at";
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"occurred_at", kTimestamptz}}));
  EXPECT_EQ(as_event(mapper.map_insert(row(text("{}"), {null()}))).timestamp_ms, std::nullopt);
}

TEST(Timestamp, UnusableColumnsAreMappingErrors) {
  MapperConfig config;
  config.column_timestamp = "occurred_at";
  {
    Mapper mapper = mapper_for(config, relation());
    const MapError error = as_error(mapper.map_insert(row(text("{}"))));
    EXPECT_EQ(error.column, "occurred_at");
    EXPECT_EQ(error.reason, "is missing from the table");
  }
  {
    Mapper mapper = mapper_for(config, relation(kJsonb, {{"occurred_at", kInt8}}));
    const MapError error = as_error(mapper.map_insert(row(text("{}"), {text("1700000000000")})));
    EXPECT_NE(error.reason.find("needs a timestamp or timestamptz column"), std::string::npos)
        << error.reason;
  }
  Mapper mapper = mapper_for(config, relation(kJsonb, {{"occurred_at", kTimestamptz}}));
  for (const std::string_view bad :
       {"infinity", "-infinity", "0044-03-15 12:00:00+00 BC", "12/01/2026 05:55:23 UTC",
        "Tue Dec 01 05:55:23 2026 UTC", "1969-12-31 23:59:59+00", "1970-01-01 00:00:00+00",
        "2026-13-01 00:00:00+00", "2026-12-01 05:55:23+", "2026-12-01T05:55:23Z"}) {
    const MapError error = as_error(mapper.map_insert(row(text("{}"), {text(bad)})));
    EXPECT_EQ(error.column, "occurred_at") << bad;
    EXPECT_FALSE(error.reason.empty()) << bad;
  }
}

// ---- --tombstone-on-empty-payload

TEST(Tombstone, NullPayloadGivesKeyAndNullValue) {
  MapperConfig config;
  config.tombstone_on_empty_payload = true;
  Mapper mapper = mapper_for(config, relation());
  const MapResult result = mapper.map_insert(row(null()));
  const Event& event = as_event(result);
  EXPECT_EQ(event.value, std::nullopt);
  EXPECT_EQ(event.key, "order-7");
  EXPECT_EQ(event.id, kId);
  EXPECT_EQ(event.topic, "outbox.event.Order");
}

TEST(Tombstone, EmptyOrBlankTextPayloadIsOneToo) {
  MapperConfig config;
  config.tombstone_on_empty_payload = true;
  config.require_json = true;  // a tombstone is not checked as JSON
  Mapper mapper = mapper_for(config, relation(kText));
  EXPECT_EQ(as_event(mapper.map_insert(row(text("")))).value, std::nullopt);
  EXPECT_EQ(as_event(mapper.map_insert(row(text(" \t\n")))).value, std::nullopt);
  EXPECT_EQ(as_event(mapper.map_insert(row(text(" {} ")))).value, " {} ");
}

TEST(Tombstone, WithoutTheFlagANullPayloadStaysAMappingError) {
  Mapper mapper = mapper_for(MapperConfig{}, relation());
  const MapError error = as_error(mapper.map_insert(row(null())));
  EXPECT_EQ(error.column, "payload");
  EXPECT_EQ(error.reason, "is NULL");
  Mapper texty = mapper_for(MapperConfig{}, relation(kText));
  EXPECT_EQ(as_event(texty.map_insert(row(text("")))).value, "");
}

// ---- bytea payloads

std::string hex_text(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "\\x";
  for (const char c : bytes) {
    out += kDigits[static_cast<unsigned char>(c) >> 4];
    out += kDigits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

// bytea_output = 'escape': printable ASCII as is, "\\" for a backslash, "\ooo" for the rest.
std::string escape_text(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (b == '\\') {
      out += "\\\\";
    } else if (b < 0x20 || b > 0x7e) {
      out += '\\';
      out += static_cast<char>('0' + (b >> 6));
      out += static_cast<char>('0' + ((b >> 3) & 7));
      out += static_cast<char>('0' + (b & 7));
    } else {
      out += c;
    }
  }
  return out;
}

TEST(Bytea, PayloadGoesOutAsItsRawBytes) {
  Mapper mapper = mapper_for(MapperConfig{}, relation(kBytea));
  std::mt19937 random(12);
  for (const std::size_t size : {0, 1, 2, 255, 4096, 100'000}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    if (size >= 2) bytes[0] = '\0', bytes[1] = static_cast<char>(0xff);  // NUL, invalid UTF-8
    for (const std::string& printed : {hex_text(bytes), escape_text(bytes)}) {
      const MapResult result = mapper.map_insert(row(text(printed)));
      const Event& event = as_event(result);
      ASSERT_TRUE(event.value.has_value());
      EXPECT_EQ(*event.value, bytes) << "size " << size;
    }
  }
}

TEST(Bytea, UpperCaseHexDigitsToo) {
  Mapper mapper = mapper_for(MapperConfig{}, relation(kBytea));
  EXPECT_EQ(as_event(mapper.map_insert(row(text("\\x00FFaB")))).value,
            std::string("\x00\xff\xab", 3));
}

TEST(Bytea, TextThatIsNotByteaOutputIsAMappingError) {
  Mapper mapper = mapper_for(MapperConfig{}, relation(kBytea));
  for (const std::string_view bad : {"\\x0", "\\x0g", "a\\b", "\\"}) {
    const MapError error = as_error(mapper.map_insert(row(text(bad))));
    EXPECT_EQ(error.column, "payload") << bad;
    EXPECT_NE(error.reason.find("bytea"), std::string::npos) << error.reason;
  }
}

TEST(Bytea, DeadLetterCarriesTheBytes) {
  MapperConfig config;
  config.additional_placements = {header("tenant")};
  Mapper mapper = mapper_for(config, relation(kBytea));
  const MapError error = as_error(mapper.map_insert(row(text("\\x00ff"))));
  EXPECT_EQ(error.column, "tenant");
  EXPECT_TRUE(error.binary_payload);
  EXPECT_EQ(error.payload, std::string("\x00\xff", 2));
}

TEST(Bytea, NullPayloadIsATombstoneOnlyWithTheFlag) {
  MapperConfig config;
  config.tombstone_on_empty_payload = true;
  Mapper mapper = mapper_for(config, relation(kBytea));
  EXPECT_EQ(as_event(mapper.map_insert(row(null()))).value, std::nullopt);
  // An empty bytea is a value (Debezium's byte[] is never blank).
  EXPECT_EQ(as_event(mapper.map_insert(row(text("\\x")))).value, "");
}

TEST(Bytea, TextPayloadColumnsAreNotDecoded) {
  Mapper mapper = mapper_for(MapperConfig{}, relation(kText));
  EXPECT_EQ(as_event(mapper.map_insert(row(text("\\x00ff")))).value, "\\x00ff");
}

// ---- several outbox tables

TEST(MoreTables, EveryConfiguredTableIsAnOutboxMappedAlike) {
  MapperConfig config;
  config.more_tables = {{"billing", "outbox"}, {"public", "outbox_b"}};
  Mapper mapper{config};
  Relation billing = relation();
  billing.relid = kRelid + 1;
  billing.nspname = "billing";
  Relation other = relation();
  other.relid = kRelid + 2;
  other.nspname = "shipping";
  for (const Relation* r : {&billing, &other}) {
    EXPECT_EQ(mapper.is_outbox_name(*r), r == &billing) << r->nspname;
    mapper.on_relation(*r);
  }
  EXPECT_TRUE(mapper.is_outbox_name(relation()));
  Insert insert = row(text("{}"));
  insert.relid = kRelid + 1;
  EXPECT_EQ(as_event(mapper.map_insert(insert)).topic, "outbox.event.Order");
  insert.relid = kRelid + 2;
  EXPECT_TRUE(std::holds_alternative<NotOutbox>(mapper.map_insert(insert)));
}

// ---- allocations

TEST(Shapes, NoHeapAllocationPerEventAfterWarmUp) {
  if (!test::counting_allocations()) GTEST_SKIP() << "allocations are not counted under ASan";
  MapperConfig config;
  config.additional_placements = {header("tenant"), partition("shard")};
  config.column_timestamp = "occurred_at";
  config.tombstone_on_empty_payload = true;
  Mapper mapper = mapper_for(
      config,
      relation(kBytea, {{"tenant", kText}, {"shard", kInt4}, {"occurred_at", kTimestamptz}}));
  const std::string big = hex_text(std::string(300, '\x07'));
  const Insert large = row(text(big), {text("acme"), text("1"), text("2026-12-01 05:55:23+00")});
  const Insert small = row(text("\\x00"), {null(), null(), null()});
  const Insert tombstone = row(null(), {text("acme"), text("1"), text("2026-12-01 05:55:23+00")});
  (void)mapper.map_insert(large);  // warm-up: topic and payload scratch
  const std::size_t before = test::allocation_count();
  for (int i = 0; i < 100; ++i) {
    const MapResult a = mapper.map_insert(small);
    const MapResult b = mapper.map_insert(large);
    const MapResult c = mapper.map_insert(tombstone);
    if (!std::holds_alternative<Event>(a) || !std::holds_alternative<Event>(b) ||
        !std::holds_alternative<Event>(c)) {
      break;
    }
  }
  EXPECT_EQ(test::allocation_count() - before, 0u);
  EXPECT_EQ(as_event(mapper.map_insert(large)).partition, 1);
}

}  // namespace
}  // namespace outbox::mapping
