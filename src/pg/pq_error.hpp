// Error from a failed libpq result, private to the pg module, for every connection (replication,
// catalog, the commands'): "<what>: <primary message> (SQLSTATE xxxxx; detail: ...; hint: ...)",
// with the SQLSTATE kept for classification; or, for a result of a status the caller does not
// expect, an unexpected reply naming what was expected and what came.
#pragma once

#include <libpq-fe.h>

#include <string>

#include "libpq_handles.hpp"
#include "outbox/pg/error.hpp"

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

// The error for a result `r` whose status is not among those the caller accepts (`expected`,
// e.g. "rows or a command completion"): the server's error when it is one (or libpq's, when
// there is no result, e.g. the connection broke), else an unexpected reply (e.g. a COPY result
// for a query, or a command completion where CopyBoth was due).
inline Error pq_unexpected_result(PGconn* c, const PGresult* r, const std::string& what,
                                  const std::string& expected) {
  if (r == nullptr) return pq_result_error(c, r, what);
  const ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) return pq_result_error(c, r, what);
  // A connection that broke meanwhile is retried, whatever the result said.
  if (PQstatus(c) == CONNECTION_BAD) return pq_result_error(c, r, what);
  std::string got = PQresStatus(st);
  if (std::string m = one_line(PQresultErrorMessage(r)); !m.empty()) got += " (" + m + ")";
  return Error::unexpected_reply(what, expected, got);
}

}  // namespace outbox::pg
