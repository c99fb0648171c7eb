// `outbox-relay status`: the slot's state, the backlog of outbox events it has not confirmed
// (backlog.hpp, counted from a copy of the slot), a standby's copy (failover.hpp), and the health
// rules over them (exit code 1 when unhealthy). run_status() and count_pending() block on libpq
// (pg::AdminSession, pg::SlotChangeScan); the rest is pure. Thread-safety: free functions, no
// shared state.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "outbox/lifecycle/backlog.hpp"
#include "outbox/lifecycle/failover.hpp"
#include "outbox/lifecycle/options.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/sinks/progress_reader.hpp"

namespace outbox::lifecycle {

// Prints the report on `out` (text or --json), errors on `err`; returns the exit code.
int run_status(const StatusOptions& options, std::ostream& out, std::ostream& err);

// The relay's progress record beside the slot (status --brokers or --nats).
struct ProgressView {
  std::string where;  // "topic T" or "JetStream key-value bucket B"
  sinks::StoredProgress record;
};

// What `status` prints, from an inspected slot (nullopt: missing). Pure, for tests.
struct SlotHealth {
  bool healthy = false;
  std::vector<std::string> problems;
};
// With a standby (status --standby), its copy of the slot is judged too; with the relay's progress
// record, a slot confirmed past it, or missing while it holds a position, is unhealthy (a slot
// made anew or moved by another client; the events in between may never have been delivered).
SlotHealth assess_slot(const std::optional<pg::SlotInfo>& slot, std::uint64_t max_retained_bytes,
                       const BacklogStatus* backlog = nullptr, const StandbyCopy* standby = nullptr,
                       const ProgressView* progress = nullptr);
// With a backlog, the report also shows the pending events and judges them.
std::string format_status_text(const std::string& slot_name,
                               const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained_bytes,
                               const BacklogStatus* backlog = nullptr,
                               const StandbyCopy* standby = nullptr,
                               const ProgressView* progress = nullptr);
std::string format_status_json(const std::string& slot_name,
                               const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained_bytes,
                               const BacklogStatus* backlog = nullptr,
                               const StandbyCopy* standby = nullptr,
                               const ProgressView* progress = nullptr);

// Counts the pending outbox events of `slot` from a temporary copy of it (the slot does not
// move). A failure to count is reported in the result (`error`), not thrown.
BacklogStatus count_pending(const StatusOptions& options, const std::optional<pg::SlotInfo>& slot);

// "0/16B3748", or "-" for no position (a slot not yet confirmed), as the reports print it.
std::string lsn_text(const std::optional<pg::Lsn>& lsn);

// "1.5 GiB", "512 B".
std::string human_bytes(std::uint64_t bytes);

}  // namespace outbox::lifecycle
