// What the relay knows of the server it decodes on, across its sessions (one per connection):
// the database system (another one is exit 4), the timeline and its history (a promotion: the
// stream resumes at what was acknowledged before the switch point, and what lay past it is
// reported as ghosts), whether the same running server was promoted under the relay, whether it
// is a hot standby (refused before PostgreSQL 16, warned of once without hot_standby_feedback),
// and whether this process ever held the slot (a slot gone after that is a loss). No I/O: the
// session reads the server and hands what it read here. Private to the relay; the io thread.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

class ServerHistory {
 public:
  using Lsn = pgoutput::Lsn;
  // The Pipeline's answer to a timeline switch at `at` (Pipeline::timeline_switched): the
  // furthest position it had acknowledged or committed on the old timeline.
  using Switched = std::function<Lsn(Lsn at)>;
  // The broker holds events of `old_timeline` between `from` and `to`.
  using Ghosts = std::function<void(Lsn from, Lsn to, std::uint32_t old_timeline)>;

  ServerHistory(std::string slot, std::shared_ptr<spdlog::logger> log);

  // A session's IDENTIFY_SYSTEM: another system than the last session's throws FatalError
  // (exit 4: the slot's history does not carry over).
  void identify(const pg::SystemInfo& sys);
  // The server's state: a standby before PostgreSQL 16 throws FatalError; one without
  // hot_standby_feedback is warned of, once per process.
  void check_standby(const pg::ServerState& server);
  // The session's timeline, with its history (empty on timeline 1): whether what the broker
  // acknowledged is in this server's WAL unchanged (same timeline, the same running server
  // promoted since, or a later timeline up to its switch point, `switched` then moving the
  // Pipeline back to it). False: events acknowledged past the slot may be sent again.
  bool follow_timeline(const pg::SystemInfo& sys, const pg::ServerState& server,
                       pg::TimelineHistory history, const Switched& switched, const Ghosts& ghosts);

  // The stream started: the slot is this process's (a slot missing later was lost).
  void held_slot() { had_slot_ = true; }
  bool had_slot() const { return had_slot_; }
  const std::optional<std::string>& system_id() const { return system_id_; }
  std::uint32_t timeline() const { return timeline_.value_or(0); }
  // The timeline of the last session, none before the first.
  const std::optional<std::uint32_t>& last_timeline() const { return timeline_; }
  bool on_standby() const { return on_standby_; }
  // Where `old_timeline` ended in the current timeline's history.
  std::optional<Lsn> switch_point(std::uint32_t old_timeline) const;

 private:
  std::string slot_;
  std::shared_ptr<spdlog::logger> log_;
  std::optional<std::string> system_id_;
  std::optional<std::uint32_t> timeline_;  // of the last session
  std::string server_start_;               // its server's pg_postmaster_start_time()
  bool on_standby_ = false;                // its server is a hot standby
  bool feedback_warned_ = false;
  bool had_slot_ = false;
  pg::TimelineHistory history_;  // of timeline_ (empty on timeline 1)
};

}  // namespace outbox::relay
