// The pure parts of `outbox-relay reconcile`: the id matching that decides what is missing, the
// SQL of its scans (required columns, commit order), and its output fields. Its flags and time
// bounds: tests/unit/app/reconcile_options_test.cpp.
#include "outbox/lifecycle/reconcile.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>

namespace outbox::lifecycle {
namespace {

TEST(Matching, MissingAreTheWindowIdsNotSeenInKafka) {
  const std::vector<std::string> window = {"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3",
                                           "a08a1549-a568-45f2-b48e-9ff5fa68049e", "order-17",
                                           "ed967341-cfe9-4891-979c-9efc01eaef3c", "order-18"};
  // Kafka holds some of them (one twice: at-least-once), and ids of other windows.
  const std::vector<std::string> seen = {"a08a1549-a568-45f2-b48e-9ff5fa68049e", "order-17",
                                         "a08a1549-a568-45f2-b48e-9ff5fa68049e",
                                         "11111111-2222-3333-4444-555555555555", "order-99"};
  EXPECT_EQ(missing_ids(window, seen),
            (std::vector<std::string>{"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3",
                                      "ed967341-cfe9-4891-979c-9efc01eaef3c", "order-18"}));
  EXPECT_TRUE(missing_ids(window, window).empty());
  EXPECT_EQ(missing_ids(window, {}), window);
  EXPECT_TRUE(missing_ids({}, seen).empty());
}

TEST(Matching, TextMatchIsExact) {
  // An upper-case UUID is another text than PostgreSQL's; the relay sends what PostgreSQL prints.
  EXPECT_EQ(missing_ids({"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3"},
                        {"2CE56E90-2EA7-48DE-9CF5-46A98DAC1EA3"}),
            (std::vector<std::string>{"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3"}));
  EXPECT_EQ(missing_ids({"Order-1"}, {"order-1"}), (std::vector<std::string>{"Order-1"}));
  EXPECT_EQ(missing_ids({"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3 "},
                        {"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3"}),
            (std::vector<std::string>{"2ce56e90-2ea7-48de-9cf5-46a98dac1ea3 "}));
  EXPECT_TRUE(missing_ids({""}, {""}).empty());
}

TEST(Matching, IdSetIsCompactAndCountsDuplicates) {
  EventIdSet ids;
  char buf[40];
  for (unsigned i = 0; i < 10'000; ++i) {
    std::snprintf(buf, sizeof buf, "%08x-0000-4000-8000-%012x", i * 2654435761u, i);
    ids.add(buf);
  }
  ids.add("not-a-uuid");
  ids.add("not-a-uuid");
  ids.seal();
  EXPECT_EQ(ids.size(), 10'001u);
  EXPECT_EQ(ids.duplicates(), 1u);
  EXPECT_EQ(ids.missing(), 10'001u);
  // 16 bytes and a bit per UUID.
  EXPECT_LT(ids.memory_bytes(), 10'001u * 17 + 64);
  std::snprintf(buf, sizeof buf, "%08x-0000-4000-8000-%012x", 7 * 2654435761u, 7u);
  EXPECT_TRUE(ids.is_missing(buf));
  EXPECT_TRUE(ids.mark_seen(buf));
  EXPECT_TRUE(ids.mark_seen(buf));
  EXPECT_FALSE(ids.is_missing(buf));
  EXPECT_TRUE(ids.contains(buf));
  EXPECT_FALSE(ids.mark_seen("00000000-0000-4000-8000-ffffffffffff"));
  EXPECT_TRUE(ids.mark_seen("not-a-uuid"));
  EXPECT_EQ(ids.missing(), 9'999u);
}

ReconcileOptions options_with_template(std::string tmpl) {
  ReconcileOptions o;  // the mapping's defaults are the relay's
  o.column_time = "created_at";
  o.mapper.topic_template = std::move(tmpl);
  return o;
}

ReconcileTable outbox_table(std::vector<std::string> columns, std::string table = "outbox") {
  ReconcileTable t{"public", std::move(table), 16384, std::move(columns), {}};
  t.type_oids.assign(t.columns.size(), 25);  // text
  return t;
}

const std::vector<std::string> kColumns = {"id",   "aggregatetype", "aggregateid",
                                           "type", "payload",       "created_at"};

TEST(Queries, ScanTheWindowAndOrderByCommit) {
  const ReconcileOptions o = options_with_template("outbox.event.${aggregatetype}");
  const ReconcileQueries q = reconcile_queries(o, {outbox_table(kColumns)}, false);
  ASSERT_EQ(q.scans.size(), 1u);
  // Every column, uncast: text results are the output functions' text, as pgoutput's.
  EXPECT_EQ(q.scans[0],
            "SELECT t.\"created_at\"::text, t.\"id\", t.\"aggregatetype\", t.\"aggregateid\", "
            "t.\"type\", t.\"payload\", t.\"created_at\" FROM \"public\".\"outbox\" AS t "
            "WHERE t.\"created_at\" >= $1::timestamptz AND t.\"created_at\" < $2::timestamptz");
  EXPECT_NE(q.ordered.find("pg_catalog.format('%s', t.\"payload\")"), std::string::npos)
      << q.ordered;
  EXPECT_NE(q.ordered.find(") AS r ORDER BY r.at, r.age DESC, r.tbl, r.pos"), std::string::npos)
      << q.ordered;
  EXPECT_EQ(q.ordered.find("pg_xact_commit_timestamp"), std::string::npos);
  EXPECT_EQ(q.ordered.find("UNION ALL"), std::string::npos);

  const ReconcileQueries c = reconcile_queries(o, {outbox_table(kColumns)}, true);
  EXPECT_NE(c.ordered.find(" ORDER BY r.commit_at NULLS FIRST, r.at, r.age DESC, r.tbl, r.pos"),
            std::string::npos)
      << c.ordered;
  // The record time: the commit time, else the time column, in microseconds.
  EXPECT_NE(c.ordered.find("(extract(epoch FROM COALESCE(pg_catalog.pg_xact_commit_timestamp("
                           "t.xmin), t.\"created_at\"::timestamptz)) * 1000000)::bigint"),
            std::string::npos)
      << c.ordered;
}

TEST(Queries, SeveralTablesInOneCommitOrder) {
  const ReconcileOptions o = options_with_template("outbox.event.${aggregatetype}");
  std::vector<std::string> wider = kColumns;
  wider.push_back("tenant");
  const ReconcileQueries q =
      reconcile_queries(o, {outbox_table(wider), outbox_table(kColumns, "second")}, false);
  ASSERT_EQ(q.scans.size(), 2u);
  EXPECT_NE(q.scans[1].find("FROM \"public\".\"second\" AS t"), std::string::npos);
  const auto union_at = q.ordered.find(" UNION ALL SELECT 1 AS tbl, ");
  ASSERT_NE(union_at, std::string::npos) << q.ordered;
  EXPECT_EQ(q.ordered.rfind("SELECT * FROM (SELECT 0 AS tbl, ", 0), 0u) << q.ordered;
  // The narrower table is padded to the widest one's column count.
  EXPECT_NE(q.ordered.find(", NULL::text FROM \"public\".\"second\""), std::string::npos)
      << q.ordered;
}

TEST(Queries, RequiredColumns) {
  auto error = [&](const std::vector<std::string>& columns, const std::string& tmpl) {
    try {
      reconcile_queries(options_with_template(tmpl), {outbox_table(columns)}, false);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({"id", "aggregatetype", "payload", "created_at"}, "t.${aggregatetype}"),
            "no error");  // no type and no aggregateid column: the relay has no header, no key
  EXPECT_EQ(error({"aggregatetype", "payload", "created_at"}, "t.${aggregatetype}"),
            "table public.outbox has no column id (--column-id)");
  EXPECT_EQ(error({"id", "aggregatetype", "created_at"}, "t.${aggregatetype}"),
            "table public.outbox has no column payload (--column-payload)");
  EXPECT_EQ(error({"id", "aggregatetype", "payload"}, "t.${aggregatetype}"),
            "table public.outbox has no column created_at (--column-time)");
  EXPECT_EQ(error({"id", "aggregatetype", "payload", "created_at"}, "t.${region}.${aggregatetype}"),
            "table public.outbox has no column region (referenced by the topic template)");
}

TEST(Queries, IdentifiersAreQuoted) {
  ReconcileOptions o = options_with_template("t.${we\"ird}");
  ReconcileTable t = outbox_table({"id", "we\"ird", "payload", "created_at"}, "My Table");
  const ReconcileQueries q = reconcile_queries(o, {t}, false);
  EXPECT_NE(q.scans[0].find("FROM \"public\".\"My Table\" AS t"), std::string::npos) << q.scans[0];
  EXPECT_NE(q.scans[0].find("t.\"we\"\"ird\""), std::string::npos) << q.scans[0];
}

TEST(Output, FieldValues) {
  EXPECT_EQ(field_value(std::string("agg-1")), "agg-1");
  EXPECT_EQ(field_value(std::nullopt), "NULL");
  EXPECT_EQ(field_value(std::string("")), "\"\"");
  EXPECT_EQ(field_value(std::string("2026-11-30 10:00:00+00")), "\"2026-11-30 10:00:00+00\"");
  EXPECT_EQ(field_value(std::string("a\"b\\c=d")), "\"a\\\"b\\\\c=d\"");
}

}  // namespace
}  // namespace outbox::lifecycle
