// `outbox-relay prune`: deletes outbox rows past a retention that the slot has certainly
// confirmed (criterion and proof in pg/prune.hpp and docs/commands/prune.md), in small batches, and
// drops whole partitions of a partitioned outbox when all their rows qualify. One-shot and
// blocking; prints what it did on `out`, errors on `err`, returns the process exit code.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "outbox/lifecycle/options.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/sinks/progress_reader.hpp"

namespace outbox::lifecycle {

int run_prune(const PruneOptions& options, std::ostream& out, std::ostream& err);

// Why prune must not trust the slot, or "" when it may. Pure, for tests.
struct PruneSlotView {
  bool exists = false;
  std::string slot_type, plugin, wal_status, database, current_database, catalog_xmin;
};
std::string prune_refusal(const std::string& slot_name, const PruneSlotView& slot);

// Why prune must not trust the slot given the relay's progress record `record` read from `where`,
// or "" when it may: the record could not be read or holds no position, or the slot is confirmed
// past it (made anew after a loss, or moved by another client: the events in between may never
// have been delivered, and their rows are the only copy left). Pure, for tests.
std::string progress_refusal(const std::string& slot_name,
                             const std::optional<pgoutput::Lsn>& slot_confirmed,
                             const sinks::StoredProgress& record, const std::string& where);

// Why the time column cannot measure the retention ("" when it can): missing, or not a
// timestamp/date type. `type` is format_type's text, nullopt when the table has no such column.
std::string time_column_refusal(const std::string& table, const std::string& column,
                                const std::optional<std::string>& type);

}  // namespace outbox::lifecycle
