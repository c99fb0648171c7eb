// A plain libpq connection for tests: run SQL, read results as text, inspect replication slots.
// Thread-safety: one PgClient per thread (a libpq connection is not shareable).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct pg_conn;

namespace outbox_test {

// A log sequence number as PostgreSQL prints it ("16/B374D848") is a 64-bit WAL position.
using Lsn = std::uint64_t;
Lsn parse_lsn(const std::string& text);  // throws std::invalid_argument naming the text
std::string format_lsn(Lsn lsn);         // "%X/%X"

using Row = std::vector<std::optional<std::string>>;  // nullopt for SQL NULL
using Rows = std::vector<Row>;

class PgClient {
 public:
  // Connects with a libpq conninfo; throws std::runtime_error with libpq's message.
  explicit PgClient(const std::string& conninfo);
  ~PgClient();
  PgClient(const PgClient&) = delete;
  PgClient& operator=(const PgClient&) = delete;

  // Runs one or more statements (simple query protocol); throws with the server's message.
  void exec(const std::string& sql);
  // Runs one statement with $1.. text parameters and returns all rows as text.
  Rows query(const std::string& sql, const std::vector<std::string>& params = {});
  // First column of the first row; nullopt for no row or NULL.
  std::optional<std::string> scalar(const std::string& sql,
                                    const std::vector<std::string>& params = {});

  // confirmed_flush_lsn of a slot; nullopt when the slot does not exist or has none yet (a slot
  // being created has none until it reached its consistent point).
  std::optional<Lsn> slot_confirmed_flush(const std::string& slot);
  bool slot_exists(const std::string& slot);
  bool slot_active(const std::string& slot);
  // Drops the slot if it exists. The relay must be stopped; a walsender still holding the slot
  // after its client died is given a few seconds to notice, then terminated.
  void drop_slot_if_exists(const std::string& slot);
  Lsn current_wal_lsn();         // pg_current_wal_lsn()
  Lsn current_wal_insert_lsn();  // pg_current_wal_insert_lsn()

 private:
  struct Deleter {
    void operator()(pg_conn* conn) const noexcept;
  };
  std::unique_ptr<pg_conn, Deleter> conn_;
};

}  // namespace outbox_test
