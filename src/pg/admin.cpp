#include "outbox/pg/admin.hpp"

#include <libpq-fe.h>

#include <charconv>

#include "blocking_session.hpp"
#include "libpq_handles.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/pg/publication_check.hpp"
#include "pq_error.hpp"

namespace outbox::pg {
namespace {

std::optional<Lsn> lsn_of(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return Lsn::parse(*text);
}

std::int64_t int_of(const std::optional<std::string>& text) {
  std::int64_t v = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), v);
  return v;
}

}  // namespace

struct AdminSession::Impl {
  ConnHandle conn;
};

AdminSession::AdminSession(const std::string& conninfo) : impl_(std::make_unique<Impl>()) {
  impl_->conn = connect_blocking(conninfo, "outbox-relay");
}

AdminSession::~AdminSession() = default;

Rows AdminSession::exec(const std::string& sql, const std::vector<std::string>& params) {
  return run_blocking(impl_->conn.get(), "query failed", sql, params);
}

std::string AdminSession::quote_identifier(const std::string& name) const {
  BufferHandle q(PQescapeIdentifier(impl_->conn.get(), name.c_str(), name.size()));
  if (!q)
    throw Error("quote identifier " + name + ": " + one_line(PQerrorMessage(impl_->conn.get())), "",
                false);
  return q.get();
}

std::string AdminSession::quote_literal(const std::string& value) const {
  BufferHandle q(PQescapeLiteral(impl_->conn.get(), value.c_str(), value.size()));
  if (!q) throw Error("quote literal: " + one_line(PQerrorMessage(impl_->conn.get())), "", false);
  return q.get();
}

PublicationCheck AdminSession::check_publication(const PublicationTarget& target) {
  return assess_publication(
      target, run_blocking(impl_->conn.get(), "check publication " + target.publication,
                           publication_check_sql(
                               target, [&](const std::string& v) { return quote_literal(v); })));
}

std::string AdminSession::server_version() const {
  const char* v = PQparameterStatus(impl_->conn.get(), "server_version");
  return v ? v : "?";
}

int AdminSession::server_version_num() const { return PQserverVersion(impl_->conn.get()); }

std::string AdminSession::setting(const std::string& name) {
  return run_blocking(impl_->conn.get(), "read setting " + name, "SELECT current_setting($1)",
                      {name})
      .at(0)
      .at(0)
      .value_or("");
}

std::optional<PublicationInfo> AdminSession::publication(const std::string& name) {
  const std::string what = "inspect publication " + name;
  Rows p =
      run_blocking(impl_->conn.get(), what,
                   "SELECT pubinsert, puballtables FROM pg_publication WHERE pubname = $1", {name});
  if (p.empty()) return std::nullopt;
  PublicationInfo info;
  info.name = name;
  info.publishes_insert = p[0][0].value_or("") == "t";
  info.all_tables = p[0][1].value_or("") == "t";
  for (auto& row : run_blocking(impl_->conn.get(), what,
                                "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                                "WHERE pubname = $1 ORDER BY 1",
                                {name})) {
    info.tables.push_back(row[0].value_or(""));
  }
  return info;
}

void AdminSession::drop_publication(const std::string& name) {
  const std::string what = "drop publication " + name;
  run_blocking(impl_->conn.get(), what, "DROP PUBLICATION " + quote_identifier(name));
}

std::string AdminSession::system_id() {
  return exec("SELECT system_identifier::text FROM pg_control_system()").at(0).at(0).value_or("");
}

std::optional<SlotInfo> AdminSession::slot(const std::string& name) {
  // On a standby the current position is the last replayed one.
  Rows rows = run_blocking(
      impl_->conn.get(), "inspect replication slot " + name,
      "WITH cur AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
      "ELSE pg_current_wal_lsn() END AS lsn) "
      "SELECT s.slot_name, s.plugin, s.slot_type, s.database, s.active, s.active_pid, "
      "s.confirmed_flush_lsn::text, s.restart_lsn::text, s.wal_status, s.safe_wal_size, "
      "cur.lsn::text, "
      "GREATEST(0, COALESCE(pg_wal_lsn_diff(cur.lsn, s.restart_lsn), 0))::bigint, "
      "GREATEST(0, COALESCE(pg_wal_lsn_diff(cur.lsn, s.confirmed_flush_lsn), 0))::bigint, "
      "host(r.client_addr), r.application_name, r.state, r.sent_lsn::text, r.flush_lsn::text, "
      "r.reply_time::text, r.flush_lag::text, "
      // Columns of newer servers read through to_jsonb: NULL where the server lacks them.
      "to_jsonb(s) ->> 'failover', to_jsonb(s) ->> 'synced', s.temporary::text, "
      "to_jsonb(s) ->> 'invalidation_reason', to_jsonb(s) ->> 'inactive_since', "
      "pg_is_in_recovery()::text "
      "FROM pg_replication_slots s CROSS JOIN cur "
      "LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid "
      "WHERE s.slot_name = $1",
      {name});
  if (rows.empty()) return std::nullopt;
  const Row& r = rows[0];
  SlotInfo s;
  s.name = r[0].value_or("");
  s.plugin = r[1].value_or("");
  s.slot_type = r[2].value_or("");
  s.database = r[3].value_or("");
  s.active = r[4].value_or("") == "t";
  if (r[5]) s.active_pid = static_cast<int>(int_of(r[5]));
  s.confirmed_flush_lsn = lsn_of(r[6]);
  s.restart_lsn = lsn_of(r[7]);
  s.wal_status = r[8].value_or("");
  if (r[9]) s.safe_wal_size = int_of(r[9]);
  s.current_wal_lsn = lsn_of(r[10]).value_or(Lsn{});
  s.retained_wal_bytes = static_cast<std::uint64_t>(int_of(r[11]));
  s.confirmed_lag_bytes = static_cast<std::uint64_t>(int_of(r[12]));
  s.client_addr = r[13];
  s.application_name = r[14];
  s.replication_state = r[15];
  s.sent_lsn = lsn_of(r[16]);
  s.flush_lsn = lsn_of(r[17]);
  s.reply_time = r[18];
  s.flush_lag = r[19];
  if (r[20]) s.failover = *r[20] == "true";
  if (r[21]) s.synced = *r[21] == "true";
  s.temporary = r[22].value_or("") == "true";
  s.invalidation_reason = r[23];
  s.inactive_since = r[24];
  s.in_recovery = r[25].value_or("") == "true";
  return s;
}

BootstrapResult AdminSession::ensure_slot_and_publication(const BootstrapOptions& options) {
  SlotBootstrap b(options, SlotCreation::kSqlFunction);
  const QuoteFn literal = [&](const std::string& v) { return quote_literal(v); };
  const QuoteFn identifier = [&](const std::string& v) { return quote_identifier(v); };
  while (!b.done()) {
    std::optional<Rows> rows;
    try {
      rows = run_blocking(impl_->conn.get(), b.what(), b.sql(literal, identifier));
    } catch (const Error& e) {
      if (!b.on_error(e)) throw;
    }
    if (rows) b.on_rows(*rows);
  }
  return b.result();
}

void AdminSession::drop_slot(const std::string& name) {
  const std::string what = "drop replication slot " + name;
  run_blocking(impl_->conn.get(), what, "SELECT pg_drop_replication_slot($1)", {name});
}

bool AdminSession::table_exists(const std::string& schema, const std::string& table) {
  return !run_blocking(
              impl_->conn.get(), "look up table " + common::QualifiedName{schema, table}.text(),
              "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2",
              {schema, table})
              .empty();
}

std::vector<std::string> emit_function_sql(const std::string& prefix_literal) {
  return {
      "CREATE SCHEMA IF NOT EXISTS outbox",
      "CREATE OR REPLACE FUNCTION outbox.emit(aggregate_type text, aggregate_id text, type text,\n"
      "    payload jsonb, headers jsonb DEFAULT '{}', id uuid DEFAULT gen_random_uuid())\n"
      "RETURNS uuid LANGUAGE sql VOLATILE AS $emit$\n"
      "  -- Header values are sent as text, whatever their JSON type.\n"
      "  SELECT pg_catalog.pg_logical_emit_message(true, " +
          prefix_literal +
          ", pg_catalog.jsonb_build_object(\n"
          "    'id', $6, 'aggregatetype', $1, 'aggregateid', $2, 'type', $3, 'payload', $4,\n"
          "    'headers', COALESCE((SELECT pg_catalog.jsonb_object_agg(h.key, h.value)\n"
          "                         FROM pg_catalog.jsonb_each_text($5) h), '{}'))::text);\n"
          "  SELECT $6;\n"
          "$emit$"};
}

void AdminSession::create_emit_function(const std::string& prefix) {
  for (const std::string& sql : emit_function_sql(quote_literal(prefix))) {
    run_blocking(impl_->conn.get(), "create function outbox.emit", sql);
  }
}

AdminSession::EmitRestriction AdminSession::restrict_emit(const std::vector<std::string>& writers) {
  const std::string list_sql =
      "SELECT p.oid::regprocedure::text, pg_catalog.has_function_privilege('public', p.oid, "
      "'EXECUTE')::text FROM pg_catalog.pg_proc p WHERE p.pronamespace = "
      "'pg_catalog'::regnamespace AND p.proname = 'pg_logical_emit_message' ORDER BY 1";
  const auto list = [&] {
    return run_blocking(impl_->conn.get(), "list pg_logical_emit_message overloads", list_sql);
  };
  std::vector<std::string> signatures;
  for (const Row& r : list()) signatures.push_back(r.at(0).value_or(""));
  std::vector<std::string> quoted;
  for (const std::string& w : writers) quoted.push_back(quote_identifier(w));
  EmitRestriction result;
  result.statements = restrict_emit_sql(signatures, quoted);
  std::vector<std::string> all = result.statements;
  const bool has_emit =
      !run_blocking(impl_->conn.get(), "look up outbox.emit",
                    "SELECT 1 FROM pg_catalog.pg_proc WHERE oid = pg_catalog.to_regprocedure("
                    "'outbox.emit(text, text, text, jsonb, jsonb, uuid)')")
           .empty();
  if (has_emit) {
    const std::string emit = "outbox.emit(text, text, text, jsonb, jsonb, uuid)";
    all.push_back("REVOKE EXECUTE ON FUNCTION " + emit + " FROM PUBLIC");
    for (const std::string& w : quoted) {
      all.push_back("GRANT USAGE ON SCHEMA outbox TO " + w);
      all.push_back("GRANT EXECUTE ON FUNCTION " + emit + " TO " + w);
    }
  }
  run_blocking(impl_->conn.get(), "begin", "BEGIN");
  try {
    for (const std::string& sql : all) {
      run_blocking(impl_->conn.get(), "restrict pg_logical_emit_message", sql);
    }
    run_blocking(impl_->conn.get(), "commit", "COMMIT");
  } catch (const Error&) {
    PQclear(PQexec(impl_->conn.get(), "ROLLBACK"));
    throw;
  }
  for (const Row& r : list()) {
    if (r.at(1).value_or("") == "true") result.still_public.push_back(r.at(0).value_or(""));
  }
  return result;
}

void AdminSession::create_outbox_table(const std::string& schema, const std::string& table) {
  const std::string what = "create table " + common::QualifiedName{schema, table}.text();
  run_blocking(impl_->conn.get(), what,
               "CREATE TABLE IF NOT EXISTS " + quote_identifier(schema) + "." +
                   quote_identifier(table) +
                   " (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
                   " aggregatetype text NOT NULL,"
                   " aggregateid text NOT NULL,"
                   " type text NOT NULL,"
                   " payload jsonb,"
                   " created_at timestamptz NOT NULL DEFAULT now())");
}

}  // namespace outbox::pg
