// Failover slots (--failover of run and setup, docs/failover.md): what the primary must offer
// before the relay's slot is made or used as a failover slot, how ready a standby's synced copy
// is (status --standby; run --standby samples it: app's failover_sampler.hpp), and the words for
// a slot PostgreSQL invalidated (exit code 4).
// Blocking libpq sessions (pg::AdminSession): never on the relay's io_context thread.
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/pg/admin.hpp"

namespace outbox::lifecycle {

// What --failover found on the primary.
struct FailoverCheck {
  // The slot cannot be (or is not) a failover slot here: older server, a standby, an existing
  // slot without failover. Each names the fix.
  std::vector<std::string> refusals;
  // A failover slot works, but a promotion could publish ghost events or stall decoding:
  // synchronized_standby_slots empty or naming a slot that is not a usable physical slot. Each
  // names the statement that fixes it.
  std::vector<std::string> unprotected;
};

// Checks the server of `db` for a failover slot named `slot`: PostgreSQL 17+, a primary, the slot
// (when it exists) a failover slot, synchronized_standby_slots naming existing physical slots.
FailoverCheck check_failover_primary(pg::AdminSession& db, const std::string& slot);

// A standby's copy of a failover slot, as `status --standby` reports it.
struct StandbyCopy {
  std::string error;         // the standby could not be inspected (then nothing else is set)
  bool in_recovery = false;  // false: not a standby (promoted, or the wrong server)
  std::optional<pg::SlotInfo> slot;
  std::string sync_replication_slots;  // "on"/"off"; "" before PostgreSQL 17
  std::string hot_standby_feedback;
  // A promotion now keeps the slot: a standby holding a synced, persistent copy that is not
  // invalidated, with sync_replication_slots and hot_standby_feedback on.
  bool ready() const;
  // Why it is not ready (empty when ready).
  std::vector<std::string> problems() const;
};

// Inspects the slot's copy on the standby at `conninfo`; failures land in `error`.
StandbyCopy inspect_standby(const std::string& conninfo, const std::string& slot);

// The standby among `conninfos` (each host of a multi-host --pg, the primary among them):
// the copy of the first server in recovery; when none is, a copy naming that (not ready).
StandbyCopy inspect_standbys(const std::vector<std::string>& conninfos, const std::string& slot);

// Where to look for the standby's copy: --standby's conninfo when given, else each host of a
// multi-host --pg (pg::per_host_conninfos); empty: nowhere (no check).
std::vector<std::string> standby_targets(const std::string& standby, const std::string& pg);

// Where the relay's events go, for slot_lost_advice(): its name ("Kafka", "JetStream") and the
// flags by which reconcile reaches it ("--brokers HOST:PORT", "--nats URL"); no flags: a
// destination reconcile cannot read back (SQS, EventBridge), every event since then goes again.
struct AdviceDestination {
  std::string name;
  std::string reconcile_flags;
};

// One line after exit code 4: why PostgreSQL invalidated the slot (invalidation_reason, the
// setting behind it) and the reconcile command to run, inspected on a new session to `conninfo`.
// Empty when the slot cannot be inspected or is neither lost nor missing.
std::string slot_lost_advice(const std::string& conninfo, const std::string& slot,
                             const AdviceDestination& to, const std::string& table);

}  // namespace outbox::lifecycle
