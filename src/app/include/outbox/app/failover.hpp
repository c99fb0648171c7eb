// Failover slots (--failover of run and setup, docs/failover.md): what the primary must offer
// before the relay's slot is made or used as a failover slot, how ready a standby's synced copy
// is (status --standby), and the words for a slot PostgreSQL invalidated (exit code 4).
// Blocking libpq sessions (pg::AdminSession): never on the relay's io_context thread.
// Thread-safety: free functions, no shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "outbox/pg/admin.hpp"

namespace outbox::app {

template <class Sample>
class SamplerThread;

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

// The last checks of the standby's copy, as /metrics reports them.
struct FailoverSample {
  bool checked = false;  // a check answered at least once
  bool ready = false;    // the last check that answered: StandbyCopy::ready()
  std::uint64_t ready_checks = 0;
  std::uint64_t not_ready_checks = 0;
  std::uint64_t failed_checks = 0;  // the standby could not be inspected
};

// outbox_relay_failover_ready and outbox_relay_failover_checks_total (pure).
std::string render_failover_prometheus(const FailoverSample& sample);

// run --standby (or a multi-host --pg): checks the standby's copy of the slot (inspect_standbys)
// at start and every
// `every`, on a thread of its own (libpq blocks), and logs each change of readiness. sample() is
// thread-safe; start() and the destructor (which stops the thread, waiting a few seconds at most)
// are called from the owning thread.
class FailoverSampler {
 public:
  FailoverSampler(std::vector<std::string> standby_conninfos, std::string slot,
                  std::chrono::milliseconds every);
  ~FailoverSampler();
  FailoverSampler(const FailoverSampler&) = delete;
  FailoverSampler& operator=(const FailoverSampler&) = delete;

  void start();
  FailoverSample sample() const;

 private:
  std::vector<std::string> conninfos_;
  std::string slot_;
  std::chrono::milliseconds every_;
  std::unique_ptr<SamplerThread<FailoverSample>> thread_;  // sampler_thread.hpp
};

// One line after exit code 4: why PostgreSQL invalidated the slot (invalidation_reason, the
// setting behind it) and the reconcile command to run, inspected on a new session to `conninfo`.
// Empty when the slot cannot be inspected or is neither lost nor missing.
std::string slot_lost_advice(const std::string& conninfo, const std::string& slot,
                             const std::string& brokers, const std::string& table);

}  // namespace outbox::app
