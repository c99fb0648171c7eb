// A server-side cursor over one query, read in batches of rows: for scans whose result must not be
// held whole in memory (reconcile). It runs inside a READ ONLY transaction on an AdminSession, so
// the whole scan sees one snapshot. Blocking, like the session.
// Not thread-safe; the session must not be used for anything else while the cursor is open.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "outbox/pg/admin.hpp"

namespace outbox::pg {

class Cursor {
 public:
  // BEGIN READ ONLY and DECLARE a NO SCROLL cursor for `sql` with $1.. text parameters. Throws
  // Error (naming `what`, e.g. "scan public.outbox") with the server's message.
  Cursor(AdminSession& session, std::string what, const std::string& sql,
         const std::vector<std::string>& params, std::size_t batch_rows);
  // Rolls the transaction back if close() was not called (errors are moot then: the session
  // is being abandoned or another error is already on its way).
  ~Cursor();
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // The next batch (at most batch_rows rows) into `rows`, cleared first; false when the cursor
  // had no more rows. Throws Error.
  bool fetch(Rows& rows);
  // CLOSE and COMMIT. Throws Error.
  void close();

 private:
  AdminSession& session_;
  std::string what_;
  std::string fetch_sql_;
  bool open_ = false;
  bool exhausted_ = false;
};

}  // namespace outbox::pg
