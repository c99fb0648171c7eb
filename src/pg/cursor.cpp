#include "outbox/pg/cursor.hpp"

namespace outbox::pg {
namespace {

constexpr const char* kCursorName = "outbox_relay_scan";

}  // namespace

Cursor::Cursor(AdminSession& session, std::string what, const std::string& sql,
               const std::vector<std::string>& params, std::size_t batch_rows)
    : session_(session),
      what_(std::move(what)),
      fetch_sql_("FETCH FORWARD " + std::to_string(batch_rows) + " FROM " + kCursorName) {
  auto step = [&](const std::string& statement, const std::vector<std::string>& p) {
    try {
      session_.exec(statement, p);
    } catch (const Error& e) {
      throw Error(what_, e);
    }
  };
  step("BEGIN READ ONLY", {});
  open_ = true;
  // DECLARE takes the query's parameters through the extended protocol like any statement.
  step(std::string("DECLARE ") + kCursorName + " NO SCROLL CURSOR FOR " + sql, params);
}

Cursor::~Cursor() {
  if (!open_) return;
  try {
    session_.exec("ROLLBACK");
  } catch (const Error&) {
    // The session is broken or in a failed state; the error that got us here is reported.
  }
}

bool Cursor::fetch(Rows& rows) {
  rows.clear();
  if (exhausted_) return false;
  try {
    rows = session_.exec(fetch_sql_);
  } catch (const Error& e) {
    throw Error(what_, e);
  }
  if (rows.empty()) exhausted_ = true;
  return !rows.empty();
}

void Cursor::close() {
  if (!open_) return;
  try {
    session_.exec(std::string("CLOSE ") + kCursorName);
    session_.exec("COMMIT");
  } catch (const Error& e) {
    throw Error(what_, e);
  }
  open_ = false;
}

}  // namespace outbox::pg
