#include "outbox/lifecycle/status.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "outbox/common/log_text.hpp"  // quoted: a JSON string literal
#include "outbox/pg/slot_changes.hpp"
#include "outbox/pg/slot_rules.hpp"

namespace outbox::lifecycle {
std::string lsn_text(const std::optional<pg::Lsn>& lsn) { return lsn ? lsn->to_string() : "-"; }

namespace {

std::string json_lsn(const std::optional<pg::Lsn>& lsn) {
  return lsn ? common::quoted(lsn->to_string()) : "null";
}

std::string json_opt(const std::optional<std::string>& s) {
  return s ? common::quoted(*s) : "null";
}

// One "name   value" line of the human report.
void row(std::ostream& out, std::string_view name, const std::string& value) {
  out << name;
  for (std::size_t i = name.size(); i < 22; ++i) out << ' ';
  out << value << '\n';
}

// The slot against the relay's progress record (ProgressView).
std::vector<std::string> progress_problems(const std::optional<pg::SlotInfo>& slot,
                                           const ProgressView& p) {
  const sinks::StoredProgress& r = p.record;
  const std::string record = "the relay's progress record (" + p.where + ", key " + r.key + ")";
  if (!r.error.empty()) return {"cannot read " + record + ": " + r.error};
  if (!r.bad.empty()) return {record + " holds \"" + r.bad + "\", not a WAL position"};
  if (!r.lsn) return {};  // no relay recorded a delivery there yet: a first start
  const std::string consequence =
      ": the events committed after it may never have been delivered; the relay exits 4 on its "
      "next start and prune refuses (reconcile --repair, then run once with "
      "--accept-slot-loss)";
  if (!slot)
    return {"slot missing, and " + record + " shows it delivered through " + r.lsn->to_string() +
            consequence};
  if (slot->confirmed_flush_lsn && *slot->confirmed_flush_lsn > *r.lsn) {
    return {"slot confirmed through " + slot->confirmed_flush_lsn->to_string() + ", past " +
            record + " at " + r.lsn->to_string() + " (made anew or moved by another client)" +
            consequence};
  }
  return {};
}

std::string progress_text(const ProgressView& p) {
  const sinks::StoredProgress& r = p.record;
  const std::string at = " (" + p.where + ", key " + r.key + ")";
  if (!r.error.empty()) return "unreadable" + at + ": " + r.error;
  if (!r.bad.empty()) return "not a position" + at + ": " + r.bad;
  if (!r.lsn) return "none" + at;
  return r.lsn->to_string() + (r.timeline ? " timeline " + std::to_string(*r.timeline) : "") + at;
}

}  // namespace

std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

SlotHealth assess_slot(const std::optional<pg::SlotInfo>& slot, std::uint64_t max_retained,
                       const BacklogStatus* backlog, const StandbyCopy* standby,
                       const ProgressView* progress) {
  SlotHealth h;
  if (!slot) {
    h.problems.push_back("slot " + pg::slot_missing_words());
  } else {
    if (pg::is_lost_slot(slot->wal_status)) {
      h.problems.push_back("slot " + pg::slot_lost_words() + ": " + pg::slot_lost_consequence());
    }
    if (!pg::is_pgoutput_slot(slot->slot_type, slot->plugin)) {
      h.problems.push_back("slot " + pg::slot_not_pgoutput_words(slot->slot_type, slot->plugin));
    }
    if (slot->retained_wal_bytes > max_retained) {
      h.problems.push_back("retained WAL " + human_bytes(slot->retained_wal_bytes) +
                           " exceeds --max-retained " + human_bytes(max_retained));
    }
  }
  if (backlog) {
    for (auto& p : backlog_problems(*backlog)) h.problems.push_back(std::move(p));
  }
  if (standby) {
    if (slot && slot->failover && !*slot->failover) {
      h.problems.push_back("slot is not a failover slot: no standby keeps a copy of it");
    }
    for (auto& p : standby->problems()) h.problems.push_back(std::move(p));
  }
  if (progress) {
    for (auto& p : progress_problems(slot, *progress)) h.problems.push_back(std::move(p));
  }
  h.healthy = h.problems.empty();
  return h;
}

std::string format_status_text(const std::string& name, const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained, const BacklogStatus* backlog,
                               const StandbyCopy* standby, const ProgressView* progress) {
  std::ostringstream out;
  const SlotHealth h = assess_slot(slot, max_retained, backlog, standby, progress);
  row(out, "slot", name);
  if (!slot) {
    row(out, "exists", "no");
  } else {
    const auto& s = *slot;
    row(out, "plugin", s.plugin + " (" + s.slot_type + ", database " + s.database + ")");
    std::string active = s.active ? "yes" : "no";
    if (s.active_pid) {
      active += " (pid " + std::to_string(*s.active_pid);
      if (s.application_name && !s.application_name->empty()) {
        active += ", application " + *s.application_name;
      }
      if (s.client_addr) active += ", client " + *s.client_addr;
      if (s.replication_state) active += ", " + *s.replication_state;
      active += ")";
    }
    row(out, "active", active);
    row(out, "confirmed_flush_lsn", lsn_text(s.confirmed_flush_lsn));
    row(out, "restart_lsn", lsn_text(s.restart_lsn));
    row(out, "current_wal_lsn", s.current_wal_lsn.to_string());
    row(out, "retained_wal",
        human_bytes(s.retained_wal_bytes) + " (" + std::to_string(s.retained_wal_bytes) +
            " bytes; limit " + human_bytes(max_retained) + ")");
    row(out, "lag",
        human_bytes(s.confirmed_lag_bytes) + " (" + std::to_string(s.confirmed_lag_bytes) +
            " bytes from confirmed_flush_lsn to current WAL)");
    row(out, "wal_status",
        (s.wal_status.empty() ? "-" : s.wal_status) +
            (s.invalidation_reason ? " (invalidation_reason " + *s.invalidation_reason + ")" : ""));
    std::string failover = !s.failover ? "- (PostgreSQL < 17)" : *s.failover ? "yes" : "no";
    if (s.synced.value_or(false)) {
      failover += s.in_recovery ? " (a synced copy, on this standby)"
                                : " (synced from the former primary: this server was promoted)";
    }
    row(out, "failover", failover);
    row(out, "safe_wal_size",
        s.safe_wal_size
            ? human_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(0, *s.safe_wal_size)))
            : "unlimited (max_slot_wal_keep_size = -1)");
    if (s.active) {
      row(out, "sent_lsn", lsn_text(s.sent_lsn));
      row(out, "flush_lsn", lsn_text(s.flush_lsn));
      row(out, "flush_lag", s.flush_lag.value_or("-"));
      row(out, "last_reply", s.reply_time.value_or("-"));
    }
  }
  if (progress) row(out, "progress_record", progress_text(*progress));
  if (backlog) out << format_backlog_text(*backlog);
  if (standby) {
    std::string copy;
    if (!standby->error.empty()) {
      copy = "unknown (" + standby->error + ")";
    } else if (!standby->slot) {
      copy = "none";
    } else {
      const auto& c = *standby->slot;
      copy = std::string(c.synced.value_or(false) ? "synced" : "not synced") + ", " +
             (c.temporary ? "temporary" : "persistent") + ", confirmed_flush_lsn " +
             lsn_text(c.confirmed_flush_lsn) +
             (c.invalidation_reason ? ", invalidated (" + *c.invalidation_reason + ")" : "");
    }
    row(out, "standby_copy", copy);
    row(out, "failover_ready", standby->ready() ? "yes" : "no");
  }
  if (h.healthy) {
    row(out, "health", "ok");
  } else {
    std::string text = "UNHEALTHY: ";
    for (std::size_t i = 0; i < h.problems.size(); ++i) {
      text += (i ? "; " : "") + h.problems[i];
    }
    row(out, "health", text);
  }
  return out.str();
}

std::string format_status_json(const std::string& name, const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained, const BacklogStatus* backlog,
                               const StandbyCopy* standby, const ProgressView* progress) {
  const SlotHealth h = assess_slot(slot, max_retained, backlog, standby, progress);
  auto json_bool = [](const std::optional<bool>& b) {
    return b ? std::string(*b ? "true" : "false") : std::string("null");
  };
  std::string o = "{\"slot\":" + common::quoted(name) + ",\"exists\":" + (slot ? "true" : "false");
  if (slot) {
    const auto& s = *slot;
    o += ",\"plugin\":" + common::quoted(s.plugin);
    o += ",\"slot_type\":" + common::quoted(s.slot_type);
    o += ",\"database\":" + common::quoted(s.database);
    o += std::string(",\"active\":") + (s.active ? "true" : "false");
    o += ",\"active_pid\":" + (s.active_pid ? std::to_string(*s.active_pid) : "null");
    o += ",\"confirmed_flush_lsn\":" + json_lsn(s.confirmed_flush_lsn);
    o += ",\"restart_lsn\":" + json_lsn(s.restart_lsn);
    o += ",\"current_wal_lsn\":" + common::quoted(s.current_wal_lsn.to_string());
    o += ",\"retained_wal_bytes\":" + std::to_string(s.retained_wal_bytes);
    o += ",\"lag_bytes\":" + std::to_string(s.confirmed_lag_bytes);
    o += ",\"wal_status\":" + (s.wal_status.empty() ? "null" : common::quoted(s.wal_status));
    o += ",\"safe_wal_size\":" + (s.safe_wal_size ? std::to_string(*s.safe_wal_size) : "null");
    o += ",\"client_addr\":" + json_opt(s.client_addr);
    o += ",\"application_name\":" + json_opt(s.application_name);
    o += ",\"replication_state\":" + json_opt(s.replication_state);
    o += ",\"sent_lsn\":" + json_lsn(s.sent_lsn);
    o += ",\"flush_lsn\":" + json_lsn(s.flush_lsn);
    o += ",\"flush_lag\":" + json_opt(s.flush_lag);
    o += ",\"reply_time\":" + json_opt(s.reply_time);
    o += ",\"failover\":" + json_bool(s.failover);
    o += ",\"synced\":" + json_bool(s.synced);
    o += ",\"invalidation_reason\":" + json_opt(s.invalidation_reason);
  }
  if (standby) {
    o += ",\"standby\":{\"ready\":" + std::string(standby->ready() ? "true" : "false");
    o += ",\"in_recovery\":" + std::string(standby->in_recovery ? "true" : "false");
    o += ",\"slot_exists\":" + std::string(standby->slot ? "true" : "false");
    if (standby->slot) {
      o += ",\"synced\":" + json_bool(standby->slot->synced);
      o += ",\"temporary\":" + std::string(standby->slot->temporary ? "true" : "false");
      o += ",\"confirmed_flush_lsn\":" + json_lsn(standby->slot->confirmed_flush_lsn);
    }
    o += "}";
  }
  if (progress) {
    const sinks::StoredProgress& r = progress->record;
    o += ",\"progress_record\":{\"where\":" + common::quoted(progress->where);
    o += ",\"key\":" + common::quoted(r.key);
    o += ",\"lsn\":" + json_lsn(r.lsn);
    o += ",\"timeline\":" + (r.timeline ? std::to_string(*r.timeline) : std::string("null"));
    o += ",\"error\":" + (r.error.empty() ? std::string("null") : common::quoted(r.error));
    o += ",\"bad_value\":" + (r.bad.empty() ? std::string("null") : common::quoted(r.bad));
    o += "}";
  }
  if (backlog) o += format_backlog_json_fields(*backlog);
  o += ",\"max_retained_bytes\":" + std::to_string(max_retained);
  o += std::string(",\"healthy\":") + (h.healthy ? "true" : "false");
  o += ",\"problems\":[";
  for (std::size_t i = 0; i < h.problems.size(); ++i) {
    o += (i ? "," : "") + common::quoted(h.problems[i]);
  }
  o += "]}\n";
  return o;
}

// Counts the pending outbox events from a copy of the slot (pg::SlotChangeScan). A failure to
// count is reported in the backlog, not thrown: the slot's own state is still worth printing.
BacklogStatus count_pending(const StatusOptions& o, const std::optional<pg::SlotInfo>& slot) {
  BacklogStatus b;
  b.scan_limit = o.scan_limit;
  b.max_pending = o.max_pending;
  b.max_age = o.max_age;
  if (!slot) {
    b.slot_missing = true;
    b.error = "slot " + pg::slot_missing_words();
    return b;
  }
  if (!pg::is_pgoutput_slot(slot->slot_type, slot->plugin)) {
    b.error = "slot " + pg::slot_not_pgoutput_words(slot->slot_type, slot->plugin);
    return b;
  }
  if (pg::is_lost_slot(slot->wal_status)) {
    b.error = "slot " + pg::slot_lost_words();
    return b;
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    pg::SlotChangeScan scan(o.conninfo);
    BacklogCounter counter(scan.table_relids(o.schema, o.table), o.schema, o.table);
    const pg::SlotScanResult r =
        scan.scan(o.slot, o.publication, o.scan_limit,
                  [&](pg::Lsn lsn, std::span<const std::byte> bytes) { counter.add(bytes, lsn); });
    b.count = counter.count();
    b.stopped_at_limit = r.limit_reached;
    b.scanned_upto = r.upto;
    b.server_now = r.server_now;
    b.scan_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  } catch (const pg::Error& e) {
    b.error = e.what();
  } catch (const BacklogDecodeError& e) {
    b.error = e.what();
  }
  return b;
}

int run_status(const StatusOptions& o, std::ostream& out, std::ostream& err) {
  try {
    pg::AdminSession db(o.conninfo);
    auto slot = db.slot(o.slot);
    const BacklogStatus backlog = count_pending(o, slot);
    std::optional<StandbyCopy> standby;
    // --standby; else, for a failover slot, each host of a multi-host --pg (the first in
    // recovery is the standby).
    const std::vector<std::string> targets = standby_targets(
        o.standby, slot && slot->failover.value_or(false) ? o.conninfo : std::string());
    if (!targets.empty()) standby = inspect_standbys(targets, o.slot);
    const StandbyCopy* copy = standby ? &*standby : nullptr;
    // Read after the slot: a relay confirming meanwhile moves the record first, never the slot.
    std::optional<ProgressView> progress;
    if (o.progress.where.given()) {
      const sinks::ProgressLocation where = located(o.progress.where, o.conninfo, o.schema);
      progress = ProgressView{
          where.where(),
          sinks::read_stored_progress(where, db.system_id(), o.slot, o.progress.timeout)};
    }
    const ProgressView* record = progress ? &*progress : nullptr;
    out << (o.json
                ? format_status_json(o.slot, slot, o.max_retained_bytes, &backlog, copy, record)
                : format_status_text(o.slot, slot, o.max_retained_bytes, &backlog, copy, record));
    return assess_slot(slot, o.max_retained_bytes, &backlog, copy, record).healthy ? 0 : 1;
  } catch (const pg::Error& e) {
    err << "outbox-relay status: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace outbox::lifecycle
