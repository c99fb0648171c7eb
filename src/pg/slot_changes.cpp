#include "outbox/pg/slot_changes.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <optional>
#include <vector>

#include "blocking_session.hpp"
#include "libpq_handles.hpp"
#include "outbox/common/qualified_name.hpp"
#include "pq_error.hpp"

namespace outbox::pg {
namespace {

std::uint64_t be64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

struct SlotChangeScan::Impl {
  ConnHandle conn;
};

SlotChangeScan::SlotChangeScan(const std::string& conninfo) : impl_(std::make_unique<Impl>()) {
  impl_->conn = connect_blocking(conninfo, "outbox-relay status");
}

SlotChangeScan::~SlotChangeScan() = default;

std::set<std::uint32_t> SlotChangeScan::table_relids(const std::string& schema,
                                                     const std::string& table) {
  const std::string what = "look up table " + common::QualifiedName{schema, table}.text();
  auto rows =
      run_blocking(impl_->conn.get(), what,
                   // pg_partition_tree lists nothing for a table that is neither
                   // partitioned nor a partition: the table itself comes first.
                   "WITH t AS (SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) AS r) "
                   "SELECT r::oid::bigint FROM t WHERE r IS NOT NULL UNION "
                   "SELECT p.relid::oid::bigint FROM t, pg_catalog.pg_partition_tree(t.r) p",
                   {schema, table});
  if (rows.empty()) throw Error(what + ": table does not exist", "42P01", false);
  std::set<std::uint32_t> relids;
  for (const auto& r : rows) {
    const std::string text = r.at(0).value_or("");
    std::uint32_t v = 0;
    std::from_chars(text.data(), text.data() + text.size(), v);
    relids.insert(v);
  }
  return relids;
}

SlotScanResult SlotChangeScan::scan(
    const std::string& slot, const std::string& publication, std::uint64_t max_changes,
    const std::function<void(Lsn, std::span<const std::byte>)>& on_change) {
  PGconn* c = impl_->conn.get();
  SlotScanResult result;
  // The end is fixed at the start, so a busy server cannot keep the scan going; the copy's name
  // is unique among live sessions (a temporary slot dies with its backend).
  const Rows start =
      run_blocking(c, "read the current WAL position",
                   "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE "
                   "pg_current_wal_lsn() END::text, 'outbox_relay_scan_' || pg_backend_pid()");
  result.upto = Lsn::parse(start.at(0).at(0).value_or("")).value_or(Lsn{});
  const std::string copy = start.at(0).at(1).value_or("");
  run_blocking(c, "copy replication slot " + slot + " to temporary slot " + copy,
               "SELECT pg_copy_logical_replication_slot($1, $2, true)", {slot, copy});

  const std::string limit = std::to_string(std::min<std::uint64_t>(max_changes, INT_MAX));
  const std::string sql =
      "SELECT lsn, data FROM pg_logical_slot_get_binary_changes($1, $2::pg_lsn, $3::int, "
      "'proto_version', '1', 'publication_names', quote_ident($4))";
  const std::string upto = result.upto.to_string();
  const char* values[] = {copy.c_str(), upto.c_str(), limit.c_str(), publication.c_str()};
  const std::string what = "decode temporary copy " + copy + " of replication slot " + slot;
  // Binary results: data arrives as raw bytes (half the size of bytea's hex text), lsn as 8 bytes.
  if (!PQsendQueryParams(c, sql.c_str(), 4, nullptr, values, nullptr, nullptr, 1)) {
    throw pq_result_error(c, nullptr, what);
  }
  if (!PQsetSingleRowMode(c)) throw pq_result_error(c, nullptr, what);
  std::optional<Error> failure;
  for (;;) {
    ResultHandle r(PQgetResult(c));
    if (!r) break;
    const auto status = PQresultStatus(r.get());
    if (status == PGRES_SINGLE_TUPLE) {
      if (failure) continue;  // drain after an error
      if (PQgetlength(r.get(), 0, 0) != 8) {
        failure.emplace(
            Error::unexpected_reply(what, "an lsn column of 8 bytes",
                                    "one of " + std::to_string(PQgetlength(r.get(), 0, 0))));
        continue;
      }
      const Lsn lsn{be64(PQgetvalue(r.get(), 0, 0))};
      const auto* data = reinterpret_cast<const std::byte*>(PQgetvalue(r.get(), 0, 1));
      ++result.changes;
      on_change(lsn, std::span<const std::byte>(data, PQgetlength(r.get(), 0, 1)));
    } else if (status != PGRES_TUPLES_OK && !failure) {
      failure.emplace(pq_unexpected_result(c, r.get(), what, "rows"));
    }
  }
  if (failure) throw *failure;
  result.limit_reached = result.changes >= max_changes;

  const Rows end = run_blocking(c, "drop temporary replication slot " + copy,
                                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, "
                                "pg_drop_replication_slot($1)",
                                {copy});
  const std::string now_text = end.at(0).at(0).value_or("");
  std::int64_t unix_us = 0;
  std::from_chars(now_text.data(), now_text.data() + now_text.size(), unix_us);
  result.server_now = pgoutput::from_unix_micros(unix_us);
  return result;
}

}  // namespace outbox::pg
