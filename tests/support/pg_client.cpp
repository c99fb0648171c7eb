#include "outbox_test/pg_client.hpp"

#include <libpq-fe.h>

#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

struct ResultDeleter {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

std::string trimmed(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Result checked(PGconn* conn, PGresult* raw, const std::string& sql) {
  Result result(raw);
  if (!result) throw std::runtime_error("libpq: " + trimmed(PQerrorMessage(conn)) + " in: " + sql);
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw std::runtime_error("PostgreSQL: " + trimmed(PQresultErrorMessage(result.get())) +
                             " in: " + sql.substr(0, 300));
  }
  return result;
}

}  // namespace

Lsn parse_lsn(const std::string& text) {
  unsigned int hi = 0;
  unsigned int lo = 0;
  char end = '\0';
  if (std::sscanf(text.c_str(), "%X/%X%c", &hi, &lo, &end) != 2) {
    throw std::invalid_argument("not an LSN: '" + text + "'");
  }
  return (static_cast<Lsn>(hi) << 32) | lo;
}

std::string format_lsn(Lsn lsn) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%X/%X", static_cast<unsigned int>(lsn >> 32),
                static_cast<unsigned int>(lsn & 0xffffffffU));
  return buffer;
}

void PgClient::Deleter::operator()(pg_conn* conn) const noexcept { PQfinish(conn); }

PgClient::PgClient(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
  if (!conn_) throw std::runtime_error("libpq: out of memory connecting to " + conninfo);
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    throw std::runtime_error("cannot connect to PostgreSQL (" + conninfo +
                             "): " + trimmed(PQerrorMessage(conn_.get())));
  }
  // NOTICEs ("... does not exist, skipping") would only clutter the test output.
  PQsetNoticeProcessor(
      conn_.get(), [](void*, const char*) {}, nullptr);
}

PgClient::~PgClient() = default;

void PgClient::exec(const std::string& sql) {
  checked(conn_.get(), PQexec(conn_.get(), sql.c_str()), sql);
}

Rows PgClient::query(const std::string& sql, const std::vector<std::string>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& param : params) values.push_back(param.c_str());
  Result result = checked(conn_.get(),
                          PQexecParams(conn_.get(), sql.c_str(), static_cast<int>(values.size()),
                                       nullptr, values.data(), nullptr, nullptr, 0),
                          sql);
  Rows rows;
  const int row_count = PQntuples(result.get());
  const int column_count = PQnfields(result.get());
  rows.reserve(static_cast<std::size_t>(row_count));
  for (int r = 0; r < row_count; ++r) {
    Row row;
    row.reserve(static_cast<std::size_t>(column_count));
    for (int c = 0; c < column_count; ++c) {
      if (PQgetisnull(result.get(), r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(result.get(), r, c),
                                     static_cast<std::size_t>(PQgetlength(result.get(), r, c))));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::optional<std::string> PgClient::scalar(const std::string& sql,
                                            const std::vector<std::string>& params) {
  Rows rows = query(sql, params);
  if (rows.empty() || rows.front().empty()) return std::nullopt;
  return rows.front().front();
}

std::optional<Lsn> PgClient::slot_confirmed_flush(const std::string& slot) {
  auto text = scalar(
      "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", {slot});
  if (!text) return std::nullopt;
  return parse_lsn(*text);
}

bool PgClient::slot_exists(const std::string& slot) {
  return !query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", {slot}).empty();
}

bool PgClient::slot_active(const std::string& slot) {
  return scalar("SELECT active::text FROM pg_replication_slots WHERE slot_name = $1", {slot}) ==
         "true";
}

void PgClient::drop_slot_if_exists(const std::string& slot) {
  if (!slot_exists(slot)) return;
  if (!wait_until([&] { return !slot_active(slot); }, std::chrono::seconds(10))) {
    query(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
        "WHERE slot_name = $1 AND active_pid IS NOT NULL",
        {slot});
    wait_until([&] { return !slot_active(slot); }, std::chrono::seconds(10));
  }
  query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
        {slot});
}

Lsn PgClient::current_wal_lsn() { return parse_lsn(*scalar("SELECT pg_current_wal_lsn()::text")); }

Lsn PgClient::current_wal_insert_lsn() {
  return parse_lsn(*scalar("SELECT pg_current_wal_insert_lsn()::text"));
}

}  // namespace outbox_test
