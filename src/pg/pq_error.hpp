// Error from a failed libpq result, private to the pg module, for every connection (replication,
// catalog, the commands'): "<what>: <primary message> (SQLSTATE xxxxx; detail: ...; hint: ...)",
// with the SQLSTATE kept for classification.
#pragma once

#include <libpq-fe.h>

#include <string>

#include "libpq_handles.hpp"
#include "outbox/pg/replication_connection.hpp"  // pg::Error

namespace outbox::pg {

inline Error pq_result_error(PGconn* c, const PGresult* r, const std::string& what) {
  auto field = [&](int code) -> std::string {
    const char* v = r ? PQresultErrorField(r, code) : nullptr;
    return v ? v : "";
  };
  std::string state = field(PG_DIAG_SQLSTATE);
  std::string msg = field(PG_DIAG_MESSAGE_PRIMARY);
  if (msg.empty()) msg = r ? one_line(PQresultErrorMessage(r)) : "";
  if (msg.empty()) msg = one_line(PQerrorMessage(c));
  std::string extra;
  if (!state.empty()) extra += "SQLSTATE " + state;
  if (auto d = field(PG_DIAG_MESSAGE_DETAIL); !d.empty()) extra += "; detail: " + d;
  if (auto h = field(PG_DIAG_MESSAGE_HINT); !h.empty()) extra += "; hint: " + h;
  if (!extra.empty()) msg += " (" + extra + ")";
  return Error(what + ": " + msg, state, PQstatus(c) == CONNECTION_BAD);
}

}  // namespace outbox::pg
