// A libpq replication connection (replication=database) driven by Boost.Asio: libpq runs in
// non-blocking mode and its socket is waited on with an Asio descriptor. Simple-query SQL, the
// replication commands, and the CopyBoth stream of START_REPLICATION.
// Not thread-safe: use from the io_context's single thread. The libpq handle never leaves pg.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/pg/error.hpp"  // pg::Error, thrown by every call below
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pg {

using pgoutput::Lsn;

struct SystemInfo {
  std::string system_id;
  std::uint32_t timeline = 0;
  Lsn xlogpos;
  std::string dbname;
};

// A timeline's history (TIMELINE_HISTORY): for each ancestor timeline, the WAL position where it
// ended and its child began. WAL before that position is the same on both.
using TimelineHistory = std::map<std::uint32_t, Lsn>;
// Parses a timeline history file ("parentTLI<TAB>switchpoint<TAB>reason" lines, '#' comments;
// the content may come hex-encoded as bytea). Throws Error naming the line it cannot read.
TimelineHistory parse_timeline_history(std::string_view content);

using Row = std::vector<std::optional<std::string>>;
using Rows = std::vector<Row>;
using Duration = std::chrono::steady_clock::duration;

class ReplicationConnection {
 public:
  explicit ReplicationConnection(boost::asio::any_io_executor executor);
  ~ReplicationConnection();
  ReplicationConnection(const ReplicationConnection&) = delete;
  ReplicationConnection& operator=(const ReplicationConnection&) = delete;

  // Connects with the user's conninfo (string or URI); replication=database is added, or, with
  // replication false, a plain connection (catalog queries only: no replication commands).
  boost::asio::awaitable<void> connect(const std::string& conninfo, Duration timeout,
                                       bool replication = true);

  // Runs one statement with the simple query protocol; returns its rows as text.
  boost::asio::awaitable<Rows> exec(const std::string& sql, Duration timeout);
  // The same for a statement run again and again (plain connections only): prepared under
  // `name` on its first run on this connection, so the server plans it once. A statement of
  // many joins over catalog views costs more to plan than to run.
  boost::asio::awaitable<Rows> exec_prepared(const std::string& name, const std::string& sql,
                                             Duration timeout);

  boost::asio::awaitable<SystemInfo> identify_system(Duration timeout);
  // TIMELINE_HISTORY of `timeline` (> 1; replication connections, before START_REPLICATION).
  boost::asio::awaitable<TimelineHistory> timeline_history(std::uint32_t timeline,
                                                           Duration timeout);

  // Sends START_REPLICATION ... LOGICAL and enters CopyBoth.
  boost::asio::awaitable<void> start_replication(const std::string& command, Duration timeout);

  // The next CopyData payload if libpq has one buffered, without waiting. The span stays valid
  // until the next call. nullopt: nothing buffered (call wait_readable()). Throws Error when the
  // connection broke or the server ended the stream (with the server's message).
  std::optional<std::span<const std::byte>> try_read();

  // Waits until input arrived (on the socket, or decrypted already and held by TLS) and reads it
  // into libpq's buffer. Throws
  // boost::system::system_error(operation_aborted) after cancel(), Error on a broken connection.
  boost::asio::awaitable<void> wait_readable();

  // Reads what the socket holds now into libpq's buffer (one read, at most libpq's buffer size),
  // without waiting. Throws Error on a broken connection.
  void read_available();

  // What the kernel holds for us on the socket, and the socket's receive buffer size (both 0 if
  // unknown): a paced reader's measure of how far behind the server it is.
  struct Backlog {
    std::size_t queued = 0;
    std::size_t capacity = 0;
  };
  Backlog backlog() const;

  // Queues a standby status update and flushes what the socket takes now; the rest is flushed
  // in the background. Throws Error if the connection broke.
  void send_status(Lsn write, Lsn flush, bool reply_requested);

  // Ends the copy (client side), drains what the server still sends, waits for the final result.
  boost::asio::awaitable<void> end_copy(Duration timeout);

  // Wakes any pending wait with operation_aborted.
  void cancel();

  bool connected() const;
  // Whether the server is still at the other end: what arrived is read into libpq's buffer (a
  // stream's frames stay there for try_read()); a connection the server closed says false.
  bool alive();
  int server_version() const;
  // `conninfo` (one or several hosts) narrowed to the server this connection reached (its host,
  // address and port; pin_conninfo()): another connection made with it reaches the same server.
  // `conninfo` unchanged when not connected.
  std::string same_server_conninfo(const std::string& conninfo) const;
  std::string quote_literal(const std::string& text) const;
  std::string quote_identifier(const std::string& text) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: background handlers hold weak references
};

}  // namespace outbox::pg
