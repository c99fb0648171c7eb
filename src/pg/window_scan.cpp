#include "outbox/pg/window_scan.hpp"

#include <algorithm>

namespace outbox::pg {

std::string quote_ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

CatalogTable describe_table(AdminSession& session, const std::string& schema,
                            const std::string& table) {
  CatalogTable t{schema, table, 0, {}, {}};
  for (auto& row :
       session.exec("SELECT a.attrelid::oid::text, a.attname, a.atttypid::oid::text FROM "
                    "pg_catalog.pg_attribute AS a WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
                    "AND NOT a.attisdropped ORDER BY a.attnum",
                    {quote_ident(schema) + "." + quote_ident(table)})) {
    t.relid = static_cast<std::uint32_t>(std::stoul(row[0].value_or("0")));
    t.columns.push_back(row[1].value_or(""));
    t.type_oids.push_back(static_cast<std::uint32_t>(std::stoul(row[2].value_or("0"))));
  }
  return t;
}

// Commit order, as far as PostgreSQL can tell after the fact:
// - with track_commit_timestamp on, the commit time of the inserting transaction (exact between
//   transactions; rows committed before it was turned on have none and come first);
// - then the time column (within a transaction, clock_timestamp() defaults tell insert order;
//   without commit timestamps this is the main key: for one aggregate, whose writers are
//   serialised by a lock on the aggregate, a later writer's time is the later one when the column
//   is filled at insert time);
// - then the inserting transaction's age, oldest first (age(xmin), which survives xid wraparound);
// - then the table (in --table order) and the row's physical position (ctid): insert order
//   within one transaction as long as the table had no free space to reuse, the usual case for
//   an insert-only table.
WindowQueries window_queries(const std::vector<CatalogTable>& tables,
                             const std::string& time_column, bool commit_timestamps) {
  std::size_t widest = 0;
  for (const auto& t : tables) widest = std::max(widest, t.columns.size());
  WindowQueries q;
  std::string branches;
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const CatalogTable& t = tables[k];
    const std::string name = quote_ident(t.schema) + "." + quote_ident(t.table);
    const std::string time = "t." + quote_ident(time_column);
    const std::string from = " FROM " + name + " AS t WHERE " + time + " >= $1::timestamptz AND " +
                             time + " < $2::timestamptz";
    std::string raw, formatted;
    for (std::size_t i = 0; i < widest; ++i) {
      if (i >= t.columns.size()) {
        formatted += ", NULL::text";
        continue;
      }
      const std::string c = "t." + quote_ident(t.columns[i]);
      raw += ", " + c;
      formatted +=
          ", CASE WHEN " + c + " IS NULL THEN NULL ELSE pg_catalog.format('%s', " + c + ") END";
    }
    q.scans.push_back("SELECT " + time + "::text" + raw + from);
    const std::string commit_ts =
        commit_timestamps ? "pg_catalog.pg_xact_commit_timestamp(t.xmin)" : "NULL::timestamptz";
    if (k > 0) branches += " UNION ALL ";
    branches += "SELECT " + std::to_string(k) + " AS tbl, " + commit_ts + " AS commit_at, " + time +
                "::timestamptz AS at, pg_catalog.age(t.xmin) AS age, t.ctid AS pos, " +
                "(extract(epoch FROM COALESCE(" + commit_ts + ", " + time +
                "::timestamptz)) * 1000000)::bigint AS stamp_us, " + time + "::text AS time_text" +
                formatted + from;
  }
  q.ordered = "SELECT * FROM (" + branches + ") AS r ORDER BY " +
              (commit_timestamps ? "r.commit_at NULLS FIRST, " : "") +
              "r.at, r.age DESC, r.tbl, r.pos";
  return q;
}

}  // namespace outbox::pg
