#include "outbox/pg/error.hpp"

namespace outbox::pg {

ErrorKind classify(const Error& error) {
  const std::string& s = error.sqlstate();
  const std::string cls = s.substr(0, 2);
  if (cls == "08") return ErrorKind::kConnection;
  if (s == "57P01" || s == "57P02" || s == "57P03") return ErrorKind::kServerShutdown;
  if (s == "53300") return ErrorKind::kTooManyConnections;
  if (s == "55006") return ErrorKind::kSlotInUse;
  // A session that is gone is retried whatever the server said last.
  if (error.connection_lost()) return ErrorKind::kConnection;
  if (error.is_unexpected_reply()) return ErrorKind::kUnexpectedReply;
  if (s.empty()) return ErrorKind::kConnection;
  if (s == "42710") return ErrorKind::kAlreadyExists;
  if (s == "55P03" || s == "57014") return ErrorKind::kCanceled;
  if (cls == "28" || s == "42501") return ErrorKind::kPermission;
  return ErrorKind::kOther;
}

bool retryable(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConnection:
    case ErrorKind::kServerShutdown:
    case ErrorKind::kTooManyConnections:
    case ErrorKind::kSlotInUse:
      return true;
    case ErrorKind::kAlreadyExists:
    case ErrorKind::kCanceled:
    case ErrorKind::kPermission:
    case ErrorKind::kUnexpectedReply:
    case ErrorKind::kOther:
      return false;
  }
  return false;  // not reached: every enumerator is handled above
}

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConnection:
      return "connection";
    case ErrorKind::kServerShutdown:
      return "server_shutdown";
    case ErrorKind::kTooManyConnections:
      return "too_many_connections";
    case ErrorKind::kSlotInUse:
      return "slot_in_use";
    case ErrorKind::kAlreadyExists:
      return "already_exists";
    case ErrorKind::kCanceled:
      return "canceled";
    case ErrorKind::kPermission:
      return "permission";
    case ErrorKind::kUnexpectedReply:
      return "unexpected_reply";
    case ErrorKind::kOther:
      return "other";
  }
  return "?";
}

}  // namespace outbox::pg
