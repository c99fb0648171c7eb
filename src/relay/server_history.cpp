#include "server_history.hpp"

#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::relay {

ServerHistory::ServerHistory(std::string slot, std::shared_ptr<spdlog::logger> log)
    : slot_(std::move(slot)), log_(std::move(log)) {}

void ServerHistory::identify(const pg::SystemInfo& sys) {
  if (system_id_ && *system_id_ != sys.system_id) {
    throw FatalError({kExitSlotLost, "connected to a different PostgreSQL system (id " +
                                         sys.system_id + ", was " + *system_id_ +
                                         "): the slot's history does not carry over"});
  }
  system_id_ = sys.system_id;
  history_.clear();  // read again for this session (follow_timeline())
}

// Decoding on a hot standby (PostgreSQL 16+): refused before 16, warned without
// hot_standby_feedback (the primary may vacuum catalog rows the slot needs: invalidated).
void ServerHistory::check_standby(const pg::ServerState& server) {
  on_standby_ = server.in_recovery;
  if (!on_standby_) return;
  if (server.version_num < 160000) {
    throw FatalError({kExitError,
                      "the server of --pg is a standby, and logical decoding on a standby needs "
                      "PostgreSQL 16 or later: point --pg at the primary"});
  }
  if (server.hot_standby_feedback != "on" && !feedback_warned_) {
    feedback_warned_ = true;
    log_->warn(
        "event=standby_without_feedback slot={}: decoding on a standby with "
        "hot_standby_feedback = {}; the primary may remove catalog rows the slot needs and the "
        "slot is then invalidated (exit code 4). Set hot_standby_feedback = on on the standby "
        "(and primary_slot_name)",
        slot_, server.hot_standby_feedback);
  }
}

bool ServerHistory::follow_timeline(const pg::SystemInfo& sys, const pg::ServerState& server,
                                    pg::TimelineHistory history, const Switched& switched,
                                    const Ghosts& ghosts) {
  // The timeline's ancestors and where each ended: WAL before that point is the same on both.
  history_ = std::move(history);
  // What the broker acknowledged is in this server's WAL, unchanged, on the same timeline, and
  // on a later one (a promotion) up to the point where it left the old one.
  // The same running server as before (a standby the relay decoded on, promoted since) holds
  // what it sent in its WAL, whatever its timeline now.
  const bool same_server = server_start_ == server.postmaster_start;
  server_start_ = server.postmaster_start;
  bool history_continues = !timeline_ || *timeline_ == sys.timeline || same_server;
  if (timeline_ && *timeline_ != sys.timeline && same_server) {
    log_->warn(
        "event=timeline_changed slot={} timeline={} was={} same_server=true: the server the "
        "relay decodes on was promoted; what the broker acknowledged is in its WAL and is not "
        "sent again",
        slot_, sys.timeline, *timeline_);
  } else if (!history_continues) {
    if (const std::optional<Lsn> at = switch_point(*timeline_)) {
      history_continues = true;
      const Lsn past = switched(*at);
      if (past > *at) ghosts(*at, past, *timeline_);
      log_->warn(
          "event=timeline_changed slot={} timeline={} was={} switch_point={}: resuming at what "
          "the broker acknowledged before it; nothing acknowledged is sent again",
          slot_, sys.timeline, *timeline_, at->to_string());
    } else {
      log_->warn(
          "event=timeline_changed slot={} timeline={} was={}: timeline {} is not in the new "
          "one's history; events the broker acknowledged after the slot's position may be sent "
          "again",
          slot_, sys.timeline, *timeline_, *timeline_);
    }
  }
  timeline_ = sys.timeline;
  return history_continues;
}

std::optional<pgoutput::Lsn> ServerHistory::switch_point(std::uint32_t old_timeline) const {
  const auto it = history_.find(old_timeline);
  return it == history_.end() ? std::nullopt : std::optional<Lsn>(it->second);
}

}  // namespace outbox::relay
