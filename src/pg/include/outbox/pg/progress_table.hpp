// The relay's progress record kept in PostgreSQL itself, for the sinks that cannot hold one (SQS,
// EventBridge: they cannot be read back). A small table of its own, by default
// outbox_relay_progress beside the outbox table (docs/aws.md):
//   key        text PRIMARY KEY       -- SYSTEM_ID/SLOT (relay/progress_record.hpp)
//   position   text NOT NULL          -- "LSN timeline=N", or "LSN" while decoding on a standby
//   written_at timestamptz NOT NULL   -- when the record was last written (the server's now())
// made by `setup --progress-table` or by the relay's first write when missing (CREATE on the
// schema); the relay's role needs SELECT, INSERT and UPDATE on it. Written in a transaction of its
// own with synchronous_commit = local, so it is replicated physically like any table: a standby
// has the record its primary had. Blocking, on a plain connection of its own (connected at the
// first call, again after a failure), every statement bounded by the timeout: never on the
// relay's io thread (the relay runs it on a worker thread). Not thread-safe: one thread at a time.
// The libpq handle never leaves pg.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace outbox::pg {

// The default table name (in the outbox table's schema unless a schema is given).
inline constexpr const char* kProgressTable = "outbox_relay_progress";

class ProgressTable {
 public:
  // `writer`: the connection asks for a primary (target_session_attrs=read-write unless the
  // conninfo says otherwise), so that a multi-host conninfo writes where it can; a reader
  // (status, prune) takes any server.
  ProgressTable(std::string conninfo, std::string schema, std::string table,
                std::chrono::milliseconds timeout, bool writer = true);
  ~ProgressTable();
  ProgressTable(const ProgressTable&) = delete;
  ProgressTable& operator=(const ProgressTable&) = delete;

  struct Result {
    std::optional<std::string> value;        // get(): the key's position; none: no such key
    std::optional<std::int64_t> written_ms;  // get(): written_at, Unix ms
    std::string error;                       // empty: done
    // The server refused the relay's role (SQLSTATE 42501, 28P01, 28000): retrying would not
    // help; `error` says which privilege.
    bool refused = false;
  };
  // The table exists: made when missing (CREATE TABLE IF NOT EXISTS).
  Result open();
  // The key's record. A missing table is no record (a first start).
  Result get(const std::string& key);
  // Writes the key's position (an upsert); done once committed.
  Result put(const std::string& key, const std::string& value);

  // "SCHEMA.TABLE" as given, for messages.
  std::string name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The statement that makes the table when it is missing; identifiers quoted by `quote`.
std::string progress_table_sql(const std::string& quoted_schema, const std::string& quoted_table);

}  // namespace outbox::pg
