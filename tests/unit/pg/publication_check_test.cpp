// What the relay concludes from the catalog about a publication: which configurations would hide
// outbox inserts (refused, with a message naming the publication, the table and the fix), which
// relations carry the table's inserts, and when two checks saw the same publication.

#include "outbox/pg/publication_check.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox::pg {
namespace {

const PublicationTarget kTarget{"outbox_pub", "public", "outbox"};

Row pub_row(const std::string& actions, const std::string& xmin = "700") {
  return {"pub", "16400", xmin, actions, "false", "true", std::nullopt};
}
Row table_row(const std::string& relkind) {
  return {"table", "16384", relkind, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
}
// A relation of the table's partition tree.
Row rel_row(const std::string& relid, bool leaf, std::optional<std::string> parent, bool published,
            const std::string& name, std::optional<std::string> rowfilter = std::nullopt) {
  return {"rel",
          relid,
          leaf ? "true" : "false",
          std::move(parent),
          published ? "true" : "false",
          std::move(rowfilter),
          name};
}
Row fp_row(const std::string& oid, const std::string& xmin) {
  return {"fp", oid, xmin, std::nullopt, std::nullopt, std::nullopt, "rel"};
}

TEST(PublicationCheck, PlainTablePublishedIsOk) {
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("r"),
                                   rel_row("16384", true, std::nullopt, true, "public.outbox"),
                                   fp_row("16500", "701")});
  EXPECT_TRUE(c.ok()) << c.problem;
  EXPECT_FALSE(c.partitioned);
  EXPECT_EQ(c.published_relids, std::vector<std::uint32_t>{16384});
  EXPECT_EQ(c.fingerprint, "pub:16400:700;rel:16500:701");
}

Row emit_row(const std::string& signature, bool public_may) {
  return {"emit",       signature,   public_may ? "true" : "false", std::nullopt, std::nullopt,
          std::nullopt, std::nullopt};
}

// --messages: pgoutput sends every message of the database, so PUBLIC must not be able to emit
// one; the check says which overloads it may still run, and how to fix it.
TEST(PublicationCheck, MessagesRefusedWhilePublicMayEmit) {
  const PublicationTarget messages_only{"outbox_pub", "public", "", {}, true};
  const Row pub = pub_row("insert, update, delete, truncate");
  auto c = assess_publication(messages_only,
                              {pub, emit_row("pg_logical_emit_message(boolean,text,bytea)", false),
                               emit_row("pg_logical_emit_message(boolean,text,text)", true)});
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.public_emit, std::vector<std::string>{"pg_logical_emit_message(boolean,text,text)"});
  EXPECT_EQ(c.problem.rfind("PUBLIC may execute pg_logical_emit_message(boolean,text,text): with "
                            "--messages any role that can connect could publish forged events",
                            0),
            0u)
      << c.problem;
  EXPECT_NE(c.problem.find("docs/security.md"), std::string::npos);
  c = assess_publication(messages_only,
                         {pub, emit_row("pg_logical_emit_message(boolean,text,bytea)", false),
                          emit_row("pg_logical_emit_message(boolean,text,text)", false)});
  EXPECT_TRUE(c.ok()) << c.problem;
  // The statement asks for the rows only with --messages.
  const QuoteFn quote = [](const std::string& v) { return "'" + v + "'"; };
  EXPECT_NE(publication_check_sql(messages_only, quote).find("pg_logical_emit_message"),
            std::string::npos);
  EXPECT_EQ(publication_check_sql(kTarget, quote).find("pg_logical_emit_message"),
            std::string::npos);
}

TEST(PublicationCheck, RestrictEmitStatements) {
  EXPECT_EQ(restrict_emit_sql({"pg_logical_emit_message(boolean,text,text)"}, {"\"w1\"", "w2"}),
            (std::vector<std::string>{
                "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,text) FROM PUBLIC",
                "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,text) TO \"w1\"",
                "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,text) TO w2"}));
}

TEST(PublicationCheck, MissingPublication) {
  const auto c = assess_publication(kTarget, {table_row("r")});
  EXPECT_EQ(c.problem.rfind("publication outbox_pub does not exist", 0), 0u) << c.problem;
}

TEST(PublicationCheck, MissingTable) {
  const auto c = assess_publication(kTarget, {pub_row("insert")});
  EXPECT_NE(c.problem.find("table public.outbox does not exist"), std::string::npos) << c.problem;
}

TEST(PublicationCheck, NoInserts) {
  const auto c =
      assess_publication(kTarget, {pub_row("update, delete"), table_row("r"),
                                   rel_row("16384", true, std::nullopt, true, "public.outbox")});
  EXPECT_NE(c.problem.find("publication outbox_pub does not publish inserts (publish = 'update, "
                           "delete')"),
            std::string::npos)
      << c.problem;
  EXPECT_NE(c.problem.find("public.outbox"), std::string::npos) << c.problem;
}

TEST(PublicationCheck, TableNotInPublication) {
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("r"),
                                   rel_row("16384", true, std::nullopt, false, "public.outbox")});
  EXPECT_NE(c.problem.find("publication outbox_pub does not publish table public.outbox"),
            std::string::npos)
      << c.problem;
  EXPECT_NE(c.problem.find("ALTER PUBLICATION outbox_pub ADD TABLE public.outbox"),
            std::string::npos);
}

TEST(PublicationCheck, RowFilterIsRefused) {
  const auto c = assess_publication(
      kTarget, {pub_row("insert"), table_row("r"),
                rel_row("16384", true, std::nullopt, true, "public.outbox", "(a <> 'x'::text)")});
  EXPECT_NE(c.problem.find("only for rows matching WHERE (a <> 'x'::text)"), std::string::npos)
      << c.problem;
}

TEST(PublicationCheck, PartitionedViaRoot) {
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("p"),
                                   rel_row("16384", false, std::nullopt, true, "public.outbox"),
                                   rel_row("16390", true, "16384", false, "public.outbox_2025"),
                                   rel_row("16395", true, "16384", false, "public.outbox_2026")});
  EXPECT_TRUE(c.ok()) << c.problem;
  EXPECT_TRUE(c.partitioned);
  EXPECT_EQ(c.tree_relids.size(), 3u);
  EXPECT_EQ(c.published_relids, std::vector<std::uint32_t>{16384});
}

TEST(PublicationCheck, PartitionedLeavesPublished) {
  // Two levels: outbox -> outbox_2025 (partitioned by month) -> outbox_2025_01.
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("p"),
                                   rel_row("16384", false, std::nullopt, false, "public.outbox"),
                                   rel_row("16390", false, "16384", false, "public.outbox_2025"),
                                   rel_row("16391", true, "16390", true, "public.outbox_2025_01"),
                                   rel_row("16395", true, "16384", true, "public.outbox_2026")});
  EXPECT_TRUE(c.ok()) << c.problem;
  EXPECT_EQ(c.published_relids, (std::vector<std::uint32_t>{16391, 16395}));
}

TEST(PublicationCheck, PartitionLeftOut) {
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("p"),
                                   rel_row("16384", false, std::nullopt, false, "public.outbox"),
                                   rel_row("16390", true, "16384", true, "public.outbox_2025"),
                                   rel_row("16395", true, "16384", false, "public.outbox_2026")});
  EXPECT_NE(c.problem.find("publishes only some partitions of table public.outbox: inserts "
                           "into public.outbox_2026 would never reach the relay"),
            std::string::npos)
      << c.problem;
}

TEST(PublicationCheck, PartitionedWithoutPartitionsNeedsTheRoot) {
  const auto c =
      assess_publication(kTarget, {pub_row("insert"), table_row("p"),
                                   rel_row("16384", false, std::nullopt, false, "public.outbox")});
  EXPECT_FALSE(c.ok());
}

TEST(PublicationCheck, FingerprintChangesWhenRowsAreRewritten) {
  const Rows base{pub_row("insert"), table_row("r"),
                  rel_row("16384", true, std::nullopt, true, "public.outbox"),
                  fp_row("16500", "701")};
  Rows readded = base;
  readded[3] = fp_row("16501", "705");  // dropped and added back: a new membership row
  Rows altered = base;
  altered[0] = pub_row("insert", "710");  // ALTER PUBLICATION ... SET (...) back and forth
  const auto a = assess_publication(kTarget, base);
  EXPECT_EQ(a.fingerprint, assess_publication(kTarget, base).fingerprint);
  EXPECT_NE(a.fingerprint, assess_publication(kTarget, readded).fingerprint);
  EXPECT_NE(a.fingerprint, assess_publication(kTarget, altered).fingerprint);
}

TEST(PublicationCheck, UnknownRowShapeIsABrokenInvariant) {
  EXPECT_THROW(assess_publication(kTarget, {Row{"what"}}), std::runtime_error);
}

TEST(PublicationCheck, SqlQuotesEveryName) {
  int quoted = 0;
  const std::string sql = publication_check_sql(kTarget, [&](const std::string& v) {
    ++quoted;
    return "'" + v + "'";
  });
  EXPECT_GE(quoted, 3);
  EXPECT_NE(sql.find("'outbox_pub'"), std::string::npos);
  const std::string create =
      create_publication_sql(kTarget, [](const std::string& v) { return "\"" + v + "\""; });
  EXPECT_EQ(create,
            "CREATE PUBLICATION \"outbox_pub\" FOR TABLE \"public\".\"outbox\" WITH (publish = "
            "'insert', publish_via_partition_root = true)");
}

// Several outbox tables (--table repeated): one publication for all of them.
TEST(PublicationCheck, CreatedForEveryOutboxTable) {
  PublicationTarget target = kTarget;
  target.more_tables = {{"billing", "outbox"}, {"shipping", "outbox"}};
  EXPECT_EQ(create_publication_sql(target, [](const std::string& v) { return "\"" + v + "\""; }),
            "CREATE PUBLICATION \"outbox_pub\" FOR TABLE \"public\".\"outbox\", "
            "\"billing\".\"outbox\", \"shipping\".\"outbox\" WITH (publish = 'insert', "
            "publish_via_partition_root = true)");
}

}  // namespace
}  // namespace outbox::pg
