#include "gap_repair.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/lifecycle/reconcile.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/slot_rules.hpp"
#include "outbox/sinks/progress_reader.hpp"

namespace outbox::app {

namespace {

// The last line of `text` that starts with `prefix`, or "".
std::string last_line(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) found = line;
  }
  return found;
}

// "schema.table" of every outbox table, comma-separated.
std::string table_list(const mapping::MapperConfig& m) {
  std::string out = common::QualifiedName{m.schema, m.table}.text();
  for (const auto& [schema, table] : m.more_tables) {
    out += "," + common::QualifiedName{schema, table}.text();
  }
  return out;
}

// Some outbox table holds a row whose `column` is at or before `epoch_ms`.
bool rows_remain_before(pg::AdminSession& db, const mapping::MapperConfig& m,
                        const std::string& column, std::int64_t epoch_ms) {
  std::vector<std::pair<std::string, std::string>> tables{{m.schema, m.table}};
  tables.insert(tables.end(), m.more_tables.begin(), m.more_tables.end());
  for (const auto& [schema, table] : tables) {
    const pg::Rows found =
        db.exec("SELECT EXISTS (SELECT 1 FROM " + db.quote_identifier(schema) + "." +
                    db.quote_identifier(table) + " WHERE " + db.quote_identifier(column) +
                    " <= to_timestamp($1::double precision / 1000))::text",
                {std::to_string(epoch_ms)});
    if (!found.empty() && found[0][0] == std::optional<std::string>("true")) return true;
  }
  return false;
}

}  // namespace

int repair_slot_gap(const Options& options, relay::RelayConfig& config) {
  using common::quoted;
  if (options.gap_repair_column.empty() || config.accept_slot_loss) return relay::kExitOk;
  try {
    pg::AdminSession db(config.conninfo);
    std::optional<pg::SlotInfo> slot = db.slot(config.slot);
    const auto& sqs = options.sinks.sqs;
    const auto& eventbridge = options.sinks.eventbridge;
    // SQS and EventBridge cannot be read back: the whole window is sent again.
    const bool resend = !sqs.queue_url.empty() || !eventbridge.bus.empty();
    const bool nats = !options.sinks.nats.urls.empty();
    const char* broker = !sqs.queue_url.empty()     ? "SQS"
                         : !eventbridge.bus.empty() ? "EventBridge"
                         : nats                     ? "JetStream"
                                                    : "Kafka";
    sinks::ProgressLocation where;
    if (resend) {
      sinks::ProgressTableName table = options.sinks.progress_table;
      if (table.schema.empty()) table.schema = config.mapper.schema;
      where.pg_table = table;
      where.pg_conninfo = config.conninfo;
    } else if (nats) {
      where.nats = options.sinks.nats;
      where.nats_bucket = options.sinks.nats_progress_bucket;
    } else {
      where.brokers = options.sinks.kafka.brokers;
      where.properties = options.sinks.kafka.properties;
      where.checkpoint_topic = config.checkpoint_topic;
    }
    const sinks::StoredProgress record =
        sinks::read_stored_progress(where, db.system_id(), config.slot, config.connect_timeout);
    if (!record.error.empty() || !record.lsn) return relay::kExitOk;  // the relay's check decides
    const std::string range_from = record.lsn->to_string();
    const bool lost = slot && pg::is_lost_slot(slot->wal_status);
    const bool missing = !slot || lost;
    const bool ahead =
        slot && slot->confirmed_flush_lsn && *slot->confirmed_flush_lsn > *record.lsn;
    if (!missing && !ahead) return relay::kExitOk;
    if (!record.written_ms || (missing && !config.create)) {
      spdlog::warn(
          "event=slot_gap_not_repaired slot={} recorded={} reason={}: the relay's check follows",
          config.slot, range_from,
          quoted(!record.written_ms ? "the progress record has no time"
                                    : "--no-create: the slot is not made here"));
      return relay::kExitOk;
    }
    // The rows of the gap must still be there. prune deletes by age, oldest first: while a row
    // at or before the record's time (delivered before the loss) remains, nothing younger was
    // pruned. None left: rows were deleted past the delivered ones (prune
    // --without-progress-record, the application), and the gap's may be gone too; the repair
    // would publish what is left and go on past the rest. Checked before anything is changed.
    const std::string recorded_at = lifecycle::format_utc(*record.written_ms * 1000);
    const std::string advised_since = lifecycle::format_utc(
        *record.written_ms * 1000 -
        std::chrono::duration_cast<std::chrono::microseconds>(options.gap_repair_margin).count());
    if (!rows_remain_before(db, config.mapper, options.gap_repair_column, *record.written_ms)) {
      const std::string range =
          ahead ? "between " + range_from + " and " + slot->confirmed_flush_lsn->to_string()
                : "after " + range_from;
      const std::string why = "no row of " + table_list(config.mapper) + " has " +
                              options.gap_repair_column + " at or before " + recorded_at +
                              ", when the progress record was written: rows delivered before the "
                              "loss were deleted (prune --without-progress-record, the "
                              "application), so rows of the gap may be gone too";
      spdlog::error("event=fatal slot={} error={}", config.slot,
                    quoted("the gap " + range + " cannot be repaired from the outbox: " + why));
      std::fprintf(stderr,
                   "outbox-relay: slot %s: the events committed %s (the progress record) may be "
                   "missing and cannot be repaired from the outbox: %s. Restore the rows if you "
                   "can and run outbox-relay reconcile --since '%s' --repair, then start once "
                   "with --accept-slot-loss\n",
                   config.slot.c_str(), range.c_str(), why.c_str(), advised_since.c_str());
      return relay::kExitSlotLost;
    }
    // An invalidated slot (max_slot_wal_keep_size, idle_replication_slot_timeout) can never
    // stream again: it goes, and a new one is made below.
    if (lost) {
      db.drop_slot(config.slot);
      spdlog::warn("event=dropped_lost_slot slot={} invalidation_reason={}", config.slot,
                   slot->invalidation_reason.value_or("-"));
    }
    // The new slot first: everything committed from its consistent point on is streamed by the
    // relay; the repair below covers what was committed before it.
    if (missing) {
      pg::BootstrapOptions bootstrap{{config.publication, config.mapper.schema, config.mapper.table,
                                      config.mapper.more_tables},
                                     config.slot,
                                     true};
      bootstrap.part = pg::BootstrapPart::kSlot;
      bootstrap.failover = options.failover;
      const pg::BootstrapResult made = db.ensure_slot_and_publication(bootstrap);
      if (made.created_slot) {
        spdlog::info("event=created_slot slot={} consistent_point={} for=gap_repair", config.slot,
                     made.created_slot->to_string());
      }
    }
    const std::int64_t until_us = std::stoll(
        db.exec("SELECT (extract(epoch FROM now()) * 1000000)::bigint::text").at(0).at(0).value());
    const std::int64_t since_us =
        *record.written_ms * 1000 -
        std::chrono::duration_cast<std::chrono::microseconds>(options.gap_repair_margin).count();

    lifecycle::ReconcileOptions r;
    r.conninfo = config.conninfo;
    r.brokers = options.sinks.kafka.brokers;
    r.mapper = config.mapper;
    r.column_time = options.gap_repair_column;
    r.since.epoch_us = since_us;
    r.since.text = lifecycle::format_utc(since_us);
    lifecycle::TimeBound until;
    until.epoch_us = until_us;
    until.text = lifecycle::format_utc(until_us);
    r.until = until;
    r.repair = true;
    r.properties = options.sinks.kafka.properties;
    if (nats) r.nats = options.sinks.nats;
    r.sqs = sqs;
    r.eventbridge = eventbridge;
    r.margin = options.gap_repair_margin;
    r.timeout = config.connect_timeout;
    spdlog::warn(
        "event=slot_gap_found slot={} recorded={} slot_confirmed={} since={} until={}: the "
        "slot was {} while the relay was down; publishing {} outbox rows of {} between those "
        "times {}, before streaming",
        config.slot, range_from,
        slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string() : "-",
        r.since.text, r.until->text, missing ? "dropped or lost" : "moved past the record",
        resend ? "every one of the" : "the", options.gap_repair_column,
        resend ? std::string("to ") + broker + " again (it cannot be read back: at-least-once)"
               : std::string("that ") + broker + " lacks");
    std::ostringstream out, err;
    const int rc = lifecycle::run_reconcile(r, out, err);
    const std::string summary = last_line(out.str(), "summary ");
    if (rc != 0) {
      const std::string why = last_line(err.str(), "");
      spdlog::error("event=fatal slot={} error={}", config.slot,
                    quoted("the gap after " + range_from + " could not be repaired: " + why));
      std::fprintf(stderr,
                   "outbox-relay: slot %s: the gap after %s (the progress record) could not be "
                   "repaired from the outbox (%s; %s). Run outbox-relay reconcile --since %s "
                   "--repair, then start once with --accept-slot-loss\n",
                   config.slot.c_str(), range_from.c_str(), why.c_str(), summary.c_str(),
                   r.since.text.c_str());
      return relay::kExitSlotLost;
    }
    config.gap_repaired = summary;
    return relay::kExitOk;
  } catch (const pg::Error& e) {
    // PostgreSQL away: the relay connects with backoff and its own check decides.
    spdlog::warn("event=slot_gap_check_failed slot={} error={}", config.slot, quoted(e.what()));
    return relay::kExitOk;
  }
}

}  // namespace outbox::app
