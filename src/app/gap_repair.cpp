#include "gap_repair.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "outbox/common/log_text.hpp"
#include "outbox/lifecycle/reconcile.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/slot_rules.hpp"
#include "outbox/relay/progress_reader.hpp"

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

}  // namespace

int repair_slot_gap(const Options& options, relay::RelayConfig& config) {
  using common::quoted;
  if (options.gap_repair_column.empty() || config.accept_slot_loss) return relay::kExitOk;
  try {
    pg::AdminSession db(config.conninfo);
    std::optional<pg::SlotInfo> slot = db.slot(config.slot);
    relay::ProgressLocation where;
    where.brokers = config.producer.brokers;
    where.properties = config.producer.properties;
    where.checkpoint_topic = config.checkpoint_topic;
    const relay::StoredProgress record =
        relay::read_stored_progress(where, db.system_id(), config.slot, config.connect_timeout);
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
    r.brokers = config.producer.brokers;
    r.mapper = config.mapper;
    r.column_time = options.gap_repair_column;
    r.since.epoch_us = since_us;
    r.since.text = lifecycle::format_utc(since_us);
    lifecycle::TimeBound until;
    until.epoch_us = until_us;
    until.text = lifecycle::format_utc(until_us);
    r.until = until;
    r.repair = true;
    r.properties = config.producer.properties;
    r.margin = options.gap_repair_margin;
    r.timeout = config.connect_timeout;
    spdlog::warn(
        "event=slot_gap_found slot={} recorded={} slot_confirmed={} since={} until={}: the "
        "slot was {} while the relay was down; publishing the outbox rows of {} between those "
        "times that Kafka lacks, before streaming",
        config.slot, range_from,
        slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string() : "-",
        r.since.text, r.until->text, missing ? "dropped or lost" : "moved past the record",
        options.gap_repair_column);
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
