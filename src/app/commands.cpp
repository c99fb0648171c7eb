#include "outbox/app/commands.hpp"

#include <chrono>
#include <ostream>

#include "outbox/aws/setup_check.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/lifecycle/failover.hpp"  // check_failover_primary
#include "outbox/lifecycle/status.hpp"    // human_bytes, lsn_text
#include "outbox/nats/publisher.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/progress_table.hpp"
#include "outbox/pg/slot_rules.hpp"
#include "outbox/relay/relay.hpp"  // exit codes

namespace outbox::app {
namespace {

using lifecycle::lsn_text;

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
      return "replication slot " + o.slot + " " + pg::slot_missing_words();
    case pg::BootstrapRefusal::kSlotVanished:
    case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
      return "replication slot " + o.slot + " vanished while set up";
    case pg::BootstrapRefusal::kSlotNotPgoutput:
      return "replication slot " + o.slot + " exists but " +
             pg::slot_not_pgoutput_words(slot_type, plugin) + " (drop it or choose another --slot)";
    case pg::BootstrapRefusal::kSlotLost:
      return "replication slot " + o.slot + " exists but " + pg::slot_lost_words() +
             ": drop it with `outbox-relay drop --yes` and "
             "run setup again, then reconcile outbox rows committed after " +
             lsn_text(confirmed);
  }
  return "replication slot " + o.slot + " cannot be used";
}

}  // namespace

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

// setup --sqs / --eventbridge: the queue or bus checked in the account before the database is
// touched (a queue that does not exist leaves no slot retaining WAL behind); nothing is created
// there. Exit code 1 and one line when it does not exist, cannot be read or does not answer; a
// standard queue is a warning.
int setup_aws(const SetupOptions& o, std::ostream& out, std::ostream& err) {
  constexpr std::chrono::seconds kTimeout{10};
  aws::SetupCheck check;
  try {
    check = o.sqs.queue_url.empty()
                ? aws::check_eventbridge_setup(o.eventbridge, aws::process_environment(), kTimeout)
                : aws::check_sqs_setup(o.sqs, aws::process_environment(), kTimeout);
  } catch (const aws::SqsConfigError& e) {
    err << "outbox-relay: SQS configuration (--sqs, --aws-*): " << e.what() << '\n';
    return relay::kExitUsage;
  } catch (const aws::EventBridgeConfigError& e) {
    err << "outbox-relay: EventBridge configuration (--eventbridge*, AWS_*): " << e.what() << '\n';
    return relay::kExitUsage;
  } catch (const aws::CredentialsError& e) {
    return fail(err, "setup", std::string("AWS credentials: ") + e.what());
  }
  for (const std::string& line : check.lines) out << line << '\n';
  for (const std::string& w : check.warnings) err << "outbox-relay setup: warning: " << w << '\n';
  if (!check.error.empty()) return fail(err, "setup", check.error);
  out << std::flush;
  return 0;
}

}  // namespace

int run_setup(const SetupOptions& o, std::ostream& out, std::ostream& err) {
  const std::string table = common::QualifiedName{o.schema, o.table}.text();
  if (!o.nats_stream.empty()) {
    if (const int code = setup_stream(o, out, err); code != 0) return code;
  }
  if (!o.sqs.queue_url.empty() || !o.eventbridge.bus.empty()) {
    if (const int code = setup_aws(o, out, err); code != 0) return code;
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
      const lifecycle::FailoverCheck check = lifecycle::check_failover_primary(db, o.slot);
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
          << ": created (id uuid, aggregatetype, aggregateid, type, payload jsonb, "
             "created_at timestamptz)\n";
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

    if (o.progress_table) {
      // The table of the relay's progress record with SQS and EventBridge (pg/progress_table.hpp).
      const std::string schema =
          o.progress_table->schema.empty() ? o.schema : o.progress_table->schema;
      const std::string name = common::QualifiedName{schema, o.progress_table->table}.text();
      if (db.table_exists(schema, o.progress_table->table)) {
        out << "progress table " << name << ": exists\n";
      } else if (standby) {
        return fail(err, "setup", "progress table " + name + " does not exist, and " + on_standby);
      } else {
        db.exec(pg::progress_table_sql(db.quote_identifier(schema),
                                       db.quote_identifier(o.progress_table->table)));
        out << "progress table " << name
            << ": created (key text, position text, written_at timestamptz); the relay's role "
               "needs SELECT, INSERT and UPDATE on it\n";
      }
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

int run_drop(const DropOptions& o, std::ostream& out, std::ostream& err) {
  try {
    pg::AdminSession db(o.conninfo);
    auto slot = db.slot(o.slot);
    auto pub = db.publication(o.publication);
    if (!o.yes) {
      if (slot) {
        out << "would drop slot " << o.slot << " (" << (slot->active ? "active" : "inactive")
            << ", confirmed_flush_lsn " << lsn_text(slot->confirmed_flush_lsn) << ", retains "
            << lifecycle::human_bytes(slot->retained_wal_bytes) << " of WAL)\n";
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
                  "replication slot " + o.slot + " " + pg::slot_in_use_words(slot->active_pid) +
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
