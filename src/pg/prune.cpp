#include "outbox/pg/prune.hpp"

#include <charconv>

#include "outbox/common/qualified_name.hpp"

namespace outbox::pg {
namespace {

std::uint64_t u64_of(const std::optional<std::string>& text) {
  std::uint64_t v = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), v);
  return v;
}

constexpr const char* kRegclass = "to_regclass(quote_ident($1) || '.' || quote_ident($2))";

}  // namespace

PruneQueries::PruneQueries(AdminSession& db, std::string slot, std::string column)
    : db_(db), slot_(std::move(slot)), column_(std::move(column)) {}

std::optional<PruneSlot> PruneQueries::slot() {
  Rows rows = db_.exec(
      "SELECT catalog_xmin::text, database, current_database(), wal_status, plugin, slot_type, "
      "confirmed_flush_lsn::text, age(catalog_xmin) "
      "FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
      {slot_});
  if (rows.empty()) return std::nullopt;
  const Row& r = rows[0];
  PruneSlot s;
  s.catalog_xmin = r[0].value_or("");
  s.database = r[1].value_or("");
  s.current_database = r[2].value_or("");
  s.wal_status = r[3].value_or("");
  s.plugin = r[4].value_or("");
  s.slot_type = r[5].value_or("");
  if (r[6]) s.confirmed_flush_lsn = Lsn::parse(*r[6]);
  s.catalog_xmin_age = u64_of(r[7]);
  return s;
}

std::string PruneQueries::cutoff(std::chrono::milliseconds older_than) {
  return db_
      .exec("SELECT (now() - make_interval(secs => $1::double precision / 1000))::text",
            {std::to_string(older_than.count())})
      .at(0)
      .at(0)
      .value_or("");
}

std::optional<std::string> PruneQueries::column_type(const std::string& schema,
                                                     const std::string& table) {
  Rows rows =
      db_.exec(std::string("SELECT format_type(a.atttypid, a.atttypmod) "
                           "FROM pg_catalog.pg_attribute a WHERE a.attrelid = ") +
                   kRegclass + " AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped",
               {schema, table, column_});
  if (rows.empty()) return std::nullopt;
  return rows[0][0];
}

std::vector<OutboxPart> PruneQueries::parts(const std::string& schema, const std::string& table,
                                            const std::string& cutoff) {
  if (db_.exec(std::string("SELECT ") + kRegclass, {schema, table}).at(0).at(0) == std::nullopt) {
    throw Error(
        "look up table " + common::QualifiedName{schema, table}.text() + ": table does not exist",
        "42P01", false);
  }
  // Level 0 is the table itself: a plain table is its own only leaf; a partition given as
  // --table is never dropped whole (only its own partitions would be).
  // The upper bound of a range partition is read from its bound expression, "FOR VALUES FROM
  // (...) TO ('<literal>')"; MAXVALUE, several key columns or another key do not qualify.
  Rows rows = db_.exec(
      std::string("SELECT n.nspname, c.relname, t.level > 0, pn.nspname, p.relname, "
                  // CASE: the literal is cast only once the key is known to be the column.
                  "CASE WHEN pt.partstrat = 'r' AND pt.partnatts = 1 AND ka.attname = $3 AND "
                  "b.upper IS NOT NULL THEN b.upper::timestamptz <= $4::timestamptz "
                  "ELSE false END "
                  "FROM pg_catalog.pg_partition_tree(") +
          kRegclass +
          ") t "
          "JOIN pg_catalog.pg_class c ON c.oid = t.relid "
          "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
          "LEFT JOIN pg_catalog.pg_class p ON p.oid = t.parentrelid "
          "LEFT JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace "
          "LEFT JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = t.parentrelid "
          "LEFT JOIN pg_catalog.pg_attribute ka ON ka.attrelid = t.parentrelid "
          "AND ka.attnum = pt.partattrs[0] "
          "LEFT JOIN LATERAL (SELECT substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) "
          "FROM '^FOR VALUES FROM \\(.*\\) TO \\(''([^'']*)''\\)$') AS upper) b ON true "
          "WHERE t.isleaf ORDER BY t.level, c.relname",
      {schema, table, column_, cutoff});
  std::vector<OutboxPart> parts;
  // pg_partition_tree lists nothing for a table that is neither partitioned nor a partition.
  if (rows.empty() && db_.exec("SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = " +
                                   std::string(kRegclass),
                               {schema, table})
                              .at(0)
                              .at(0) == "f") {
    parts.push_back({schema, table, false, "", "", false});
  }
  for (const Row& r : rows) {
    OutboxPart part;
    part.schema = r[0].value_or("");
    part.name = r[1].value_or("");
    part.is_partition = r[2].value_or("") == "t";
    part.parent_schema = r[3].value_or("");
    part.parent_name = r[4].value_or("");
    part.closed_before_cutoff = r[5].value_or("") == "t";
    parts.push_back(std::move(part));
  }
  return parts;
}

std::string PruneQueries::qualified(const OutboxPart& part) const {
  return db_.quote_identifier(part.schema) + "." + db_.quote_identifier(part.name);
}

std::string PruneQueries::prunable_sql() const {
  // See the header: the inserting transaction is older than the slot's catalog_xmin. The slot is
  // read by this very statement; no slot, a lost one or one of another database yields NULL.
  return "(age(xmin) > (SELECT age(s.catalog_xmin) FROM pg_catalog.pg_replication_slots s "
         "WHERE s.slot_name = $1 AND s.catalog_xmin IS NOT NULL AND s.slot_type = 'logical' "
         "AND s.database = current_database() AND s.wal_status IS DISTINCT FROM 'lost') AND " +
         db_.quote_identifier(column_) + " < $2::timestamptz)";
}

PartCounts PruneQueries::count(const OutboxPart& part, const std::string& cutoff) {
  const std::string prunable = prunable_sql();
  Rows rows =
      db_.exec("SELECT count(*), count(*) FILTER (WHERE " + prunable +
                   "), count(*) FILTER (WHERE " + db_.quote_identifier(column_) +
                   " < $2::timestamptz AND " + prunable + " IS NOT TRUE) FROM " + qualified(part),
               {slot_, cutoff});
  PartCounts c;
  c.rows = u64_of(rows.at(0).at(0));
  c.prunable = u64_of(rows.at(0).at(1));
  c.unconfirmed = u64_of(rows.at(0).at(2));
  return c;
}

BatchResult PruneQueries::delete_batch(const OutboxPart& part, const std::string& cutoff,
                                       const std::string& after_ctid, std::uint64_t batch) {
  const std::string table = qualified(part);
  const std::string prunable = prunable_sql();
  // ctid = ANY(ARRAY(...)) is a TID scan; the condition is checked again on the rows deleted.
  Rows rows =
      db_.exec("WITH batch AS MATERIALIZED (SELECT ctid FROM " + table +
                   " WHERE ctid > $3::tid AND " + prunable +
                   " LIMIT $4::bigint), "
                   "gone AS (DELETE FROM " +
                   table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM batch)) AND " + prunable +
                   " RETURNING 1) "
                   "SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM gone), "
                   "(SELECT max(ctid)::text FROM batch)",
               {slot_, cutoff, after_ctid.empty() ? "(0,0)" : after_ctid, std::to_string(batch)});
  BatchResult r;
  r.selected = u64_of(rows.at(0).at(0));
  r.deleted = u64_of(rows.at(0).at(1));
  r.last_ctid = rows.at(0).at(2).value_or("");
  return r;
}

DropResult PruneQueries::drop_if_all_prunable(const OutboxPart& part, const std::string& cutoff,
                                              std::uint64_t& rows) {
  const std::string table = qualified(part);
  const std::string parent =
      db_.quote_identifier(part.parent_schema) + "." + db_.quote_identifier(part.parent_name);
  db_.exec("BEGIN");
  try {
    // Parent first, as inserts routed through it lock it first: the other order could deadlock
    // with an insert. Once both are held, every transaction that inserted into the partition has
    // ended and no new one can: the check below sees all its rows, and they stay as seen.
    db_.exec("SET LOCAL lock_timeout = '1s'");
    db_.exec("LOCK TABLE ONLY " + parent + " IN ACCESS EXCLUSIVE MODE");
    db_.exec("LOCK TABLE ONLY " + table + " IN ACCESS EXCLUSIVE MODE");
    db_.exec("SET LOCAL statement_timeout = '2s'");
    const std::string prunable = prunable_sql();
    Rows r = db_.exec("SELECT count(*), count(*) FILTER (WHERE " + prunable + ") FROM " + table,
                      {slot_, cutoff});
    rows = u64_of(r.at(0).at(0));
    if (rows == 0 || u64_of(r.at(0).at(1)) != rows) {
      db_.exec("ROLLBACK");
      return DropResult::kNotAllPrunable;
    }
    db_.exec("DROP TABLE " + table);
    db_.exec("COMMIT");
    return DropResult::kDropped;
  } catch (const Error& e) {
    if (!e.connection_lost()) db_.exec("ROLLBACK");
    // lock_timeout or statement_timeout: the partition is in use; try it on the next run.
    if (classify(e) == ErrorKind::kCanceled) return DropResult::kBusy;
    throw;
  }
}

}  // namespace outbox::pg
