#include "outbox/lifecycle/failover.hpp"

#include <sstream>

#include "outbox/pg/conninfo.hpp"
#include "outbox/pg/slot_rules.hpp"

namespace outbox::lifecycle {
namespace {

std::string lsn_text(const std::optional<pg::Lsn>& lsn) { return lsn ? lsn->to_string() : "?"; }

// synchronized_standby_slots' names: comma-separated, blanks around them dropped, double quotes
// (an identifier's) removed.
std::vector<std::string> split_slot_list(const std::string& text) {
  std::vector<std::string> names;
  std::string cur;
  auto flush = [&] {
    const auto b = cur.find_first_not_of(" \t");
    const auto e = cur.find_last_not_of(" \t");
    if (b != std::string::npos) {
      std::string n = cur.substr(b, e - b + 1);
      if (n.size() >= 2 && n.front() == '"' && n.back() == '"') n = n.substr(1, n.size() - 2);
      names.push_back(n);
    }
    cur.clear();
  };
  for (char c : text) {
    if (c == ',') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  return names;
}

}  // namespace

FailoverCheck check_failover_primary(pg::AdminSession& db, const std::string& slot) {
  FailoverCheck c;
  const int version = db.server_version_num();
  if (version < 170000) {
    c.refusals.push_back(
        "--failover needs PostgreSQL 17 or later (failover slots); this server is " +
        db.server_version());
    return c;
  }
  if (db.exec("SELECT pg_is_in_recovery()").at(0).at(0).value_or("") == "t") {
    c.refusals.push_back(
        "--failover: this server is a standby; a failover slot is made on the primary (a standby "
        "with sync_replication_slots = on keeps its copy)");
    return c;
  }
  if (const auto s = db.slot(slot); s && s->failover && !*s->failover) {
    c.refusals.push_back(
        "--failover: replication slot " + slot +
        " exists without failover, so no standby keeps a copy of it. Enable it while no relay "
        "streams from it, over a replication connection: psql \"dbname=... replication=database\" "
        "-c 'ALTER_REPLICATION_SLOT " +
        db.quote_identifier(slot) + " ( FAILOVER true )'");
  }

  // Without synchronized_standby_slots the walsender may send changes the standby has not
  // received: after a promotion they are gone from the database but already in Kafka (ghosts).
  pg::Rows physical = db.exec(
      "SELECT slot_name, wal_status FROM pg_catalog.pg_replication_slots "
      "WHERE slot_type = 'physical' ORDER BY slot_name");
  std::string candidates;
  for (const auto& r : physical) {
    candidates += (candidates.empty() ? "" : ", ") + r.at(0).value_or("");
  }
  const std::string hint =
      candidates.empty() ? "no physical slot exists here: give the standby one (primary_slot_name)"
                         : "physical slots here: " + candidates;
  const std::string setting = db.setting("synchronized_standby_slots");
  const std::vector<std::string> listed = split_slot_list(setting);
  if (listed.empty()) {
    c.unprotected.push_back(
        "synchronized_standby_slots is empty on the primary: an outbox row the standby has not "
        "received can reach Kafka and be gone after a promotion (a ghost event). Fix: ALTER "
        "SYSTEM SET synchronized_standby_slots = 'STANDBY_SLOT'; SELECT pg_reload_conf(); with "
        "the physical slot of the standby's primary_slot_name (" +
        hint + ")");
    return c;
  }
  for (const std::string& name : listed) {
    std::optional<std::string> wal_status;
    bool found = false;
    for (const auto& r : physical) {
      if (r.at(0).value_or("") == name) {
        found = true;
        wal_status = r.at(1);
      }
    }
    if (!found) {
      c.unprotected.push_back("synchronized_standby_slots names " + name +
                              ", which is not a physical slot on the primary: decoding of "
                              "failover slots waits for it forever (" +
                              hint + ")");
    } else if (pg::is_lost_slot(wal_status.value_or(""))) {
      c.unprotected.push_back("synchronized_standby_slots names " + name +
                              ", a physical slot that is lost: decoding of failover slots waits "
                              "for it forever; rebuild the standby on a new slot");
    }
  }
  return c;
}

bool StandbyCopy::ready() const { return problems().empty(); }

std::vector<std::string> StandbyCopy::problems() const {
  std::vector<std::string> p;
  if (!error.empty()) {
    p.push_back("standby: " + error);
    return p;
  }
  if (!in_recovery) p.push_back("standby: the server is not a standby (promoted?)");
  if (!slot) {
    p.push_back("standby: holds no copy of the slot (a failover slot? sync_replication_slots?)");
  } else {
    if (!slot->synced.value_or(false)) p.push_back("standby: its slot is not a synced copy");
    if (slot->temporary) {
      p.push_back(
          "standby: its copy is still temporary: the primary's slot has not yet moved past the "
          "standby's catalog xmin (a promotion now would lose the slot)");
    }
    if (pg::is_lost_slot(slot->wal_status) || slot->invalidation_reason) {
      p.push_back("standby: its copy is invalidated (" +
                  slot->invalidation_reason.value_or("wal_status lost") + ")");
    }
  }
  if (sync_replication_slots != "on") {
    p.push_back("standby: sync_replication_slots is " +
                (sync_replication_slots.empty() ? std::string("not available (PostgreSQL < 17)")
                                                : sync_replication_slots));
  }
  if (hot_standby_feedback != "on") {
    p.push_back("standby: hot_standby_feedback is " + hot_standby_feedback);
  }
  return p;
}

StandbyCopy inspect_standby(const std::string& conninfo, const std::string& slot) {
  StandbyCopy c;
  try {
    pg::AdminSession db(conninfo);
    c.in_recovery = db.exec("SELECT pg_is_in_recovery()").at(0).at(0).value_or("") == "t";
    c.hot_standby_feedback = db.setting("hot_standby_feedback");
    if (db.server_version_num() >= 170000) {
      c.sync_replication_slots = db.setting("sync_replication_slots");
    }
    c.slot = db.slot(slot);
  } catch (const pg::Error& e) {
    c.error = e.what();
  }
  return c;
}

StandbyCopy inspect_standbys(const std::vector<std::string>& conninfos, const std::string& slot) {
  if (conninfos.size() == 1) return inspect_standby(conninfos.front(), slot);
  std::optional<StandbyCopy> failed;
  for (const std::string& conninfo : conninfos) {
    StandbyCopy c = inspect_standby(conninfo, slot);
    if (c.error.empty() && c.in_recovery) return c;
    if (!c.error.empty() && !failed) failed = std::move(c);
  }
  if (failed) {
    failed->error = "no host of --pg is a standby; one could not be inspected: " + failed->error;
    return *failed;
  }
  StandbyCopy none;
  none.error = "no host of --pg is a standby";
  return none;
}

std::vector<std::string> standby_targets(const std::string& standby, const std::string& pg) {
  if (!standby.empty()) return {standby};
  return pg::per_host_conninfos(pg);
}

std::string slot_lost_advice(const std::string& conninfo, const std::string& slot,
                             const AdviceDestination& to, const std::string& table) {
  try {
    pg::AdminSession db(conninfo);
    const auto s = db.slot(slot);
    std::string cause;
    if (!s) {
      cause = "it no longer exists (dropped by someone)";
    } else if (!pg::is_lost_slot(s->wal_status) && !s->invalidation_reason) {
      return "";
    } else {
      const std::string reason = s->invalidation_reason.value_or("");
      if (reason.empty() || reason == "wal_removed") {
        cause = "wal_removed: it retained more WAL than max_slot_wal_keep_size = " +
                db.setting("max_slot_wal_keep_size") + " and PostgreSQL removed WAL it needed";
      } else if (reason == "idle_timeout") {
        cause =
            "idle_timeout: no relay streamed from it for longer than "
            "idle_replication_slot_timeout = " +
            db.setting("idle_replication_slot_timeout");
      } else if (reason == "rows_removed") {
        cause =
            "rows_removed: catalog rows it needed were vacuumed (on a standby: "
            "hot_standby_feedback off, or no physical slot on the primary)";
      } else if (reason == "wal_level_insufficient") {
        cause = "wal_level_insufficient: the primary's wal_level is below logical";
      } else {
        cause = reason;
      }
    }
    const std::string since = s && s->inactive_since
                                  ? "'" + *s->inactive_since + "'"
                                  : "TIME_OF_LAST_CONFIRMED_POSITION (the relay's log)";
    std::ostringstream o;
    o << "replication slot " << slot << " was invalidated by PostgreSQL, " << cause
      << "; outbox rows committed after its last confirmed position "
      << lsn_text(s ? s->confirmed_flush_lsn : std::nullopt) << " may never have reached "
      << to.name << ". Recover: outbox-relay drop --pg \"$PG\" --slot " << slot
      << " --yes; outbox-relay setup --pg \"$PG\" --slot " << slot
      << " (or start the relay once with --accept-slot-loss); then ";
    if (to.reconcile_flags.empty()) {
      o << "send every event committed since " << since << " again (docs/aws.md, \"When the "
        << "slot is lost\")";
    } else {
      o << "outbox-relay reconcile --pg \"$PG\" " << to.reconcile_flags
        << (table.empty() ? "" : " --table " + table)
        << " --column-time CREATED_AT_COLUMN --margin 5m --since " << since
        << " --until NEW_SLOT_CREATION_TIME --repair";
    }
    return o.str();
  } catch (const pg::Error&) {
    return "";
  }
}

}  // namespace outbox::lifecycle
