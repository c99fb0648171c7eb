// Reads what a logical replication slot still has to send, without moving it: the slot is copied
// to a temporary slot (pg_copy_logical_replication_slot(src, tmp, true)) and the copy is decoded
// with pg_logical_slot_get_binary_changes. The copy starts at the source's restart_lsn and
// confirmed_flush_lsn, so it yields exactly the transactions the source would send next; the
// source is only read, which also works while a relay holds it (checked on PostgreSQL 15).
// A temporary slot belongs to its session: it goes when the scan ends or the connection drops.
// Blocking, one-shot (for `status`); not thread-safe. The libpq handle never leaves pg.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>

#include "outbox/pg/replication_connection.hpp"  // pg::Error, Lsn
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pg {

struct SlotScanResult {
  Lsn upto;                    // the scan read the WAL up to this position (current at start)
  std::uint64_t changes = 0;   // messages passed to the callback
  bool limit_reached = false;  // stopped at max_changes: more may follow
  pgoutput::PgTimestamp server_now = 0;  // server clock (clock_timestamp()) after the scan
};

class SlotChangeScan {
 public:
  // Connects (plain connection, its own session). Throws Error with libpq's message.
  explicit SlotChangeScan(const std::string& conninfo);
  ~SlotChangeScan();
  SlotChangeScan(const SlotChangeScan&) = delete;
  SlotChangeScan& operator=(const SlotChangeScan&) = delete;

  // Relids of schema.table and, when it is partitioned, of every partition at every level
  // (pg_partition_tree). Throws Error naming the table when it does not exist.
  std::set<std::uint32_t> table_relids(const std::string& schema, const std::string& table);

  // Copies `slot` to a temporary slot, decodes it with pgoutput (proto_version 1, the given
  // publication) up to the current WAL position and passes each message to `on_change` (the bytes
  // are valid during the call only), then drops the copy. Stops after about `max_changes`
  // messages: the server stops at the first transaction boundary past it, so one transaction
  // larger than the bound is read whole. Rows are streamed (single-row mode): memory stays at one
  // message. Throws Error (42704 when the slot does not exist, 53400 when no replication slot is
  // free for the copy); an exception from `on_change` propagates.
  SlotScanResult scan(const std::string& slot, const std::string& publication,
                      std::uint64_t max_changes,
                      const std::function<void(Lsn, std::span<const std::byte>)>& on_change);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::pg
