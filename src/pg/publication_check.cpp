#include "outbox/pg/publication_check.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <stdexcept>

#include "outbox/common/qualified_name.hpp"

namespace outbox::pg {
namespace {

std::uint32_t oid_of(const std::optional<std::string>& text) {
  std::uint32_t v = 0;
  if (!text) throw std::runtime_error("publication check: NULL oid");
  auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || p != text->data() + text->size()) {
    throw std::runtime_error("publication check: invalid oid '" + *text + "'");
  }
  return v;
}

// bool::text is "true"; a bool column in text format is "t".
bool is_true(const std::optional<std::string>& text) {
  return text && (*text == "true" || *text == "t");
}

struct TreeRel {
  std::uint32_t relid = 0;
  std::uint32_t parent = 0;  // 0 for the table itself
  bool leaf = false;
  bool published = false;
  std::optional<std::string> rowfilter;
  std::string name;
};

// One row per pg_logical_emit_message overload (two before PostgreSQL 17, three since: the
// flush variant) with whether PUBLIC may execute it ("public" is a role name to
// has_function_privilege).
constexpr const char* emit_rows_sql =
    " UNION ALL SELECT 'emit', p.oid::regprocedure::text, "
    "pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')::text, NULL, NULL, NULL, "
    "NULL FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND "
    "p.proname = 'pg_logical_emit_message'";

}  // namespace

std::string publication_check_sql(const PublicationTarget& t, const QuoteFn& quote_literal) {
  const std::string pub = quote_literal(t.publication);
  // Columns: kind, a, b, c, d, e, name. pg_publication_tables resolves what pgoutput publishes
  // under which name (leaves, or the topmost published ancestor with publish_via_partition_root)
  // and shows row filters (PostgreSQL 15).
  return "WITH pub AS (SELECT p.oid, p.xmin, p.pubinsert, p.pubupdate, p.pubdelete, "
         "p.pubtruncate, p.puballtables, p.pubviaroot FROM pg_catalog.pg_publication p "
         "WHERE p.pubname = " +
         pub +
         "), tbl AS (SELECT c.oid, c.relkind, c.relispartition FROM pg_catalog.pg_class c JOIN "
         "pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = " +
         quote_literal(t.schema) + " AND c.relname = " + quote_literal(t.table) +
         " AND c.relkind IN ('r', 'p')), "
         // pg_partition_tree() has no row for a table that is neither partitioned nor a partition.
         "tree0 AS (SELECT pt.relid::oid AS relid, pt.parentrelid::oid AS parentrelid, pt.isleaf "
         "FROM tbl CROSS JOIN LATERAL pg_catalog.pg_partition_tree(tbl.oid) pt "
         "UNION ALL SELECT oid, NULL::oid, true FROM tbl WHERE relkind = 'r' AND NOT "
         "relispartition), "
         "tree AS (SELECT t.relid, t.parentrelid, t.isleaf, c.relnamespace, n.nspname || '.' || "
         "c.relname AS name FROM tree0 t JOIN pg_catalog.pg_class c ON c.oid = t.relid "
         "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace), "
         "published AS (SELECT c.oid AS relid, pt.rowfilter FROM pg_catalog.pg_publication_tables "
         "pt JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname JOIN pg_catalog.pg_class "
         "c ON c.relnamespace = n.oid AND c.relname = pt.tablename WHERE pt.pubname = " +
         pub +
         ") "
         "SELECT 'pub', oid::text, xmin::text, concat_ws(', ', CASE WHEN pubinsert THEN 'insert' "
         "END, CASE WHEN pubupdate THEN 'update' END, CASE WHEN pubdelete THEN 'delete' END, CASE "
         "WHEN pubtruncate THEN 'truncate' END), puballtables::text, pubviaroot::text, NULL FROM "
         "pub "
         "UNION ALL SELECT 'table', oid::text, relkind::text, NULL, NULL, NULL, NULL FROM tbl "
         "UNION ALL SELECT 'rel', t.relid::text, t.isleaf::text, t.parentrelid::text, "
         "(p.relid IS NOT NULL)::text, p.rowfilter, t.name FROM tree t LEFT JOIN published p ON "
         "p.relid = t.relid "
         "UNION ALL SELECT 'fp', r.oid::text, r.xmin::text, NULL, NULL, NULL, 'rel' FROM "
         "pg_catalog.pg_publication_rel r JOIN pub ON r.prpubid = pub.oid WHERE r.prrelid IN "
         "(SELECT relid FROM tree) "
         "UNION ALL SELECT 'fp', s.oid::text, s.xmin::text, NULL, NULL, NULL, 'ns' FROM "
         "pg_catalog.pg_publication_namespace s JOIN pub ON s.pnpubid = pub.oid WHERE s.pnnspid "
         "IN (SELECT relnamespace FROM tree)" +
         (t.messages ? std::string(emit_rows_sql) : std::string());
}

std::vector<std::string> restrict_emit_sql(const std::vector<std::string>& signatures,
                                           const std::vector<std::string>& quoted_writers) {
  std::vector<std::string> out;
  for (const std::string& sig : signatures) {
    out.push_back("REVOKE EXECUTE ON FUNCTION " + sig + " FROM PUBLIC");
    for (const std::string& w : quoted_writers) {
      out.push_back("GRANT EXECUTE ON FUNCTION " + sig + " TO " + w);
    }
  }
  return out;
}

std::string create_publication_sql(const PublicationTarget& t, const QuoteFn& quote_identifier) {
  // Messages only: pgoutput still needs a publication, and sends messages whatever it holds.
  if (t.table.empty()) return "CREATE PUBLICATION " + quote_identifier(t.publication);
  std::string tables = quote_identifier(t.schema) + "." + quote_identifier(t.table);
  for (const auto& [schema, table] : t.more_tables) {
    tables += ", " + quote_identifier(schema) + "." + quote_identifier(table);
  }
  return "CREATE PUBLICATION " + quote_identifier(t.publication) + " FOR TABLE " + tables +
         " WITH (publish = 'insert', publish_via_partition_root = true)";
}

PublicationCheck assess_publication(const PublicationTarget& t, const Rows& rows) {
  PublicationCheck check;
  const std::string table = common::QualifiedName{t.schema, t.table}.text();
  const std::string& pubname = t.publication;
  std::optional<Row> pub;
  std::optional<Row> tbl;
  std::vector<TreeRel> tree;
  std::vector<std::string> fingerprint_rows;
  std::vector<std::string> public_emit;
  for (const Row& r : rows) {
    if (r.size() != 7 || !r[0]) throw std::runtime_error("publication check: unexpected row");
    const std::string& kind = *r[0];
    if (kind == "pub") {
      pub = r;
    } else if (kind == "table") {
      tbl = r;
    } else if (kind == "rel") {
      TreeRel rel;
      rel.relid = oid_of(r[1]);
      rel.leaf = is_true(r[2]);
      rel.parent = r[3] ? oid_of(r[3]) : 0;
      rel.published = is_true(r[4]);
      rel.rowfilter = r[5];
      rel.name = r[6].value_or("?");
      tree.push_back(std::move(rel));
    } else if (kind == "emit") {
      if (is_true(r[2])) public_emit.push_back(r[1].value_or("?"));
    } else if (kind == "fp") {
      fingerprint_rows.push_back(r[6].value_or("") + ":" + r[1].value_or("") + ":" +
                                 r[2].value_or(""));
    } else {
      throw std::runtime_error("publication check: unexpected row kind " + kind);
    }
  }

  if (pub) {
    std::sort(fingerprint_rows.begin(), fingerprint_rows.end());
    check.fingerprint = "pub:" + pub->at(1).value_or("") + ":" + pub->at(2).value_or("");
    for (const auto& f : fingerprint_rows) check.fingerprint += ";" + f;
  }
  if (tbl) {
    check.table_relid = oid_of(tbl->at(1));
    check.partitioned = tbl->at(2).value_or("") == "p";
  }
  for (const auto& rel : tree) {
    check.tree_relids.push_back(rel.relid);
    if (rel.published) check.published_relids.push_back(rel.relid);
  }

  check.public_emit = public_emit;

  if (!pub) {
    check.problem = "publication " + pubname + " does not exist (run `outbox-relay setup`, or " +
                    "let the relay create it by not giving --no-create)";
    return check;
  }
  if (t.messages && !public_emit.empty()) {
    std::string sigs;
    for (const auto& sig : public_emit) sigs += (sigs.empty() ? "" : ", ") + sig;
    check.problem =
        "PUBLIC may execute " + sigs +
        ": with --messages any role that can connect could publish forged events (run "
        "`outbox-relay setup --messages PREFIX --message-writer ROLE` as a superuser, or REVOKE "
        "EXECUTE ON FUNCTION ... FROM PUBLIC by hand: see docs/security.md)";
    return check;
  }
  // Messages only (no table): the publication has nothing to hide, it only has to exist.
  if (t.table.empty()) return check;
  if (!tbl) {
    check.problem = "table " + table + " does not exist (create it, or give the outbox with " +
                    "--table SCHEMA.TABLE); publication " + pubname + " cannot publish it";
    return check;
  }
  const std::string actions = pub->at(3).value_or("");
  if (actions.find("insert") == std::string::npos) {
    check.problem = "publication " + pubname + " does not publish inserts (publish = '" + actions +
                    "'), so no insert into table " + table +
                    " would reach the relay (ALTER PUBLICATION " + pubname +
                    " SET (publish = 'insert'))";
    return check;
  }

  std::map<std::uint32_t, const TreeRel*> by_relid;
  for (const auto& rel : tree) by_relid[rel.relid] = &rel;
  // A row filter hides the rows it does not match: refuse it wherever it applies.
  for (const auto& rel : tree) {
    if (rel.published && rel.rowfilter) {
      check.problem = "publication " + pubname + " publishes " +
                      (rel.relid == check.table_relid ? "table " + table
                                                      : "partition " + rel.name + " of " + table) +
                      " only for rows matching WHERE " + *rel.rowfilter +
                      ": other inserts would never reach the relay (ALTER PUBLICATION " + pubname +
                      " SET TABLE " + table + " without a WHERE clause)";
      return check;
    }
  }
  // Each leaf must be published, itself or under an ancestor's name.
  std::vector<std::string> hidden;
  std::size_t leaves = 0;
  for (const auto& rel : tree) {
    if (!rel.leaf) continue;
    ++leaves;
    bool covered = false;
    for (const TreeRel* r = &rel; r && !covered;) {
      covered = r->published;
      auto parent = by_relid.find(r->parent);
      r = r->parent != 0 && parent != by_relid.end() ? parent->second : nullptr;
    }
    if (!covered) hidden.push_back(rel.name);
  }
  const bool root_published =
      std::find(check.published_relids.begin(), check.published_relids.end(), check.table_relid) !=
      check.published_relids.end();
  if (check.published_relids.empty() || (leaves == 0 && !root_published)) {
    check.problem = "publication " + pubname + " does not publish table " + table +
                    ", so its inserts would never reach the relay (ALTER PUBLICATION " + pubname +
                    " ADD TABLE " + table + ", or give the relay's own --publication)";
    return check;
  }
  if (!hidden.empty()) {
    std::string names;
    for (std::size_t i = 0; i < hidden.size() && i < 5; ++i) names += (i ? ", " : "") + hidden[i];
    if (hidden.size() > 5) names += " and " + std::to_string(hidden.size() - 5) + " more";
    check.problem = "publication " + pubname + " publishes only some partitions of table " + table +
                    ": inserts into " + names + " would never reach the relay (ALTER PUBLICATION " +
                    pubname + " ADD TABLE " + table +
                    " and SET (publish_via_partition_root = true))";
    return check;
  }
  return check;
}

}  // namespace outbox::pg
