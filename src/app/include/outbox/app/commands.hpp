// The operating commands beside `run`: setup, status, drop. One-shot and blocking (they use
// pg::AdminSession); they print their report on `out` and errors on `err`, naming the object and
// the server's message, and return the process exit code.
#pragma once

#include <iosfwd>

#include "outbox/app/backlog.hpp"
#include "outbox/app/failover.hpp"
#include "outbox/app/options.hpp"
#include "outbox/pg/admin.hpp"

namespace outbox::app {

int run_setup(const SetupOptions& options, std::ostream& out, std::ostream& err);
int run_status(const StatusOptions& options, std::ostream& out, std::ostream& err);
int run_drop(const DropOptions& options, std::ostream& out, std::ostream& err);

// What `status` prints, from an inspected slot (nullopt: missing). Pure, for tests.
struct SlotHealth {
  bool healthy = false;
  std::vector<std::string> problems;
};
// With a standby (status --standby), its copy of the slot is judged too.
SlotHealth assess_slot(const std::optional<pg::SlotInfo>& slot, std::uint64_t max_retained_bytes,
                       const BacklogStatus* backlog = nullptr,
                       const StandbyCopy* standby = nullptr);
// With a backlog, the report also shows the pending events and judges them.
std::string format_status_text(const std::string& slot_name,
                               const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained_bytes,
                               const BacklogStatus* backlog = nullptr,
                               const StandbyCopy* standby = nullptr);
std::string format_status_json(const std::string& slot_name,
                               const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained_bytes,
                               const BacklogStatus* backlog = nullptr,
                               const StandbyCopy* standby = nullptr);

// Counts the pending outbox events of `slot` from a temporary copy of it (the slot does not
// move). A failure to count is reported in the result (`error`), not thrown.
BacklogStatus count_pending(const StatusOptions& options, const std::optional<pg::SlotInfo>& slot);

// "1.5 GiB", "512 B".
std::string human_bytes(std::uint64_t bytes);

}  // namespace outbox::app
