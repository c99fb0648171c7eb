#include "outbox/app/commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "outbox/app/logging.hpp"  // json_string
#include "outbox/nats/publisher.hpp"
#include "outbox/pg/slot_changes.hpp"
#include "outbox/relay/relay.hpp"  // exit codes

namespace outbox::app {
namespace {

std::string lsn_text(const std::optional<pg::Lsn>& lsn) { return lsn ? lsn->to_string() : "-"; }

std::string json_lsn(const std::optional<pg::Lsn>& lsn) {
  return lsn ? json_string(lsn->to_string()) : "null";
}

std::string json_opt(const std::optional<std::string>& s) { return s ? json_string(*s) : "null"; }

// One "name   value" line of the human report.
void row(std::ostream& out, std::string_view name, const std::string& value) {
  out << name;
  for (std::size_t i = name.size(); i < 22; ++i) out << ' ';
  out << value << '\n';
}

// Reports a pg::Error as "outbox-relay COMMAND: message" and returns exit code 1.
int fail(std::ostream& err, const char* command, const std::string& message) {
  err << "outbox-relay " << command << ": " << message << '\n';
  return 1;
}

// Setup's words for a publication or slot it cannot use (pg::SlotBootstrap decided).
std::string setup_refusal(const SetupOptions& o, const pg::BootstrapResult& r) {
  const std::string slot_type = r.slot ? r.slot->slot_type : "?";
  const std::string plugin = r.slot ? r.slot->plugin.value_or("") : "?";
  const std::optional<pg::Lsn> confirmed = r.slot ? r.slot->confirmed_flush_lsn : std::nullopt;
  switch (r.refusal.value()) {
    case pg::BootstrapRefusal::kPublicationMissing:
      return "publication " + o.publication + " does not exist";
    case pg::BootstrapRefusal::kSlotMissing:
      return "replication slot " + o.slot + " does not exist";
    case pg::BootstrapRefusal::kSlotVanished:
    case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
      return "replication slot " + o.slot + " vanished while set up";
    case pg::BootstrapRefusal::kSlotNotPgoutput:
      return "replication slot " + o.slot + " exists but is a " + slot_type + " slot with plugin " +
             plugin + ", not logical pgoutput (drop it or choose another --slot)";
    case pg::BootstrapRefusal::kSlotLost:
      return "replication slot " + o.slot +
             " exists but is lost (wal_status lost): drop it with `outbox-relay drop --yes` and "
             "run setup again, then reconcile outbox rows committed after " +
             lsn_text(confirmed);
  }
  return "replication slot " + o.slot + " cannot be used";
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
                       const BacklogStatus* backlog, const StandbyCopy* standby) {
  SlotHealth h;
  if (!slot) {
    h.problems.push_back("slot does not exist");
  } else {
    if (slot->wal_status == "lost") {
      h.problems.push_back(
          "slot is lost (wal_status lost): the WAL it needed was removed; events committed since "
          "its confirmed position were never relayed");
    }
    if (slot->slot_type != "logical" || slot->plugin != "pgoutput") {
      h.problems.push_back("slot is not a logical pgoutput slot (type " + slot->slot_type +
                           ", plugin " + slot->plugin + ")");
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
  h.healthy = h.problems.empty();
  return h;
}

std::string format_status_text(const std::string& name, const std::optional<pg::SlotInfo>& slot,
                               std::uint64_t max_retained, const BacklogStatus* backlog,
                               const StandbyCopy* standby) {
  std::ostringstream out;
  const SlotHealth h = assess_slot(slot, max_retained, backlog, standby);
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
                               const StandbyCopy* standby) {
  const SlotHealth h = assess_slot(slot, max_retained, backlog, standby);
  auto json_bool = [](const std::optional<bool>& b) {
    return b ? std::string(*b ? "true" : "false") : std::string("null");
  };
  std::string o = "{\"slot\":" + json_string(name) + ",\"exists\":" + (slot ? "true" : "false");
  if (slot) {
    const auto& s = *slot;
    o += ",\"plugin\":" + json_string(s.plugin);
    o += ",\"slot_type\":" + json_string(s.slot_type);
    o += ",\"database\":" + json_string(s.database);
    o += std::string(",\"active\":") + (s.active ? "true" : "false");
    o += ",\"active_pid\":" + (s.active_pid ? std::to_string(*s.active_pid) : "null");
    o += ",\"confirmed_flush_lsn\":" + json_lsn(s.confirmed_flush_lsn);
    o += ",\"restart_lsn\":" + json_lsn(s.restart_lsn);
    o += ",\"current_wal_lsn\":" + json_string(s.current_wal_lsn.to_string());
    o += ",\"retained_wal_bytes\":" + std::to_string(s.retained_wal_bytes);
    o += ",\"lag_bytes\":" + std::to_string(s.confirmed_lag_bytes);
    o += ",\"wal_status\":" + (s.wal_status.empty() ? "null" : json_string(s.wal_status));
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
  if (backlog) o += format_backlog_json_fields(*backlog);
  o += ",\"max_retained_bytes\":" + std::to_string(max_retained);
  o += std::string(",\"healthy\":") + (h.healthy ? "true" : "false");
  o += ",\"problems\":[";
  for (std::size_t i = 0; i < h.problems.size(); ++i) {
    o += (i ? "," : "") + json_string(h.problems[i]);
  }
  o += "]}\n";
  return o;
}

namespace {

// "2m", "90s", "1500ms".
std::string duration_text(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms > 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms > 0 && ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

// setup --nats-stream: the stream created, or an existing one checked, before the database is
// touched (a stream the relay cannot use leaves no slot retaining WAL behind). Exit code 1 and
// one line when it cannot be made or does not fit.
int setup_stream(const SetupOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> subjects = nats_stream_subjects(o.topic_template, o.dlq_subject);
  std::string listed;
  for (const std::string& s : subjects) listed += (listed.empty() ? "" : ", ") + s;
  const nats::StreamCheck r = nats::create_or_check_stream(
      o.nats, o.nats_stream, subjects, o.nats_duplicate_window, std::chrono::seconds(10));
  if (!r.error.empty()) return fail(err, "setup", r.error);
  out << "stream " << o.nats_stream << ": "
      << (r.created ? "created (file storage, subjects " : "exists, fits (captures ") << listed
      << ", duplicate window " << (r.created ? "" : "at least ")
      << duration_text(o.nats_duplicate_window) << ")\n";
  return 0;
}

}  // namespace

int run_setup(const SetupOptions& o, std::ostream& out, std::ostream& err) {
  const std::string table = o.schema + "." + o.table;
  if (!o.nats_stream.empty()) {
    if (const int code = setup_stream(o, out, err); code != 0) return code;
  }
  try {
    pg::AdminSession db(o.conninfo);
    const std::string wal_level = db.setting("wal_level");
    if (wal_level != "logical") {
      return fail(err, "setup",
                  "wal_level is " + wal_level +
                      ": logical replication needs wal_level = logical (ALTER SYSTEM SET "
                      "wal_level = logical, then restart PostgreSQL)");
    }
    // A hot standby (PostgreSQL 16+) can hold the relay's slot and decode, but is read-only:
    // the table, the publication and --messages' function and privileges are made on the
    // primary and reach the standby by replication. Only the slot is made here.
    const bool standby = db.exec("SELECT pg_is_in_recovery()").at(0).at(0).value_or("") == "t";
    const std::string on_standby =
        "this server is a standby (read-only): run outbox-relay setup against the primary "
        "first, then again against the standby to create the slot there";
    if (standby && db.server_version_num() < 160000) {
      return fail(err, "setup",
                  "this server is a standby, and logical decoding on a standby needs PostgreSQL "
                  "16 or later (this one is " +
                      db.server_version() + "): point --pg at the primary");
    }
    if (standby && !o.message_prefix.empty()) {
      return fail(err, "setup",
                  "--messages installs a function and changes privileges, and " + on_standby +
                      " (without --messages: the slot decodes messages too)");
    }
    if (o.failover) {
      // Refused rather than warned about: setup is where the configuration is made, and a
      // failover slot the primary does not protect publishes ghosts at a promotion.
      const FailoverCheck check = check_failover_primary(db, o.slot);
      if (!check.refusals.empty()) return fail(err, "setup", check.refusals.front());
      if (!check.unprotected.empty()) return fail(err, "setup", check.unprotected.front());
    }
    // --messages without --table: a relay of messages only needs no table.
    const bool messages_only = !o.message_prefix.empty() && !o.table_given;
    if (messages_only) {
      out << "table: none (--messages without --table: logical messages only)\n";
    } else if (db.table_exists(o.schema, o.table)) {
      out << "table " << table << ": exists\n";
    } else if (standby) {
      return fail(err, "setup", "table " + table + " does not exist, and " + on_standby);
    } else if (o.create_table) {
      db.create_outbox_table(o.schema, o.table);
      out << "table " << table
          << ": created (id uuid, aggregatetype, aggregateid, type, payload jsonb)\n";
    } else {
      return fail(err, "setup",
                  "table " + table + " does not exist (create it, or pass --create-table)");
    }
    if (!o.message_prefix.empty()) {
      db.create_emit_function(o.message_prefix);
      out << "function outbox.emit: installed (emits messages with prefix '" << o.message_prefix
          << "')\n";
      // pgoutput sends every message of the database whoever emitted it: only the writers may.
      const pg::AdminSession::EmitRestriction r = db.restrict_emit(o.message_writers);
      if (!r.still_public.empty()) {
        err << "outbox-relay setup: PUBLIC may still execute pg_logical_emit_message (taking it "
               "from PUBLIC needs a superuser), so any role that can connect could publish "
               "forged events and the relay refuses --messages; run as a superuser in this "
               "database, then setup again:\n";
        for (const std::string& sql : r.statements) err << "  " << sql << ";\n";
        return relay::kExitConfig;
      }
      std::string writers;
      for (const std::string& w : o.message_writers) writers += (writers.empty() ? "" : ", ") + w;
      out << "function pg_logical_emit_message: EXECUTE revoked from PUBLIC"
          << (writers.empty() ? std::string(" (no --message-writer: only superusers may emit)")
                              : ", granted to " + writers)
          << "\n";
    }

    // The same steps as the relay's before it streams (pg::SlotBootstrap): the publication, the
    // relay's check of it, then the slot, so that a refused publication leaves no slot behind.
    const pg::PublicationTarget target{
        o.publication, o.schema, messages_only ? "" : o.table, {}, !o.message_prefix.empty()};
    pg::BootstrapOptions bootstrap{target, o.slot};
    bootstrap.failover = o.failover;
    bootstrap.part = pg::BootstrapPart::kPublication;
    bootstrap.create = !standby;
    const pg::BootstrapResult pub = db.ensure_slot_and_publication(bootstrap);
    if (pub.refusal == pg::BootstrapRefusal::kPublicationMissing && standby) {
      return fail(err, "setup",
                  "publication " + o.publication + " does not exist, and " + on_standby);
    }
    if (pub.refusal) return fail(err, "setup", setup_refusal(o, pub));
    if (pub.created_publication && messages_only) {
      out << "publication " << o.publication
          << ": created (no tables: pgoutput needs one, messages need none)\n";
    } else if (pub.created_publication) {
      out << "publication " << o.publication << ": created (FOR TABLE " << table
          << ", inserts only, publish_via_partition_root)\n";
    } else {
      out << "publication " << o.publication << ": exists\n";
    }
    // The same check the relay makes before it streams.
    const pg::PublicationCheck check = db.check_publication(target);
    if (!check.ok()) {
      err << "outbox-relay setup: " << check.problem << '\n';
      return relay::kExitConfig;
    }
    if (!messages_only) {
      out << "publication " << o.publication << ": publishes every insert into " << table
          << (check.partitioned ? " (partitioned: " + std::to_string(check.tree_relids.size() - 1) +
                                      " partitions)"
                                : std::string())
          << "\n";
    }

    bootstrap.part = pg::BootstrapPart::kSlot;
    bootstrap.create = true;
    // On a standby the creation waits for the primary to log a running-transactions record
    // (about every 15 s while it writes; SELECT pg_log_standby_snapshot() there makes one now).
    if (standby) out << "slot " << o.slot << ": creating it on this standby\n" << std::flush;
    const pg::BootstrapResult slot = db.ensure_slot_and_publication(bootstrap);
    if (slot.refusal) return fail(err, "setup", setup_refusal(o, slot));
    if (slot.created_slot) {
      out << "slot " << o.slot << ": created (logical, pgoutput, "
          << (o.failover ? "failover, " : "") << "consistent point "
          << slot.created_slot->to_string() << ")\n";
      return 0;
    }
    out << "slot " << o.slot << ": exists (pgoutput, " << (o.failover ? "failover, " : "")
        << "confirmed_flush_lsn "
        << lsn_text(slot.slot ? slot.slot->confirmed_flush_lsn : std::nullopt) << ", "
        << (slot.slot && slot.slot->active ? "active" : "inactive") << ")\n";
    return 0;
  } catch (const pg::Error& e) {
    return fail(err, "setup", e.what());
  }
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
    b.error = "slot does not exist";
    return b;
  }
  if (slot->slot_type != "logical" || slot->plugin != "pgoutput") {
    b.error = "not a logical pgoutput slot";
    return b;
  }
  if (slot->wal_status == "lost") {
    b.error = "slot is lost";
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
    out << (o.json ? format_status_json(o.slot, slot, o.max_retained_bytes, &backlog, copy)
                   : format_status_text(o.slot, slot, o.max_retained_bytes, &backlog, copy));
    return assess_slot(slot, o.max_retained_bytes, &backlog, copy).healthy ? 0 : 1;
  } catch (const pg::Error& e) {
    return fail(err, "status", e.what());
  }
}

int run_drop(const DropOptions& o, std::ostream& out, std::ostream& err) {
  try {
    pg::AdminSession db(o.conninfo);
    auto slot = db.slot(o.slot);
    auto pub = db.publication(o.publication);
    if (!o.yes) {
      if (slot) {
        out << "would drop slot " << o.slot << " (" << (slot->active ? "active" : "inactive")
            << ", confirmed_flush_lsn " << lsn_text(slot->confirmed_flush_lsn) << ", retains "
            << human_bytes(slot->retained_wal_bytes) << " of WAL)\n";
      }
      if (pub) out << "would drop publication " << o.publication << "\n";
      return fail(err, "drop",
                  "refusing to drop slot " + o.slot + " and publication " + o.publication +
                      " without --yes: events committed and not yet relayed would never be "
                      "relayed");
    }
    if (!slot) {
      out << "slot " << o.slot << ": does not exist\n";
    } else if (slot->active) {
      return fail(err, "drop",
                  "replication slot " + o.slot + " is in use by PID " +
                      (slot->active_pid ? std::to_string(*slot->active_pid) : "?") +
                      ": stop the relay first");
    } else {
      db.drop_slot(o.slot);
      out << "slot " << o.slot << ": dropped (was at confirmed_flush_lsn "
          << lsn_text(slot->confirmed_flush_lsn) << ")\n";
    }
    if (!pub) {
      out << "publication " << o.publication << ": does not exist\n";
    } else {
      db.drop_publication(o.publication);
      out << "publication " << o.publication << ": dropped\n";
    }
    return 0;
  } catch (const pg::Error& e) {
    return fail(err, "drop", e.what());
  }
}

}  // namespace outbox::app
