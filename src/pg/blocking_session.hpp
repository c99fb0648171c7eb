// A blocking libpq session, private to the pg module: a plain connection (not replication), its
// conninfo checked first (libpq's own parse errors would quote it, password included), and one
// statement at a time with text parameters and text rows, NULL kept as nullopt. The one
// definition behind AdminSession and SlotChangeScan; for the one-shot commands and the samplers'
// threads, never the relay's io_context thread. Not thread-safe: one session, one thread.
#pragma once

#include <string>
#include <vector>

#include "libpq_handles.hpp"
#include "outbox/pg/replication_connection.hpp"  // Rows

namespace outbox::pg {

// Connects; `application_name` is libpq's fallback_application_name. Throws Error (retryable)
// with libpq's message.
// `connect_timeout_s` (when above 0) is libpq's connect_timeout, and `read_write` its
// target_session_attrs=read-write (a multi-host conninfo reaches the primary), unless the
// conninfo says otherwise.
ConnHandle connect_blocking(const std::string& conninfo, const char* application_name,
                            int connect_timeout_s = 0, bool read_write = false);

// One statement with $1.. text parameters (extended protocol), rows as text. Throws Error
// "<what>: ..." with the SQLSTATE and the server's message (and its detail and hint when given).
Rows run_blocking(PGconn* conn, const std::string& what, const std::string& sql,
                  const std::vector<std::string>& params = {});

}  // namespace outbox::pg
