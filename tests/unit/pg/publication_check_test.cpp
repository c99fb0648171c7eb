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
