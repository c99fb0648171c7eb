#include "blocking_session.hpp"

#include <vector>

#include "outbox/pg/conninfo.hpp"
#include "pq_error.hpp"

namespace outbox::pg {

ConnHandle connect_blocking(const std::string& conninfo, const char* application_name,
                            int connect_timeout_s, bool read_write) {
  // Never hand libpq a conninfo it cannot parse: its message would quote the text.
  if (std::string problem = check_conninfo(conninfo); !problem.empty()) {
    throw Error("connect to PostgreSQL: " + problem, "", true);
  }
  // expand_dbname: conninfo may be a key=value string or a URI, as for the relay. The defaults
  // come first: what the expanded conninfo says overrides them.
  const std::string timeout = std::to_string(connect_timeout_s);
  std::vector<const char*> keys, values;
  if (connect_timeout_s > 0) {
    keys.push_back("connect_timeout");
    values.push_back(timeout.c_str());
  }
  if (read_write) {
    keys.push_back("target_session_attrs");
    values.push_back("read-write");
  }
  keys.insert(keys.end(), {"dbname", "fallback_application_name", nullptr});
  values.insert(values.end(), {conninfo.c_str(), application_name, nullptr});
  ConnHandle conn(PQconnectdbParams(keys.data(), values.data(), 1));
  if (!conn) throw Error("connect to PostgreSQL: out of memory", "", true);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    throw Error("connect to PostgreSQL: " + one_line(PQerrorMessage(conn.get())), "", true);
  }
  return conn;
}

Rows run_blocking(PGconn* c, const std::string& what, const std::string& sql,
                  const std::vector<std::string>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  ResultHandle r(PQexecParams(c, sql.c_str(), static_cast<int>(values.size()), nullptr,
                              values.data(), nullptr, nullptr, 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw pq_unexpected_result(c, r.get(), what, "rows or a command completion");
  }
  Rows rows;
  const int n = PQntuples(r.get()), cols = PQnfields(r.get());
  rows.reserve(n);
  for (int i = 0; i < n; ++i) {
    Row row;
    row.reserve(cols);
    for (int j = 0; j < cols; ++j) {
      if (PQgetisnull(r.get(), i, j)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(r.get(), i, j), PQgetlength(r.get(), i, j)));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace outbox::pg
