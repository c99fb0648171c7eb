#include "outbox/mapping/mapper.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "allocation_counter.hpp"

namespace outbox::mapping {
namespace {

using pgoutput::Column;
using pgoutput::Insert;
using pgoutput::Relation;
using pgoutput::TupleValue;
using pgoutput::ValueKind;

constexpr std::uint32_t kOutboxRelid = 16'390;
const std::vector<std::string_view> kDefaultColumns = {"id", "aggregatetype", "aggregateid", "type",
                                                       "payload"};

Relation make_relation(std::uint32_t relid, std::string_view nspname, std::string_view relname,
                       const std::vector<std::string_view>& columns) {
  Relation relation{.relid = relid, .nspname = nspname, .relname = relname, .columns = {}};
  for (const std::string_view name : columns) {
    relation.columns.push_back(Column{.flags = 0, .name = name, .type_oid = 25});
  }
  return relation;
}

TupleValue text(std::string_view data) { return {.kind = ValueKind::kText, .data = data}; }
TupleValue null() { return {.kind = ValueKind::kNull, .data = {}}; }

Insert make_insert(std::uint32_t relid, std::vector<TupleValue> values) {
  return Insert{.relid = relid, .new_tuple = std::move(values)};
}

// A row as an application would write it to the default outbox table.
Insert order_created(std::uint32_t relid = kOutboxRelid) {
  return make_insert(relid, {text("5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10"), text("Order"),
                             text("order-1042"), text("OrderCreated"),
                             text(R"({"orderId":1042,"total":"99.90","lines":[{"sku":"A-1"}]})")});
}

const Event& as_event(const MapResult& result) {
  if (const auto* error = std::get_if<MapError>(&result)) {
    ADD_FAILURE() << "unexpected MapError: " << error->table << " " << error->column << " "
                  << error->reason;
  }
  if (std::holds_alternative<NotOutbox>(result)) ADD_FAILURE() << "unexpected NotOutbox";
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

Mapper default_mapper() {
  Mapper mapper{MapperConfig{}};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  return mapper;
}

TEST(Mapper, DefaultMappingFollowsDebeziumOutboxRouter) {
  Mapper mapper = default_mapper();
  const Insert insert = order_created();
  const MapResult result = mapper.map_insert(insert);
  const Event& event = as_event(result);
  EXPECT_EQ(event.topic, "outbox.event.Order");
  EXPECT_EQ(event.key, "order-1042");
  EXPECT_EQ(event.value, R"({"orderId":1042,"total":"99.90","lines":[{"sku":"A-1"}]})");
  EXPECT_EQ(event.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");
  EXPECT_EQ(event.type, "OrderCreated");
  // Key, value and headers are views into the decoded tuple, not copies.
  EXPECT_EQ(event.value->data(), insert.new_tuple[4].data.data());
  EXPECT_EQ(event.key->data(), insert.new_tuple[2].data.data());
}

TEST(Mapper, ColumnsInAnyOrderAndExtraColumns) {
  Mapper mapper{MapperConfig{}};
  mapper.on_relation(
      make_relation(kOutboxRelid, "public", "outbox",
                    {"payload", "created_at", "type", "aggregateid", "id", "aggregatetype"}));
  const MapResult result = mapper.map_insert(make_insert(
      kOutboxRelid, {text(R"({"a":1})"), text("2024-05-01 10:00:00+00"), text("Shipped"),
                     text("ship-7"), text("evt-1"), text("Shipment")}));
  const Event& event = as_event(result);
  EXPECT_EQ(event.topic, "outbox.event.Shipment");
  EXPECT_EQ(event.key, "ship-7");
  EXPECT_EQ(event.value, R"({"a":1})");
  EXPECT_EQ(event.id, "evt-1");
  EXPECT_EQ(event.type, "Shipped");
}

TEST(Mapper, CustomColumnNamesAndTableFromConfig) {
  MapperConfig config;
  config.schema = "billing";
  config.table = "events_out";
  config.topic_template = "billing.${kind}";
  config.column_id = "event_id";
  config.column_aggregatetype = "kind";
  config.column_aggregateid = "invoice_no";
  config.column_type = "event_name";
  config.column_payload = "body";
  Mapper mapper{config};
  mapper.on_relation(make_relation(7, "billing", "events_out",
                                   {"event_id", "kind", "invoice_no", "event_name", "body"}));
  const MapResult result = mapper.map_insert(make_insert(
      7, {text("e-9"), text("Invoice"), text("INV-2024-1"), text("InvoicePaid"), text("{}")}));
  const Event& event = as_event(result);
  EXPECT_EQ(event.topic, "billing.Invoice");
  EXPECT_EQ(event.key, "INV-2024-1");
  EXPECT_EQ(event.value, "{}");
  EXPECT_EQ(event.id, "e-9");
  EXPECT_EQ(event.type, "InvoicePaid");

  // The default public.outbox is not the outbox under this configuration.
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  const MapResult other = mapper.map_insert(order_created());
  ASSERT_TRUE(std::holds_alternative<NotOutbox>(other));
  EXPECT_EQ(std::get<NotOutbox>(other).table, "public.outbox");
}

TEST(Mapper, CustomTemplateReferencingOtherColumns) {
  MapperConfig config;
  config.topic_template = "${tenant}.events.${aggregatetype}";
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox",
                                   {"id", "tenant", "aggregatetype", "aggregateid", "payload"}));
  const MapResult result = mapper.map_insert(
      make_insert(kOutboxRelid, {text("1"), text("acme"), text("Order"), text("o-1"), text("{}")}));
  EXPECT_EQ(as_event(result).topic, "acme.events.Order");
}

TEST(Mapper, TemplateWithoutAggregatetypeDoesNotRequireThatColumn) {
  MapperConfig config;
  config.topic_template = "events.${tenant}";
  Mapper mapper{config};
  mapper.on_relation(
      make_relation(kOutboxRelid, "public", "outbox", {"id", "tenant", "aggregateid", "payload"}));
  const MapResult result = mapper.map_insert(
      make_insert(kOutboxRelid, {text("1"), text("acme"), text("o-1"), text("{}")}));
  EXPECT_EQ(as_event(result).topic, "events.acme");
}

TEST(Mapper, ColumnReferencedByTemplateIsRequired) {
  MapperConfig config;
  config.topic_template = "${tenant}.${aggregatetype}";
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  const MapError error = as_error(mapper.map_insert(order_created()));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "tenant");
  EXPECT_EQ(error.reason, "is missing from the table");
  EXPECT_EQ(error.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");
}

TEST(Mapper, LiteralTemplateNeedsNoAggregatetype) {
  MapperConfig config;
  config.topic_template = "all-events";
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", {"id", "payload"}));
  const MapResult result = mapper.map_insert(make_insert(kOutboxRelid, {text("1"), text("{}")}));
  const Event& event = as_event(result);
  EXPECT_EQ(event.topic, "all-events");
  EXPECT_EQ(event.key, std::nullopt);
  EXPECT_EQ(event.type, std::nullopt);
}

TEST(Mapper, NullIdIsRejectedNamingColumnAndTable) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[0] = null();
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "id");
  EXPECT_EQ(error.reason, "is NULL");
  EXPECT_EQ(error.id, "");
}

TEST(Mapper, NullAggregatetypeIsRejectedWithTheEventId) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[1] = null();
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "aggregatetype");
  EXPECT_EQ(error.reason, "is NULL");
  EXPECT_EQ(error.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");
}

TEST(Mapper, NullPayloadIsRejected) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[4] = null();
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "payload");
  EXPECT_EQ(error.reason, "is NULL");
  EXPECT_EQ(error.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");
}

TEST(Mapper, MissingRequiredColumnsAreRejected) {
  {
    Mapper mapper{MapperConfig{}};
    mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox",
                                     {"id", "aggregatetype", "aggregateid", "type"}));
    const MapError error = as_error(mapper.map_insert(make_insert(
        kOutboxRelid, {text("evt-1"), text("Order"), text("o-1"), text("OrderCreated")})));
    EXPECT_EQ(error.table, "public.outbox");
    EXPECT_EQ(error.column, "payload");
    EXPECT_EQ(error.reason, "is missing from the table");
    EXPECT_EQ(error.id, "evt-1");
  }
  {
    Mapper mapper{MapperConfig{}};
    mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox",
                                     {"aggregatetype", "aggregateid", "payload"}));
    const MapError error = as_error(
        mapper.map_insert(make_insert(kOutboxRelid, {text("Order"), text("o-1"), text("{}")})));
    EXPECT_EQ(error.column, "id");
    EXPECT_EQ(error.reason, "is missing from the table");
    EXPECT_EQ(error.id, "");
  }
  {
    Mapper mapper{MapperConfig{}};
    mapper.on_relation(
        make_relation(kOutboxRelid, "public", "outbox", {"id", "aggregateid", "payload"}));
    const MapError error = as_error(
        mapper.map_insert(make_insert(kOutboxRelid, {text("evt-2"), text("o-1"), text("{}")})));
    EXPECT_EQ(error.column, "aggregatetype");
    EXPECT_EQ(error.reason, "is missing from the table");
    EXPECT_EQ(error.id, "evt-2");
  }
}

TEST(Mapper, NullAggregateidGivesNullKey) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[2] = null();
  const MapResult result = mapper.map_insert(insert);
  const Event& event = as_event(result);
  EXPECT_EQ(event.key, std::nullopt);
  EXPECT_EQ(event.topic, "outbox.event.Order");
}

TEST(Mapper, MissingAggregateidColumnGivesNullKey) {
  Mapper mapper{MapperConfig{}};
  mapper.on_relation(
      make_relation(kOutboxRelid, "public", "outbox", {"id", "aggregatetype", "type", "payload"}));
  const MapResult result = mapper.map_insert(
      make_insert(kOutboxRelid, {text("evt-1"), text("Order"), text("OrderCreated"), text("{}")}));
  EXPECT_EQ(as_event(result).key, std::nullopt);
}

TEST(Mapper, MissingOrNullTypeGivesNoTypeHeader) {
  {
    Mapper mapper{MapperConfig{}};
    mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox",
                                     {"id", "aggregatetype", "aggregateid", "payload"}));
    const MapResult result = mapper.map_insert(
        make_insert(kOutboxRelid, {text("evt-1"), text("Order"), text("o-1"), text("{}")}));
    const Event& event = as_event(result);
    EXPECT_EQ(event.type, std::nullopt);
    EXPECT_EQ(event.id, "evt-1");
  }
  {
    Mapper mapper = default_mapper();
    Insert insert = order_created();
    insert.new_tuple[3] = null();
    const MapResult result = mapper.map_insert(insert);
    EXPECT_EQ(as_event(result).type, std::nullopt);
  }
}

TEST(Mapper, EmptyTextIsNotNull) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[2] = text("");
  insert.new_tuple[3] = text("");
  const MapResult result = mapper.map_insert(insert);
  const Event& event = as_event(result);
  EXPECT_EQ(event.key, "");
  EXPECT_EQ(event.type, "");
}

TEST(Mapper, OtherTablesAreNotOutbox) {
  Mapper mapper = default_mapper();
  mapper.on_relation(make_relation(20'001, "public", "orders", {"id", "total"}));
  mapper.on_relation(make_relation(20'002, "audit", "outbox", kDefaultColumns));

  const MapResult orders = mapper.map_insert(make_insert(20'001, {text("1"), text("9.90")}));
  ASSERT_TRUE(std::holds_alternative<NotOutbox>(orders));
  EXPECT_EQ(std::get<NotOutbox>(orders).table, "public.orders");

  const MapResult audit = mapper.map_insert(order_created(20'002));
  ASSERT_TRUE(std::holds_alternative<NotOutbox>(audit));
  EXPECT_EQ(std::get<NotOutbox>(audit).table, "audit.outbox");
}

TEST(Mapper, UnknownRelidIsAProtocolError) {
  Mapper mapper = default_mapper();
  const MapError error = as_error(mapper.map_insert(order_created(99)));
  EXPECT_EQ(error.reason, "relation id 99 was never announced by a Relation message");
}

TEST(Mapper, ColumnCountMismatchIsAProtocolError) {
  Mapper mapper = default_mapper();
  const MapError error =
      as_error(mapper.map_insert(make_insert(kOutboxRelid, {text("evt-1"), text("Order")})));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "");
  EXPECT_NE(error.reason.find("2 columns"), std::string::npos) << error.reason;
  EXPECT_NE(error.reason.find("announced 5"), std::string::npos) << error.reason;
}

TEST(Mapper, NewRelationMessageReplacesCachedColumns) {
  Mapper mapper = default_mapper();
  EXPECT_EQ(as_event(mapper.map_insert(order_created())).topic, "outbox.event.Order");

  // ALTER TABLE rebuilt the table with another column order; the server announces it again.
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox",
                                   {"payload", "aggregateid", "id", "type", "aggregatetype"}));
  const MapResult result = mapper.map_insert(make_insert(
      kOutboxRelid, {text(R"({"v":2})"), text("c-3"), text("evt-3"), null(), text("Customer")}));
  const Event& event = as_event(result);
  EXPECT_EQ(event.topic, "outbox.event.Customer");
  EXPECT_EQ(event.key, "c-3");
  EXPECT_EQ(event.value, R"({"v":2})");
  EXPECT_EQ(event.id, "evt-3");
  EXPECT_EQ(event.type, std::nullopt);
}

TEST(Mapper, RelationCacheOutlivesTheDecodedBuffer) {
  Mapper mapper{MapperConfig{}};
  {
    // The Relation's views refer into a receive buffer that is reused after the call.
    std::string buffer = "public outbox id aggregatetype aggregateid type payload";
    const std::string_view b = buffer;
    Relation relation = make_relation(
        kOutboxRelid, b.substr(0, 6), b.substr(7, 6),
        {b.substr(14, 2), b.substr(17, 13), b.substr(31, 11), b.substr(43, 4), b.substr(48, 7)});
    mapper.on_relation(relation);
    buffer.assign(buffer.size(), 'x');
  }
  EXPECT_EQ(as_event(mapper.map_insert(order_created())).topic, "outbox.event.Order");
  EXPECT_EQ(as_error(mapper.map_insert(order_created(1))).table, "");
}

TEST(Mapper, EmptyNamespaceMeansPgCatalog) {
  MapperConfig config;
  config.schema = "pg_catalog";
  config.table = "outbox";
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "", "outbox", kDefaultColumns));
  EXPECT_EQ(as_event(mapper.map_insert(order_created())).topic, "outbox.event.Order");

  Mapper default_config{MapperConfig{}};
  default_config.on_relation(make_relation(kOutboxRelid, "", "outbox", kDefaultColumns));
  const MapResult result = default_config.map_insert(order_created());
  ASSERT_TRUE(std::holds_alternative<NotOutbox>(result));
  EXPECT_EQ(std::get<NotOutbox>(result).table, "pg_catalog.outbox");
}

TEST(Mapper, BinaryValuesAreRejected) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[4] = TupleValue{.kind = ValueKind::kBinary, .data = "\x01\x02"};
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.column, "payload");
  EXPECT_NE(error.reason.find("binary"), std::string::npos) << error.reason;
}

TEST(Mapper, UnchangedToastIsRejected) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[4] = TupleValue{.kind = ValueKind::kUnchangedToast, .data = {}};
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.column, "payload");
  EXPECT_NE(error.reason.find("TOAST"), std::string::npos) << error.reason;

  Insert toasted_key = order_created();
  toasted_key.new_tuple[2] = TupleValue{.kind = ValueKind::kUnchangedToast, .data = {}};
  EXPECT_EQ(as_error(mapper.map_insert(toasted_key)).column, "aggregateid");
}

TEST(Mapper, TopicThatKafkaWouldRejectIsAMapError) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[1] = text("Order Events");
  const MapError error = as_error(mapper.map_insert(insert));
  EXPECT_EQ(error.table, "public.outbox");
  EXPECT_EQ(error.column, "aggregatetype");
  EXPECT_NE(error.reason.find("outbox.event.Order Events"), std::string::npos) << error.reason;
  EXPECT_EQ(error.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");

  MapperConfig config;
  config.topic_template = "${aggregatetype}";
  Mapper bare{config};
  bare.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  Insert empty_type = order_created();
  empty_type.new_tuple[1] = text("");
  EXPECT_NE(as_error(bare.map_insert(empty_type)).reason.find("not a valid Kafka topic"),
            std::string::npos);
}

TEST(Mapper, PayloadIsNotCheckedUnlessRequireJson) {
  Mapper mapper = default_mapper();
  Insert insert = order_created();
  insert.new_tuple[4] = text("{bad");
  EXPECT_EQ(as_event(mapper.map_insert(insert)).value, "{bad");
}

TEST(Mapper, RequireJsonAcceptsValidDocuments) {
  MapperConfig config;
  config.require_json = true;
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  for (const std::string_view payload :
       {std::string_view(R"({"orderId":1042,"lines":[{"sku":"A-1","qty":2}],"note":null})"),
        std::string_view("[]"), std::string_view("\"text\""), std::string_view("42"),
        std::string_view(" {\"a\" : true }\n")}) {
    Insert insert = order_created();
    insert.new_tuple[4] = text(payload);
    EXPECT_EQ(as_event(mapper.map_insert(insert)).value, payload);
  }
}

TEST(Mapper, RequireJsonRejectsInvalidDocuments) {
  MapperConfig config;
  config.require_json = true;
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  for (const std::string_view payload :
       {std::string_view("{bad"), std::string_view(""), std::string_view("{} trailing"),
        std::string_view(R"({"a":1,})"), std::string_view(R"({"a":[1,2}})")}) {
    Insert insert = order_created();
    insert.new_tuple[4] = text(payload);
    const MapError error = as_error(mapper.map_insert(insert));
    EXPECT_EQ(error.table, "public.outbox") << payload;
    EXPECT_EQ(error.column, "payload") << payload;
    EXPECT_TRUE(error.reason.starts_with("is not valid JSON: ")) << error.reason;
    EXPECT_GT(error.reason.size(), std::string_view("is not valid JSON: ").size());
    EXPECT_EQ(error.id, "5b2c1c4e-3f5a-4d8e-9a41-0c3b2f7e9d10");
  }
}

TEST(Mapper, InvalidTopicTemplateIsRejectedAtConstruction) {
  MapperConfig config;
  config.topic_template = "outbox.event.${aggregatetype";
  EXPECT_THROW(Mapper{config}, std::invalid_argument);
}

TEST(Mapper, NoHeapAllocationPerEventAfterWarmUp) {
  if (!test::counting_allocations()) GTEST_SKIP() << "allocations are not counted under ASan";
  MapperConfig config;
  config.require_json = true;
  config.topic_template = "${aggregatetype}.events.${aggregatetype}";
  Mapper mapper{config};
  mapper.on_relation(make_relation(kOutboxRelid, "public", "outbox", kDefaultColumns));
  const Insert big = order_created();
  Insert small = order_created();
  small.new_tuple[1] = text("Tag");
  small.new_tuple[4] = text("{}");
  const std::size_t cold = test::allocation_count();
  (void)mapper.map_insert(big);  // warm-up: topic scratch, JSON parser and padded buffer
  ASSERT_GT(test::allocation_count(), cold) << "the allocation counter is not counting";

  const std::size_t before = test::allocation_count();
  for (int i = 0; i < 100; ++i) {
    const MapResult a = mapper.map_insert(small);
    const MapResult b = mapper.map_insert(big);
    if (!std::holds_alternative<Event>(a) || !std::holds_alternative<Event>(b)) break;
  }
  const std::size_t allocations = test::allocation_count() - before;
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(as_event(mapper.map_insert(small)).topic, "Tag.events.Tag");
}

}  // namespace
}  // namespace outbox::mapping
