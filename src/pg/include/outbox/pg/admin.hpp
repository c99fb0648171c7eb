// Blocking libpq session for the one-shot CLI commands (setup, status, drop): publication and slot
// bootstrap and removal, slot inspection, outbox table creation. Never use it on the relay's
// io_context thread: every call blocks until the server answered.
// Not thread-safe: one AdminSession per thread. The libpq handle never leaves pg.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"  // pg::Error, Row, Rows
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pg {

// One replication slot as pg_replication_slots and pg_stat_replication show it.
struct SlotInfo {
  std::string name;
  std::string plugin;     // "pgoutput" for a slot of the relay
  std::string slot_type;  // "logical" or "physical"
  std::string database;
  bool active = false;
  std::optional<int> active_pid;  // the walsender holding the slot
  std::optional<Lsn> confirmed_flush_lsn;
  std::optional<Lsn> restart_lsn;
  std::string wal_status;  // reserved, extended, unreserved, lost ("" when unknown)
  std::optional<std::int64_t> safe_wal_size;  // bytes left before the slot is lost (NULL: no limit)
  Lsn current_wal_lsn;                        // pg_current_wal_lsn() when inspected
  std::uint64_t retained_wal_bytes = 0;       // current WAL minus restart_lsn
  std::uint64_t confirmed_lag_bytes = 0;      // current WAL minus confirmed_flush_lsn
  // From pg_stat_replication, when a walsender holds the slot.
  std::optional<std::string> client_addr;
  std::optional<std::string> application_name;
  std::optional<std::string> replication_state;  // streaming, catchup, startup...
  std::optional<Lsn> sent_lsn;
  std::optional<Lsn> flush_lsn;
  std::optional<std::string> reply_time;  // last standby status update received
  std::optional<std::string> flush_lag;   // interval, as PostgreSQL prints it
  // PostgreSQL 17+ (nullopt before): a failover slot (a standby with sync_replication_slots
  // keeps a copy), and a copy synced from the primary (on a standby, or on a promoted one).
  std::optional<bool> failover;
  std::optional<bool> synced;
  bool temporary = false;
  // Why the slot was invalidated (PostgreSQL 17+; nullopt before, or when it is not):
  // wal_removed (max_slot_wal_keep_size), rows_removed, wal_level_insufficient, idle_timeout
  // (PostgreSQL 18's idle_replication_slot_timeout).
  std::optional<std::string> invalidation_reason;
  // Since when the slot is inactive (PostgreSQL 17+), as PostgreSQL prints it.
  std::optional<std::string> inactive_since;
  bool in_recovery = false;  // the server inspected is a standby
};

struct PublicationInfo {
  std::string name;
  bool publishes_insert = false;
  bool all_tables = false;
  std::vector<std::string> tables;  // "schema.table"
};

// The statements that install outbox.emit(aggregate_type text, aggregate_id text, type text,
// payload jsonb, headers jsonb DEFAULT '{}', id uuid DEFAULT gen_random_uuid()) RETURNS uuid: it
// emits the JSON envelope with pg_logical_emit_message(true, <prefix>, ...) in the caller's
// transaction and returns the id. `prefix_literal` is the prefix as a SQL string literal. The
// same text as sql/outbox_emit.sql with the prefix 'outbox' (a unit test compares them).
std::vector<std::string> emit_function_sql(const std::string& prefix_literal);

class AdminSession {
 public:
  // Connects (plain connection, not replication). Throws Error with libpq's message.
  explicit AdminSession(const std::string& conninfo);
  ~AdminSession();
  AdminSession(const AdminSession&) = delete;
  AdminSession& operator=(const AdminSession&) = delete;

  // One statement with $1.. text parameters (extended protocol); rows as text. Throws Error with
  // the SQLSTATE and the server's message (and its detail and hint when given).
  Rows exec(const std::string& sql, const std::vector<std::string>& params = {});

  std::string quote_identifier(const std::string& name) const;
  std::string quote_literal(const std::string& value) const;
  std::string server_version() const;            // e.g. "15.6"
  int server_version_num() const;                // e.g. 150006, 180001
  std::string setting(const std::string& name);  // current_setting(name)

  std::optional<PublicationInfo> publication(const std::string& name);
  // Whether the publication publishes every insert into the table (or its partitions): see
  // publication_check.hpp.
  PublicationCheck check_publication(const PublicationTarget& target);
  void drop_publication(const std::string& name);

  // The publication and the slot found or created, or refused, as the relay does before it
  // streams (bootstrap.hpp); a missing slot is created with pg_create_logical_replication_slot().
  // Throws Error as exec() does, prefixed with the step ("create replication slot S: ...").
  BootstrapResult ensure_slot_and_publication(const BootstrapOptions& options);

  std::optional<SlotInfo> slot(const std::string& name);
  // The server's system identifier (pg_control_system(); what IDENTIFY_SYSTEM says), as text.
  std::string system_id();
  // Throws Error 55006 when a walsender holds the slot.
  void drop_slot(const std::string& name);

  bool table_exists(const std::string& schema, const std::string& table);
  // The outbox table with the default columns (those of Debezium's outbox event router) and
  // created_at timestamptz NOT NULL DEFAULT now(), the time column of prune and reconcile.
  void create_outbox_table(const std::string& schema, const std::string& table);
  // outbox.emit(), which emits an outbox event as a transactional logical message with
  // `prefix` (emit_function_sql()); replaces an older one.
  void create_emit_function(const std::string& prefix);

  // What restrict_emit() did.
  struct EmitRestriction {
    // The statements that take EXECUTE on pg_logical_emit_message from PUBLIC and give it to
    // the writers (restrict_emit_sql()): what a superuser runs by hand when this role may not.
    std::vector<std::string> statements;
    // The overloads PUBLIC may still execute afterwards (a role that does not own them gets a
    // warning, not an error, from REVOKE): empty when it worked.
    std::vector<std::string> still_public;
  };
  // --messages: in one transaction, EXECUTE on every pg_logical_emit_message overload revoked
  // from PUBLIC and granted to `writers`; USAGE on schema outbox and EXECUTE on outbox.emit()
  // (when installed) granted to them, EXECUTE on outbox.emit() revoked from PUBLIC. Throws Error
  // (e.g. a writer role that does not exist).
  EmitRestriction restrict_emit(const std::vector<std::string>& writers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::pg
