#include "outbox/pg/replication_connection.hpp"

#include <libpq-fe.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>

#include "libpq_handles.hpp"
#include "outbox/pg/conninfo.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "pq_error.hpp"

namespace outbox::pg {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

namespace {

Error conn_error(PGconn* c, const std::string& what) {
  return Error(what + ": " + one_line(PQerrorMessage(c)), "", PQstatus(c) == CONNECTION_BAD);
}

// Over TLS, libpq reads one TLS record at a time into whatever room its buffer has; the rest of
// the record stays decrypted inside OpenSSL, where a wait on the socket cannot see it (libpq's
// own waits check for it the same way). A wait for input must not start while some is pending.
bool tls_input_pending(PGconn* c) {
  if (!PQsslInUse(c)) return false;
  auto* ssl = static_cast<SSL*>(PQsslStruct(c, "OpenSSL"));
  return ssl != nullptr && SSL_pending(ssl) > 0;
}

}  // namespace

struct ReplicationConnection::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(asio::any_io_executor ex) : executor(ex), socket(ex), deadline(ex) {}

  asio::any_io_executor executor;
  ConnHandle conn;
  asio::posix::stream_descriptor socket;
  asio::steady_timer deadline;
  BufferHandle copy_buffer;
  bool flushing = false;
  std::map<std::string, std::string> prepared;  // exec_prepared(): name -> statement

  void attach_socket() {
    detach_socket();
    int fd = PQsocket(conn.get());
    if (fd < 0) throw Error("connection has no socket", "", true);
    socket.assign(fd);
  }

  // The socket belongs to libpq: release it from Asio instead of closing it.
  void detach_socket() {
    if (!socket.is_open()) return;
    boost::system::error_code ignored;
    socket.cancel(ignored);
    socket.release();
  }

  // Input that TLS has decrypted already is there to read: no socket wait would report it.
  bool input_ready(asio::posix::stream_descriptor::wait_type type) const {
    return type == asio::posix::stream_descriptor::wait_read && tls_input_pending(conn.get());
  }

  awaitable<void> wait(asio::posix::stream_descriptor::wait_type type) {
    if (input_ready(type)) co_return;
    co_await socket.async_wait(type, use_awaitable);
  }

  // Waits on the socket with a deadline; a timeout surfaces as Error (not connection_lost: the
  // caller decides).
  awaitable<void> wait_until(asio::posix::stream_descriptor::wait_type type,
                             std::chrono::steady_clock::time_point until, const char* what) {
    if (input_ready(type)) co_return;
    // Shared: the timer's handler may run after this frame is gone. `over`: this wait ended.
    // A deadline that expires as the socket becomes ready queues its handler, and cancel()
    // cannot take it back; run later, it must not cancel the socket's next wait (the stream's
    // read, which then failed with operation_aborted: "I/O error: Operation canceled", exit 1).
    struct Watch {
      bool timed_out = false;
      bool over = false;
    };
    auto watch = std::make_shared<Watch>();
    deadline.expires_at(until);
    deadline.async_wait([weak = weak_from_this(), watch](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || watch->over) return;
      watch->timed_out = true;
      boost::system::error_code ignored;
      self->socket.cancel(ignored);
    });
    try {
      co_await socket.async_wait(type, use_awaitable);
    } catch (const boost::system::system_error&) {
      watch->over = true;
      deadline.cancel();
      if (watch->timed_out) throw Error(std::string("timed out ") + what, "", true);
      throw;
    }
    watch->over = true;
    deadline.cancel();
  }

  awaitable<void> flush_all(std::chrono::steady_clock::time_point until, const char* what) {
    for (;;) {
      int r = PQflush(conn.get());
      if (r == 0) co_return;
      if (r < 0) throw conn_error(conn.get(), what);
      co_await wait_until(asio::posix::stream_descriptor::wait_write, until, what);
    }
  }

  // Collects results of the statement sent last; returns the last one.
  awaitable<ResultHandle> get_result(std::chrono::steady_clock::time_point until,
                                     const char* what) {
    ResultHandle last;
    for (;;) {
      while (PQisBusy(conn.get())) {
        co_await wait_until(asio::posix::stream_descriptor::wait_read, until, what);
        if (!PQconsumeInput(conn.get())) throw conn_error(conn.get(), what);
      }
      ResultHandle r(PQgetResult(conn.get()));
      if (!r) break;
      ExecStatusType st = PQresultStatus(r.get());
      last = std::move(r);
      if (st == PGRES_COPY_BOTH || st == PGRES_COPY_IN || st == PGRES_COPY_OUT) break;
    }
    if (!last) throw conn_error(conn.get(), what);
    co_return last;
  }

  void background_flush() {
    if (flushing) return;
    int r = PQflush(conn.get());
    if (r <= 0) return;  // done, or the error shows on the next read
    flushing = true;
    socket.async_wait(asio::posix::stream_descriptor::wait_write,
                      [weak = weak_from_this()](const boost::system::error_code& ec) {
                        auto self = weak.lock();
                        if (!self) return;
                        self->flushing = false;
                        if (!ec && self->conn) self->background_flush();
                      });
  }
};

ReplicationConnection::ReplicationConnection(asio::any_io_executor executor)
    : impl_(std::make_shared<Impl>(executor)) {}

ReplicationConnection::~ReplicationConnection() {
  impl_->deadline.cancel();
  impl_->detach_socket();
}

awaitable<void> ReplicationConnection::connect(const std::string& conninfo, Duration timeout,
                                               bool replication) {
  auto until = std::chrono::steady_clock::now() + timeout;
  // Never hand libpq a conninfo it cannot parse: its message would quote the text.
  if (std::string problem = check_conninfo(conninfo); !problem.empty()) {
    throw Error("connect to PostgreSQL: " + problem, "", true);
  }
  // expand_dbname=1: the first "dbname" holds the user's conninfo; later keywords override it.
  // A cut network shows no FIN: without these the relay could wait on a dead socket for the
  // kernel's retransmission timeout (~15 min). Status updates go out every --status-interval, so
  // 60 s of unacknowledged data, or 60 s of silence plus three failed probes, means it is gone.
  // Keywords before dbname are defaults that the user's conninfo overrides; those after it win.
  const char* keywords[] = {
      "tcp_user_timeout", "keepalives_idle", "keepalives_interval",       "keepalives_count",
      "dbname",           "replication",     "fallback_application_name", nullptr};
  const char* values[] = {
      "60000",        "60",   "10", "3", conninfo.c_str(), replication ? "database" : "false",
      "outbox-relay", nullptr};
  impl_->detach_socket();
  impl_->conn.reset(PQconnectStartParams(keywords, values, 1));
  if (!impl_->conn) throw Error("out of memory creating a PostgreSQL connection", "", true);
  if (PQstatus(impl_->conn.get()) == CONNECTION_BAD) {
    throw conn_error(impl_->conn.get(), "connecting to PostgreSQL");
  }
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  for (;;) {
    if (st == PGRES_POLLING_OK) break;
    if (st == PGRES_POLLING_FAILED) throw conn_error(impl_->conn.get(), "connecting to PostgreSQL");
    // The socket can change between polls (e.g. trying the next host): re-attach each time.
    impl_->attach_socket();
    co_await impl_->wait_until(st == PGRES_POLLING_READING
                                   ? asio::posix::stream_descriptor::wait_read
                                   : asio::posix::stream_descriptor::wait_write,
                               until, "connecting to PostgreSQL");
    st = PQconnectPoll(impl_->conn.get());
  }
  impl_->attach_socket();
  if (PQsetnonblocking(impl_->conn.get(), 1) != 0) {
    throw conn_error(impl_->conn.get(), "setting the connection non-blocking");
  }
}

namespace {

// The rows of a query's result, as text; throws for a result that is not rows or a completion.
Rows rows_of(PGconn* c, const PGresult* r, const std::string& sql) {
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    throw pq_unexpected_result(c, r, "\"" + sql + "\"", "rows or a command completion");
  }
  Rows rows;
  int n = PQntuples(r), m = PQnfields(r);
  rows.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    Row row;
    row.reserve(static_cast<std::size_t>(m));
    for (int j = 0; j < m; ++j) {
      if (PQgetisnull(r, i, j)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(
            std::string(PQgetvalue(r, i, j), static_cast<std::size_t>(PQgetlength(r, i, j))));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

awaitable<Rows> ReplicationConnection::exec(const std::string& sql, Duration timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  PGconn* c = impl_->conn.get();
  if (!PQsendQuery(c, sql.c_str())) throw conn_error(c, "sending \"" + sql + "\"");
  co_await impl_->flush_all(until, "sending a query");
  ResultHandle r = co_await impl_->get_result(until, "running a query");
  co_return rows_of(c, r.get(), sql);
}

awaitable<Rows> ReplicationConnection::exec_prepared(const std::string& name,
                                                     const std::string& sql, Duration timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  PGconn* c = impl_->conn.get();
  auto [it, fresh] = impl_->prepared.try_emplace(name, sql);
  if (!fresh && it->second != sql) {
    throw std::logic_error("prepared statement " + name + " reused for another statement");
  }
  if (fresh) {
    if (!PQsendPrepare(c, name.c_str(), sql.c_str(), 0, nullptr)) {
      impl_->prepared.erase(it);
      throw conn_error(c, "preparing \"" + sql + "\"");
    }
    co_await impl_->flush_all(until, "preparing a query");
    ResultHandle p = co_await impl_->get_result(until, "preparing a query");
    if (PQresultStatus(p.get()) != PGRES_COMMAND_OK) {
      impl_->prepared.erase(name);
      throw pq_unexpected_result(c, p.get(), "preparing \"" + sql + "\"", "a command completion");
    }
  }
  if (!PQsendQueryPrepared(c, name.c_str(), 0, nullptr, nullptr, nullptr, 0)) {
    throw conn_error(c, "sending \"" + sql + "\"");
  }
  co_await impl_->flush_all(until, "sending a query");
  ResultHandle r = co_await impl_->get_result(until, "running a query");
  co_return rows_of(c, r.get(), sql);
}

TimelineHistory parse_timeline_history(std::string_view content) {
  std::string decoded;
  if (content.starts_with("\\x")) {
    // bytea in hex: two digits a byte.
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    for (std::size_t i = 2; i + 1 < content.size(); i += 2) {
      const int hi = digit(content[i]), lo = digit(content[i + 1]);
      if (hi < 0 || lo < 0)
        throw Error::unexpected_reply("TIMELINE_HISTORY", "hex", "a non-hex digit");
      decoded += static_cast<char>(hi * 16 + lo);
    }
    content = decoded;
  }
  TimelineHistory history;
  std::size_t line_no = 0;
  while (!content.empty()) {
    const std::size_t end = content.find('\n');
    std::string_view line = content.substr(0, end);
    content = end == std::string_view::npos ? std::string_view() : content.substr(end + 1);
    ++line_no;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t tab = line.find_first_of("\t ");
    const std::string_view tli_text = line.substr(0, tab);
    std::uint32_t tli = 0;
    auto [p, ec] = std::from_chars(tli_text.data(), tli_text.data() + tli_text.size(), tli);
    std::string_view rest =
        tab == std::string_view::npos ? std::string_view() : line.substr(tab + 1);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    const std::string_view lsn_text = rest.substr(0, rest.find_first_of("\t "));
    const std::optional<Lsn> lsn = Lsn::parse(lsn_text);
    if (ec != std::errc() || p != tli_text.data() + tli_text.size() || !lsn) {
      throw Error::unexpected_reply("TIMELINE_HISTORY",
                                    "lines of parent timeline, switch point and reason",
                                    "line " + std::to_string(line_no) + " unreadable");
    }
    history[tli] = *lsn;
  }
  return history;
}

awaitable<TimelineHistory> ReplicationConnection::timeline_history(std::uint32_t timeline,
                                                                   Duration timeout) {
  Rows rows = co_await exec("TIMELINE_HISTORY " + std::to_string(timeline), timeout);
  if (rows.size() != 1 || rows[0].size() < 2 || !rows[0][1]) {
    throw Error::unexpected_reply("TIMELINE_HISTORY", "one row of filename, content",
                                  std::to_string(rows.size()) + " rows");
  }
  co_return parse_timeline_history(*rows[0][1]);
}

awaitable<SystemInfo> ReplicationConnection::identify_system(Duration timeout) {
  Rows rows = co_await exec("IDENTIFY_SYSTEM", timeout);
  if (rows.size() != 1 || rows[0].size() < 4 || !rows[0][0] || !rows[0][1] || !rows[0][2]) {
    throw Error::unexpected_reply(
        "IDENTIFY_SYSTEM", "one row of systemid, timeline, xlogpos, dbname",
        std::to_string(rows.size()) + " rows" +
            (rows.empty() ? "" : " of " + std::to_string(rows[0].size()) + " columns") +
            (rows.size() == 1 && rows[0].size() >= 4 ? " with a NULL" : ""));
  }
  SystemInfo info;
  info.system_id = *rows[0][0];
  const std::string& tli = *rows[0][1];
  if (auto [p, ec] = std::from_chars(tli.data(), tli.data() + tli.size(), info.timeline);
      ec != std::errc() || p != tli.data() + tli.size()) {
    throw Error::unexpected_reply("IDENTIFY_SYSTEM", "a timeline number", "'" + tli + "'");
  }
  auto pos = Lsn::parse(*rows[0][2]);
  if (!pos) {
    throw Error::unexpected_reply("IDENTIFY_SYSTEM", "an xlogpos such as 0/16B3748",
                                  "'" + *rows[0][2] + "'");
  }
  info.xlogpos = *pos;
  info.dbname = rows[0][3].value_or("");
  co_return info;
}

awaitable<void> ReplicationConnection::start_replication(const std::string& command,
                                                         Duration timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  PGconn* c = impl_->conn.get();
  if (!PQsendQuery(c, command.c_str())) throw conn_error(c, "sending START_REPLICATION");
  co_await impl_->flush_all(until, "sending START_REPLICATION");
  ResultHandle r = co_await impl_->get_result(until, "starting replication");
  if (PQresultStatus(r.get()) != PGRES_COPY_BOTH) {
    throw pq_unexpected_result(c, r.get(), "START_REPLICATION", "CopyBoth (PGRES_COPY_BOTH)");
  }
}

std::optional<std::span<const std::byte>> ReplicationConnection::try_read() {
  PGconn* c = impl_->conn.get();
  char* buf = nullptr;
  impl_->copy_buffer.reset();
  int n = PQgetCopyData(c, &buf, 1);
  if (n > 0) {
    impl_->copy_buffer.reset(buf);
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(buf),
                                      static_cast<std::size_t>(n));
  }
  if (n == 0) return std::nullopt;
  if (n == -1) {
    // The server ended the copy: its final result says why.
    ResultHandle r(PQgetResult(c));
    if (r && PQresultStatus(r.get()) == PGRES_FATAL_ERROR) {
      throw pq_result_error(c, r.get(), "replication stream");
    }
    throw Error("the server ended the replication stream", "", true);
  }
  throw conn_error(c, "reading the replication stream");
}

awaitable<void> ReplicationConnection::wait_readable() {
  co_await impl_->wait(asio::posix::stream_descriptor::wait_read);
  if (!PQconsumeInput(impl_->conn.get())) {
    throw conn_error(impl_->conn.get(), "reading the replication stream");
  }
}

void ReplicationConnection::read_available() {
  if (!PQconsumeInput(impl_->conn.get())) {
    throw conn_error(impl_->conn.get(), "reading the replication stream");
  }
}

ReplicationConnection::Backlog ReplicationConnection::backlog() const {
  int fd = PQsocket(impl_->conn.get());
  int queued = 0;
  int rcvbuf = 0;
  socklen_t len = sizeof rcvbuf;
  if (fd < 0 || ioctl(fd, FIONREAD, &queued) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) != 0) {
    return {};
  }
  return {static_cast<std::size_t>(std::max(queued, 0)),
          static_cast<std::size_t>(std::max(rcvbuf, 0))};
}

void ReplicationConnection::send_status(Lsn write, Lsn flush, bool reply_requested) {
  auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  auto msg = pgoutput::encode_status_update(write, flush, Lsn{}, pgoutput::from_unix_micros(now_us),
                                            reply_requested);
  PGconn* c = impl_->conn.get();
  if (PQputCopyData(c, reinterpret_cast<const char*>(msg.data()), static_cast<int>(msg.size())) !=
      1) {
    throw conn_error(c, "sending a standby status update");
  }
  impl_->background_flush();
}

awaitable<void> ReplicationConnection::end_copy(Duration timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  PGconn* c = impl_->conn.get();
  if (PQputCopyEnd(c, nullptr) < 0) throw conn_error(c, "ending the copy");
  co_await impl_->flush_all(until, "ending the copy");
  // Discard what the server still sends until it acknowledges the end of the copy.
  for (;;) {
    char* buf = nullptr;
    int n = PQgetCopyData(c, &buf, 1);
    if (n > 0) {
      PQfreemem(buf);
      continue;
    }
    if (n == 0) {
      co_await impl_->wait_until(asio::posix::stream_descriptor::wait_read, until,
                                 "ending the copy");
      if (!PQconsumeInput(c)) throw conn_error(c, "ending the copy");
      continue;
    }
    break;
  }
  for (;;) {
    while (PQisBusy(c)) {
      co_await impl_->wait_until(asio::posix::stream_descriptor::wait_read, until,
                                 "ending the copy");
      if (!PQconsumeInput(c)) throw conn_error(c, "ending the copy");
    }
    ResultHandle r(PQgetResult(c));
    if (!r) break;
  }
}

void ReplicationConnection::cancel() {
  boost::system::error_code ignored;
  impl_->socket.cancel(ignored);
  impl_->deadline.cancel();
}

bool ReplicationConnection::alive() {
  PGconn* c = impl_->conn.get();
  if (c == nullptr) return false;
  const int fd = PQsocket(c);
  // A read that returns data does not look for the end behind it: read until the socket holds
  // nothing more, then peek for the end of the stream (a recv of 0 bytes).
  for (int i = 0; i < 64; ++i) {
    if (PQconsumeInput(c) != 1 || PQstatus(c) != CONNECTION_OK) return false;
    char byte = 0;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;  // the server closed it
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;  // data still arriving: alive
}

bool ReplicationConnection::connected() const {
  return impl_->conn && PQstatus(impl_->conn.get()) == CONNECTION_OK;
}

std::string ReplicationConnection::same_server_conninfo(const std::string& conninfo) const {
  if (!connected()) return conninfo;
  PGconn* c = impl_->conn.get();
  auto text = [](const char* v) { return v ? std::string(v) : std::string(); };
  return pin_conninfo(conninfo, text(PQhost(c)), text(PQhostaddr(c)), text(PQport(c)));
}

int ReplicationConnection::server_version() const {
  return impl_->conn ? PQserverVersion(impl_->conn.get()) : 0;
}

std::string ReplicationConnection::quote_literal(const std::string& text) const {
  BufferHandle q(PQescapeLiteral(impl_->conn.get(), text.c_str(), text.size()));
  if (!q) throw conn_error(impl_->conn.get(), "quoting a literal");
  return q.get();
}

std::string ReplicationConnection::quote_identifier(const std::string& text) const {
  BufferHandle q(PQescapeIdentifier(impl_->conn.get(), text.c_str(), text.size()));
  if (!q) throw conn_error(impl_->conn.get(), "quoting an identifier");
  return q.get();
}

}  // namespace outbox::pg
