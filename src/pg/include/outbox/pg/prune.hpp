// SQL of `outbox-relay prune`: which outbox rows the slot has certainly confirmed, counting them,
// deleting them in batches and dropping whole partitions. Blocking, over an AdminSession; not
// thread-safe.
//
// The criterion (docs/commands/prune.md): a row is prunable when
//   age(xmin) > age(slot.catalog_xmin)   -- its inserting transaction is older than catalog_xmin
//   AND <time column> < cutoff           -- and it is past the retention.
// catalog_xmin only moves (and is only persisted) together with a confirmed_flush_lsn at or past
// the WAL position L of the xl_running_xacts record it came from; every transaction older than
// the oldest one running at L had written its commit (or abort) record before L. So its commit LSN
// is below confirmed_flush_lsn: the slot will never send it again. A subtransaction's xid is
// larger than its top-level xid, so a row inserted in a subtransaction is older than catalog_xmin
// only if its whole transaction is. `xmin` is the raw xid even after freezing (PostgreSQL >= 9.4
// keeps it and sets a flag), and age() is exact for every xid within 2^31 of the present, which
// covers every transaction at or after catalog_xmin (the server refuses new xids before
// catalog_xmin could wrap). An older xid may wrap and look young: such a row is kept, never
// deleted by mistake. FrozenTransactionId (2, tuples frozen by PostgreSQL < 9.4 before
// pg_upgrade) has age() = INT_MAX: older than any slot, so prunable, which is right.
// The slot is read again by every statement (a subquery): a slot dropped meanwhile, lost, or
// without catalog_xmin makes the condition NULL, and nothing more is deleted.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/pg/admin.hpp"

namespace outbox::pg {

// What prune needs to know of the slot before trusting it.
struct PruneSlot {
  std::string catalog_xmin;  // xid as text; "" when NULL (a physical slot, one being created)
  std::string database;
  std::string current_database;
  std::string wal_status;
  std::string plugin;
  std::string slot_type;
  std::optional<Lsn> confirmed_flush_lsn;
  std::uint64_t catalog_xmin_age = 0;  // age(catalog_xmin): transactions since
};

// A table holding outbox rows: the outbox itself, or one leaf partition of it.
struct OutboxPart {
  std::string schema;
  std::string name;
  bool is_partition = false;               // a leaf partition of the (partitioned) outbox
  std::string parent_schema, parent_name;  // its direct parent, when a partition
  // A range partition on the time column alone whose upper bound is at or before the cutoff: no
  // row of the present can be routed to it any more, so dropping it cannot make an insert fail.
  // (A list or hash partition, or one whose range reaches the present, is never dropped.)
  bool closed_before_cutoff = false;
};

struct PartCounts {
  std::uint64_t rows = 0;
  std::uint64_t prunable = 0;     // past the retention and certainly confirmed
  std::uint64_t unconfirmed = 0;  // past the retention but maybe not confirmed yet: kept
};

struct BatchResult {
  std::uint64_t selected = 0;  // prunable rows found after the cursor (at most the batch size)
  std::uint64_t deleted = 0;
  std::string last_ctid;  // cursor for the next batch ("" when nothing was selected)
};

enum class DropResult {
  kDropped,
  kNotAllPrunable,  // empty, or rows arrived (or are not confirmed) since the first count
  kBusy,            // the lock was not granted within 1s, or the check took longer than 2s
};

class PruneQueries {
 public:
  // `slot` is read by every statement; `column` is the time column. `cutoff` arguments are
  // timestamptz text from cutoff().
  PruneQueries(AdminSession& db, std::string slot, std::string column);

  std::optional<PruneSlot> slot();
  // The cutoff now() - older_than, as timestamptz text, fixed once for the whole run.
  std::string cutoff(std::chrono::milliseconds older_than);
  // format_type of the column, nullopt when the table has no such column.
  std::optional<std::string> column_type(const std::string& schema, const std::string& table);
  // The table itself when it is not partitioned, else its leaf partitions (every level).
  // Throws Error naming the table when it does not exist.
  std::vector<OutboxPart> parts(const std::string& schema, const std::string& table,
                                const std::string& cutoff);

  PartCounts count(const OutboxPart& part, const std::string& cutoff);
  // Deletes up to `batch` prunable rows whose ctid is after `after_ctid` ("" for the start), in
  // one statement (its own transaction). Walking by ctid reads the table once over all batches.
  BatchResult delete_batch(const OutboxPart& part, const std::string& cutoff,
                           const std::string& after_ctid, std::uint64_t batch);
  // In one transaction: locks the parent and the partition (lock_timeout 1s, so a waiting prune
  // never queues inserts for long), checks again that the partition has rows and all of them
  // are prunable (statement_timeout 2s: inserts wait for that long at most), and drops it.
  DropResult drop_if_all_prunable(const OutboxPart& part, const std::string& cutoff,
                                  std::uint64_t& rows);

 private:
  std::string qualified(const OutboxPart& part) const;
  std::string prunable_sql() const;  // the condition over $1 (slot) and $2 (cutoff)

  AdminSession& db_;
  std::string slot_;
  std::string column_;
};

}  // namespace outbox::pg
