#include "outbox/pg/progress_table.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "blocking_session.hpp"
#include "outbox/common/qualified_name.hpp"
#include "pq_error.hpp"

namespace outbox::pg {

namespace {

// SQLSTATEs that say the role may not do this: retrying would not help.
bool refused_state(const std::string& state) {
  return state == "42501" || state == "28P01" || state == "28000";
}

using Clock = std::chrono::steady_clock;

// Waits until the socket is ready for `events` or the deadline passed (false).
bool wait_socket(PGconn* c, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{PQsocket(c), events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // libpq's next call reports the socket's error
  }
}

// One statement with text parameters and text rows, as run_blocking(), but never waiting past
// `deadline` on the network: a server that stopped answering (frozen, cut off) would hold a
// blocking call for good, since the kernel still acknowledges. Past it the connection is closed
// (Error, connection lost).
Rows run_bounded(ConnHandle& conn, const std::string& what, const std::string& sql,
                 const std::vector<std::string>& params, Clock::time_point deadline,
                 std::chrono::milliseconds timeout) {
  PGconn* c = conn.get();
  const auto lost = [&](const std::string& why) {
    conn.reset();
    return Error(what + ": " + why, "", true);
  };
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  if (!PQsendQueryParams(c, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                         nullptr, nullptr, 0)) {
    throw lost(one_line(PQerrorMessage(c)));
  }
  const std::string late = "no answer within " + std::to_string(timeout.count()) + " ms";
  for (int f; (f = PQflush(c)) != 0;) {
    if (f < 0) throw lost(one_line(PQerrorMessage(c)));
    if (!wait_socket(c, POLLOUT | POLLIN, deadline)) throw lost(late);
    if (!PQconsumeInput(c)) throw lost(one_line(PQerrorMessage(c)));
  }
  ResultHandle first;
  for (;;) {
    while (PQisBusy(c)) {
      if (!wait_socket(c, POLLIN, deadline)) throw lost(late);
      if (!PQconsumeInput(c)) throw lost(one_line(PQerrorMessage(c)));
    }
    ResultHandle r(PQgetResult(c));
    if (!r) break;
    if (!first) first = std::move(r);
  }
  const auto status = first ? PQresultStatus(first.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    Error e = pq_unexpected_result(c, first.get(), what, "rows or a command completion");
    if (PQstatus(c) != CONNECTION_OK) conn.reset();
    throw e;
  }
  Rows rows;
  const int n = PQntuples(first.get()), cols = PQnfields(first.get());
  for (int i = 0; i < n; ++i) {
    Row row;
    for (int j = 0; j < cols; ++j) {
      if (PQgetisnull(first.get(), i, j)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(
            std::string(PQgetvalue(first.get(), i, j), PQgetlength(first.get(), i, j)));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::string progress_table_sql(const std::string& quoted_schema, const std::string& quoted_table) {
  return "CREATE TABLE IF NOT EXISTS " + quoted_schema + "." + quoted_table +
         " (key text PRIMARY KEY, position text NOT NULL, written_at timestamptz NOT NULL "
         "DEFAULT now())";
}

struct ProgressTable::Impl {
  std::string conninfo;
  std::string schema;
  std::string table;
  std::chrono::milliseconds timeout;
  bool writer = true;
  ConnHandle conn;
  std::string qschema, qtable, qualified;  // quoted, once connected

  // Connected, with the session's settings; throws Error.
  PGconn* session() {
    if (conn && PQstatus(conn.get()) == CONNECTION_OK) return conn.get();
    conn.reset();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
    ConnHandle c = connect_blocking(conninfo, "outbox-relay progress",
                                    static_cast<int>(std::max<std::int64_t>(2, seconds)), writer);
    // Every statement bounded (a lock held by someone else, a server that hangs); the commit
    // durable on this server whatever the database's default, without waiting on a synchronous
    // standby that may be away (a standby gets the record by replication all the same).
    run_bounded(c, "set the progress session's timeouts",
                "SELECT set_config('statement_timeout', $1, false), "
                "set_config('lock_timeout', $1, false), "
                "set_config('synchronous_commit', 'local', false)",
                {std::to_string(timeout.count())}, Clock::now() + timeout, timeout);
    auto quote = [&](const std::string& v) {
      BufferHandle q(PQescapeIdentifier(c.get(), v.c_str(), v.size()));
      if (!q)
        throw Error("quote identifier " + v + ": " + one_line(PQerrorMessage(c.get())), "", false);
      return std::string(q.get());
    };
    qschema = quote(schema);
    qtable = quote(table);
    qualified = qschema + "." + qtable;
    conn = std::move(c);
    return conn.get();
  }

  // A statement of this session, bounded by the timeout.
  Rows run(const std::string& what, const std::string& sql,
           const std::vector<std::string>& params = {}) {
    session();
    return run_bounded(conn, what, sql, params, Clock::now() + timeout, timeout);
  }

  Result fail(const Error& e) {
    if (e.connection_lost() || (conn && PQstatus(conn.get()) != CONNECTION_OK)) conn.reset();
    Result r;
    r.error = e.what();
    r.refused = refused_state(e.sqlstate());
    if (r.refused) {
      r.error += "; the relay's role needs SELECT, INSERT and UPDATE on table " +
                 common::QualifiedName{schema, table}.text() +
                 " (and CREATE on its schema when the relay makes it; outbox-relay setup "
                 "--progress-table makes it: docs/aws.md)";
    }
    return r;
  }
};

ProgressTable::ProgressTable(std::string conninfo, std::string schema, std::string table,
                             std::chrono::milliseconds timeout, bool writer)
    : impl_(std::make_unique<Impl>()) {
  impl_->writer = writer;
  impl_->conninfo = std::move(conninfo);
  impl_->schema = std::move(schema);
  impl_->table = std::move(table);
  impl_->timeout = timeout;
}

ProgressTable::~ProgressTable() = default;

std::string ProgressTable::name() const {
  return common::QualifiedName{impl_->schema, impl_->table}.text();
}

ProgressTable::Result ProgressTable::open() {
  try {
    impl_->session();
    // Looked up first: a role without CREATE on the schema may still use a table setup made.
    const Rows found = impl_->run("look up progress table " + name(),
                                  "SELECT to_regclass($1) IS NOT NULL", {impl_->qualified});
    if (!found.empty() && found[0][0] == std::optional<std::string>("t")) return {};
    impl_->run("create progress table " + name(),
               progress_table_sql(impl_->qschema, impl_->qtable));
    return {};
  } catch (const Error& e) {
    return impl_->fail(e);
  }
}

ProgressTable::Result ProgressTable::get(const std::string& key) {
  try {
    impl_->session();
    const Rows found = impl_->run("look up progress table " + name(),
                                  "SELECT to_regclass($1) IS NOT NULL", {impl_->qualified});
    if (found.empty() || found[0][0] != std::optional<std::string>("t")) return {};
    const Rows rows =
        impl_->run("read the progress record from " + name(),
                   "SELECT position, (extract(epoch FROM written_at) * 1000)::bigint::text FROM " +
                       impl_->qualified + " WHERE key = $1",
                   {key});
    Result r;
    if (!rows.empty()) {
      r.value = rows[0][0].value_or("");
      if (rows[0][1]) r.written_ms = std::stoll(*rows[0][1]);
    }
    return r;
  } catch (const Error& e) {
    return impl_->fail(e);
  }
}

ProgressTable::Result ProgressTable::put(const std::string& key, const std::string& value) {
  try {
    impl_->session();
    impl_->run("write the progress record to " + name(),
               "INSERT INTO " + impl_->qualified +
                   " AS p (key, position, written_at) VALUES ($1, $2, now()) ON CONFLICT (key) "
                   "DO UPDATE SET position = EXCLUDED.position, written_at = EXCLUDED.written_at",
               {key, value});
    return {};
  } catch (const Error& e) {
    return impl_->fail(e);
  }
}

}  // namespace outbox::pg
