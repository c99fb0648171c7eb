#include "outbox/lifecycle/prune.hpp"

#include <chrono>
#include <optional>
#include <ostream>
#include <thread>

#include "outbox/common/qualified_name.hpp"
#include "outbox/lifecycle/backlog.hpp"  // human_duration
#include "outbox/pg/admin.hpp"
#include "outbox/pg/prune.hpp"
#include "outbox/pg/slot_rules.hpp"

namespace outbox::lifecycle {

std::string prune_refusal(const std::string& name, const PruneSlotView& s) {
  const std::string refuse = "refusing to prune: replication slot " + name;
  if (!s.exists) {
    return refuse + " " + pg::slot_missing_words() +
           ", so nothing tells which outbox rows were relayed (give the relay's "
           "--slot)";
  }
  if (!pg::is_pgoutput_slot(s.slot_type, s.plugin)) {
    return refuse + " " + pg::slot_not_pgoutput_words(s.slot_type, s.plugin);
  }
  if (s.database != s.current_database) {
    return refuse + " belongs to database " + s.database + ", not " + s.current_database +
           " (connect --pg to the outbox's database)";
  }
  if (pg::is_lost_slot(s.wal_status)) {
    return refuse + " " + pg::slot_lost_words() + ": " + pg::slot_lost_consequence() +
           "; reconcile them first";
  }
  if (s.catalog_xmin.empty()) {
    return refuse + " has no catalog_xmin yet (still being created?): nothing is confirmed";
  }
  return "";
}

std::string progress_refusal(const std::string& name,
                             const std::optional<pgoutput::Lsn>& slot_confirmed,
                             const sinks::StoredProgress& record, const std::string& where) {
  const std::string refuse = "refusing to prune: ";
  const std::string in = " (" + where + ", key " + record.key + ")";
  if (!record.error.empty()) {
    return refuse + "cannot read the relay's progress record of slot " + name + in + ": " +
           record.error;
  }
  if (!record.bad.empty()) {
    return refuse + "the progress record of slot " + name + in + " holds \"" + record.bad +
           "\", not a WAL position";
  }
  if (!record.lsn) {
    return refuse + "no progress record of slot " + name + in +
           ": nothing shows what the relay delivered through this slot (give the relay's "
           "--checkpoint-topic, --nats-progress-bucket or --progress-table; the relay writes the "
           "record as it confirms)";
  }
  if (slot_confirmed && *slot_confirmed > *record.lsn) {
    return refuse + "slot " + name + " is confirmed through " + slot_confirmed->to_string() +
           ", past the relay's progress record " + record.lsn->to_string() + in +
           ": the slot was made anew or moved by another client, and the events committed "
           "between may never have been delivered; their rows are the only copy. Repair them "
           "(outbox-relay reconcile --since ... --repair; with SQS or EventBridge send them "
           "again: docs/aws.md), then start the relay once with --accept-slot-loss, which moves "
           "the record to the slot";
  }
  return "";
}

std::string time_column_refusal(const std::string& table, const std::string& column,
                                const std::optional<std::string>& type) {
  if (!type) {
    return "refusing to prune: table " + table + " has no column " + column +
           " (--column-time): the retention is measured on a timestamp column of the outbox; add "
           "one (e.g. " +
           column + " timestamptz NOT NULL DEFAULT now()) or name yours with --column-time";
  }
  if (*type != "timestamp with time zone" && *type != "timestamp without time zone" &&
      *type != "date") {
    return "refusing to prune: column " + column + " of table " + table + " is of type " + *type +
           ", not a timestamp (--column-time)";
  }
  return "";
}

int run_prune(const PruneOptions& o, std::ostream& out, std::ostream& err) {
  const std::string table = common::QualifiedName{o.schema, o.table}.text();
  auto fail = [&](const std::string& message) {
    err << "outbox-relay prune: " << message << '\n';
    return 1;
  };
  try {
    pg::AdminSession db(o.conninfo);
    pg::PruneQueries q(db, o.slot, o.column_time);

    const auto slot = q.slot();
    PruneSlotView view;
    if (slot) {
      view = {true,           slot->slot_type,        slot->plugin,      slot->wal_status,
              slot->database, slot->current_database, slot->catalog_xmin};
    }
    if (auto why = prune_refusal(o.slot, view); !why.empty()) return fail(why);

    if (auto why = time_column_refusal(table, o.column_time, q.column_type(o.schema, o.table));
        !why.empty()) {
      return fail(why);
    }
    if (o.without_progress_record) {
      err << "outbox-relay prune: warning: --without-progress-record: slot " << o.slot
          << " is trusted alone; a slot made anew after a loss would let rows never delivered "
             "be deleted\n";
    } else {
      const sinks::ProgressLocation where = located(o.progress.where, o.conninfo, o.schema);
      const sinks::StoredProgress record =
          sinks::read_stored_progress(where, db.system_id(), o.slot, o.progress.timeout);
      if (auto why = progress_refusal(o.slot, slot->confirmed_flush_lsn, record, where.where());
          !why.empty()) {
        return fail(why);
      }
      out << "progress record of slot " << o.slot << " (" << where.where()
          << "): " << record.lsn->to_string() << ", slot confirmed through "
          << (slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string() : "-") << "\n";
    }
    const std::string cutoff = q.cutoff(o.older_than);
    const std::vector<pg::OutboxPart> parts = q.parts(o.schema, o.table, cutoff);
    out << (o.dry_run ? "dry run: " : "") << "prune " << table << ": rows with " << o.column_time
        << " before " << cutoff << " inserted by transactions older than catalog_xmin "
        << slot->catalog_xmin << " of slot " << o.slot << " (confirmed_flush_lsn "
        << (slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string() : "-") << ")\n";

    std::uint64_t deleted = 0, would_delete = 0, kept = 0, dropped = 0, dropped_rows = 0;
    for (const auto& part : parts) {
      const std::string name = common::QualifiedName{part.schema, part.name}.text();
      const std::string what = part.is_partition ? "partition " + name : "table " + name;
      const pg::PartCounts c = q.count(part, cutoff);
      kept += c.unconfirmed;
      const std::string kept_text =
          c.unconfirmed ? "; kept " + std::to_string(c.unconfirmed) +
                              " older than the retention but not certainly confirmed"
                        : "";

      const bool all_prunable = part.is_partition && c.rows > 0 && c.prunable == c.rows;
      if (all_prunable && !part.closed_before_cutoff) {
        out << what << ": all " << c.rows << " rows prunable, but not dropped: it is not a range "
            << "partition on " << o.column_time << " ending before the cutoff (new rows could "
            << "still belong to it)\n";
      }
      if (all_prunable && part.closed_before_cutoff) {
        if (o.dry_run) {
          out << what << ": would drop (" << c.rows << " rows, all prunable)\n";
          ++dropped;
          dropped_rows += c.rows;
          continue;
        }
        std::uint64_t rows = 0;
        switch (q.drop_if_all_prunable(part, cutoff, rows)) {
          case pg::DropResult::kDropped:
            out << what << ": dropped (" << rows
                << " rows, all confirmed by the slot and older than the retention)\n";
            ++dropped;
            dropped_rows += rows;
            continue;
          case pg::DropResult::kNotAllPrunable:
            out << what
                << ": not dropped (rows arrived since it was counted); deleting row by row\n";
            break;
          case pg::DropResult::kBusy:
            out << what << ": not dropped (lock not granted within 1s, or the check took over 2s); "
                << "deleting row by row\n";
            break;
        }
      }

      if (o.dry_run) {
        out << what << ": would delete " << c.prunable << " of " << c.rows << " rows" << kept_text
            << "\n";
        would_delete += c.prunable;
        continue;
      }
      if (c.prunable == 0) {
        out << what << ": nothing to delete (" << c.rows << " rows" << kept_text << ")\n";
        continue;
      }
      std::string cursor;
      std::uint64_t part_deleted = 0, batches = 0;
      const auto started = std::chrono::steady_clock::now();
      for (;;) {
        const pg::BatchResult b = q.delete_batch(part, cutoff, cursor, o.batch);
        if (b.selected == 0) break;
        ++batches;
        part_deleted += b.deleted;
        out << "  " << name << " batch " << batches << ": deleted " << b.deleted << " rows\n";
        if (b.selected < o.batch) break;  // the scan reached the end of the table
        cursor = b.last_ctid;
        // Lets vacuum, replication and the application's own writes through between batches.
        std::this_thread::sleep_for(o.pause);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      out << what << ": deleted " << part_deleted << " of " << c.rows << " rows in " << batches
          << " batches of at most " << o.batch << " (" << human_duration(seconds) << ")"
          << kept_text << "\n";
      deleted += part_deleted;
    }
    if (o.dry_run) {
      out << "total: would delete " << would_delete << " rows and drop " << dropped
          << " partitions (" << dropped_rows << " rows); " << kept
          << " rows older than the retention kept (not certainly confirmed)\n";
    } else {
      out << "total: deleted " << deleted << " rows, dropped " << dropped << " partitions ("
          << dropped_rows << " rows); " << kept
          << " rows older than the retention kept (not certainly confirmed)\n";
    }
    if (kept > 0) {
      out << "note: the slot's catalog_xmin is " << slot->catalog_xmin_age
          << " transactions old; it advances as the relay confirms, held back by the oldest "
             "transaction running anywhere on the server\n";
    }
    return 0;
  } catch (const pg::Error& e) {
    return fail(table + ": " + e.what());
  }
}

}  // namespace outbox::lifecycle
