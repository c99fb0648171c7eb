// The backlog `status` reports: outbox events committed but not yet confirmed by the slot, counted
// from the pgoutput messages of a copy of the slot (pg::SlotChangeScan), and the health rules over
// it (--max-pending, --max-age). Pure: bytes in, counts out; no I/O, no clock (the caller passes
// the server's time). Not thread-safe; one BacklogCounter per scan.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::lifecycle {

// A pgoutput message that cannot be decoded, or a stream that breaks the protocol's order; what()
// names the LSN and the reason.
class BacklogDecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What one scan found.
struct BacklogCount {
  std::uint64_t pending_events = 0;        // Inserts into the outbox (or a partition of it)
  std::uint64_t pending_transactions = 0;  // committed transactions with at least one of them
  // Begin's commit time and commit LSN of the first such transaction in commit order.
  std::optional<pgoutput::PgTimestamp> oldest_commit_time;
  std::optional<pgoutput::Lsn> oldest_commit_lsn;
  std::uint64_t changes_scanned = 0;  // pgoutput messages read (Begin, Relation, Insert, Commit...)
};

// Counts outbox inserts in a pgoutput stream (proto_version 1, no streaming), one message at a
// time. An Insert counts when its relation is the outbox: its relid is one of `outbox_relids`
// (the table and every partition, as pg_partition_tree lists them: a publication may send a
// partition's rows under the root's relid or under the partition's own), or the Relation message
// that announced the relid names `schema.table` (a partition dropped since is no longer in the
// catalog's tree, but its rows arrive under the root's name when published via the root).
// Transactions count at their Commit: a stream cut inside one does not count it.
class BacklogCounter {
 public:
  BacklogCounter(std::set<std::uint32_t> outbox_relids, std::string schema, std::string table);

  // One pgoutput message (a row of pg_logical_slot_get_binary_changes); `lsn` only names it in
  // errors. Throws BacklogDecodeError on undecodable bytes or an Insert/Commit outside a
  // transaction.
  void add(std::span<const std::byte> message, pgoutput::Lsn lsn);

  const BacklogCount& count() const { return count_; }

 private:
  std::set<std::uint32_t> outbox_relids_;
  std::string schema_, table_;
  std::set<std::uint32_t> named_outbox_;  // relids whose Relation message named the outbox
  bool in_transaction_ = false;
  pgoutput::PgTimestamp begin_time_ = 0;
  pgoutput::Lsn begin_lsn_;
  std::uint64_t transaction_events_ = 0;
  BacklogCount count_;
};

// Counts a whole stream of messages at once (for tests and small inputs).
BacklogCount count_backlog(const std::vector<std::vector<std::byte>>& messages,
                           const std::set<std::uint32_t>& outbox_relids, const std::string& schema,
                           const std::string& table);

// The backlog part of a status report: the scan's result (or why there is none) and the limits.
struct BacklogStatus {
  std::optional<BacklogCount> count;  // nullopt: not counted (see `error`)
  std::string error;                  // why not counted ("" when counted)
  bool slot_missing = false;          // not counted because the slot does not exist (reported)
  bool stopped_at_limit = false;      // the scan reached --scan-limit: counts are lower bounds
  std::uint64_t scan_limit = 0;
  std::optional<pgoutput::Lsn> scanned_upto;  // the WAL position the scan stopped at (at most)
  pgoutput::PgTimestamp server_now = 0;       // server clock when the scan ended (for the age)
  double scan_seconds = 0;
  std::optional<std::uint64_t> max_pending;
  std::optional<std::chrono::milliseconds> max_age;
};

// Seconds from the oldest pending commit to server_now; nullopt when nothing is pending.
std::optional<double> oldest_age_seconds(const BacklogStatus& backlog);

// The problems (empty when within the limits). A scan that stopped at --scan-limit with no more
// than --max-pending counted cannot tell whether the limit is exceeded: that is a problem too.
std::vector<std::string> backlog_problems(const BacklogStatus& backlog);

// "name   value" lines for the text report, and ",\"pending_events\":..." fields for the JSON one.
std::string format_backlog_text(const BacklogStatus& backlog);
std::string format_backlog_json_fields(const BacklogStatus& backlog);

// "2026-11-30 06:20:21.013282+00" (UTC, as PostgreSQL prints timestamptz with TimeZone UTC).
std::string format_pg_timestamp(pgoutput::PgTimestamp t);
// "12.3s", "5m 03s", "2h 05m", "3d 04h".
std::string human_duration(double seconds);

}  // namespace outbox::lifecycle
