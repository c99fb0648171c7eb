// pg::Error, thrown by every connection of the pg module, and the one place where a PostgreSQL
// failure is classified: by SQLSTATE class when the server sent one, else by what the client
// saw (the connection broke, or the server answered something the protocol step does not allow).
// Callers decide on the ErrorKind, never on SQLSTATE strings of their own.
// Plain values: thread-safe as such.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace outbox::pg {

// conninfo.hpp: `text` without the secrets of the conninfos checked.
std::string redact(std::string text);

// A failure reported by the server (with its SQLSTATE), by the connection itself, or an
// unexpected reply. The message keeps the server's DETAIL and HINT when it sent them, and never a
// password of a conninfo checked (redact()): libpq's messages may quote one.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string sqlstate, bool connection_lost)
      : std::runtime_error(redact(message)),
        sqlstate_(std::move(sqlstate)),
        connection_lost_(connection_lost) {}
  // The same failure, its message prefixed with "context: " (classification unchanged).
  Error(const std::string& context, const Error& cause)
      : std::runtime_error(redact(context) + ": " + cause.what()),
        sqlstate_(cause.sqlstate_),
        connection_lost_(cause.connection_lost_),
        unexpected_reply_(cause.unexpected_reply_) {}

  // The server answered, but not with what the protocol step expects (a result of another
  // status, a row of another shape, a value that does not parse). Retrying would get the same
  // answer: fatal. Message: "<what>: expected <expected>, got <got>".
  static Error unexpected_reply(const std::string& what, const std::string& expected,
                                const std::string& got) {
    Error e(what + ": expected " + expected + ", got " + got, "", false);
    e.unexpected_reply_ = true;
    return e;
  }

  // Five-character SQLSTATE, or empty when the server sent none (e.g. connection lost).
  const std::string& sqlstate() const { return sqlstate_; }
  // The connection is unusable; reconnecting may help.
  bool connection_lost() const { return connection_lost_; }
  // Made by unexpected_reply().
  bool is_unexpected_reply() const { return unexpected_reply_; }

 private:
  std::string sqlstate_;
  bool connection_lost_;
  bool unexpected_reply_ = false;
};

// What a pg::Error means to a caller. Appendix A of the PostgreSQL manual lists the SQLSTATEs.
enum class ErrorKind {
  // Class 08 (connection exception); or the connection was lost (whatever the SQLSTATE: the
  // session is gone); or no SQLSTATE at all and not an unexpected reply: libpq reports socket
  // errors, timeouts and a server that closed the connection without one, and does not mark the
  // connection bad for every socket error.
  kConnection,
  // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (starting up, or
  // shutting down): the server comes back.
  kServerShutdown,
  // 53300 too_many_connections: a connection slot frees up.
  kTooManyConnections,
  // 55006 object_in_use: for the relay, its replication slot is held by another walsender (a
  // relay already running): wait as a standby.
  kSlotInUse,
  // 42710 duplicate_object: created meanwhile by someone else (a slot, a publication).
  kAlreadyExists,
  // 55P03 lock_not_available (lock_timeout), 57014 query_canceled (statement_timeout, a cancel
  // request): the statement gave up waiting.
  kCanceled,
  // Class 28 (invalid authorization) and 42501 insufficient_privilege: the role lacks a right.
  kPermission,
  // Error::unexpected_reply(): the server answered outside the protocol.
  kUnexpectedReply,
  // Any other SQLSTATE: a configuration, SQL or data error that retrying does not cure.
  kOther,
};

ErrorKind classify(const Error& error);

// Whether reconnecting and trying again can help: kConnection, kServerShutdown,
// kTooManyConnections, kSlotInUse. Everything else is fatal for a long-running caller.
bool retryable(ErrorKind kind);

// "connection", "server_shutdown", ... for logs and tests.
const char* to_string(ErrorKind kind);

}  // namespace outbox::pg
