#include "outbox/pg/bootstrap.hpp"

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "outbox/common/qualified_name.hpp"
#include "outbox/pg/slot_rules.hpp"

namespace outbox::pg {
namespace {

std::string rows_shape(const Rows& rows) {
  std::string s = std::to_string(rows.size()) + (rows.size() == 1 ? " row" : " rows");
  if (!rows.empty()) s += " of " + std::to_string(rows[0].size()) + " columns";
  return s;
}

}  // namespace

SlotBootstrap::SlotBootstrap(BootstrapOptions options, SlotCreation creation)
    : options_(std::move(options)),
      creation_(creation),
      step_(options_.part == BootstrapPart::kSlot ? Step::kFindSlot : Step::kFindPublication) {}

std::string SlotBootstrap::sql(const QuoteFn& quote_literal,
                               const QuoteFn& quote_identifier) const {
  switch (step_) {
    case Step::kFindPublication:
      return "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = " +
             quote_literal(options_.target.publication);
    case Step::kCreatePublication:
      return create_publication_sql(options_.target, quote_identifier);
    case Step::kFindSlot:
      return "SELECT slot_type, plugin, wal_status, confirmed_flush_lsn::text, active "
             "FROM pg_catalog.pg_replication_slots WHERE slot_name = " +
             quote_literal(options_.slot);
    case Step::kCreateSlot:
      switch (creation_) {
        case SlotCreation::kReplicationCommand:
          // FAILOVER exists only in the option-list syntax (PostgreSQL 17+), where SNAPSHOT
          // 'nothing' is NOEXPORT_SNAPSHOT.
          if (options_.failover) {
            return "CREATE_REPLICATION_SLOT " + quote_identifier(options_.slot) +
                   " LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER)";
          }
          return "CREATE_REPLICATION_SLOT " + quote_identifier(options_.slot) +
                 " LOGICAL pgoutput NOEXPORT_SNAPSHOT";
        case SlotCreation::kSqlFunction:
          // (slot, plugin, temporary, twophase, failover): the fifth argument is PostgreSQL 17's.
          return "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot(" +
                 quote_literal(options_.slot) + ", 'pgoutput'" +
                 (options_.failover ? ", false, false, true)" : ")");
      }
      break;
    case Step::kDone:
      break;
  }
  throw std::logic_error("SlotBootstrap::sql() called when done");
}

std::string SlotBootstrap::what() const {
  const auto& t = options_.target;
  switch (step_) {
    case Step::kFindPublication:
      return "inspect publication " + t.publication;
    case Step::kCreatePublication:
      if (t.table.empty()) return "create publication " + t.publication + " (no tables)";
      return "create publication " + t.publication + " for table " +
             common::QualifiedName{t.schema, t.table}.text();
    case Step::kFindSlot:
      return "inspect replication slot " + options_.slot;
    case Step::kCreateSlot:
      return "create replication slot " + options_.slot;
    case Step::kDone:
      break;
  }
  return "set up replication slot " + options_.slot;
}

void SlotBootstrap::after_publication() {
  step_ = options_.part == BootstrapPart::kPublication ? Step::kDone : Step::kFindSlot;
}

void SlotBootstrap::on_rows(const Rows& rows) {
  switch (step_) {
    case Step::kFindPublication:
      if (!rows.empty()) {
        after_publication();
      } else if (!options_.create) {
        result_.refusal = BootstrapRefusal::kPublicationMissing;
        step_ = Step::kDone;
      } else {
        step_ = Step::kCreatePublication;
      }
      return;
    case Step::kCreatePublication:
      result_.created_publication = true;
      after_publication();
      return;
    case Step::kFindSlot: {
      if (rows.empty()) {
        step_ = Step::kDone;
        // A slot we streamed from is gone: a new one would start after the events it missed.
        if (options_.slot_was_held) {
          result_.refusal = BootstrapRefusal::kSlotVanished;
        } else if (raced_) {
          result_.refusal = BootstrapRefusal::kSlotDroppedMeanwhile;
        } else if (!options_.create) {
          result_.refusal = BootstrapRefusal::kSlotMissing;
        } else {
          step_ = Step::kCreateSlot;
        }
        return;
      }
      if (rows.size() != 1 || rows[0].size() != 5 || !rows[0][0] || !rows[0][4]) {
        throw Error::unexpected_reply(what(),
                                      "one row of slot_type, plugin, wal_status, "
                                      "confirmed_flush_lsn, active",
                                      rows_shape(rows));
      }
      const Row& r = rows[0];
      SlotState s;
      s.slot_type = *r[0];
      s.plugin = r[1];
      s.wal_status = r[2].value_or("");
      if (r[3]) {
        s.confirmed_flush_lsn = Lsn::parse(*r[3]);
        if (!s.confirmed_flush_lsn) {
          throw Error::unexpected_reply(what(), "a confirmed_flush_lsn such as 0/16B3748",
                                        "'" + *r[3] + "'");
        }
      }
      s.active = *r[4] == "t";
      step_ = Step::kDone;
      if (!is_pgoutput_slot(s.slot_type, s.plugin.value_or(""))) {
        result_.refusal = BootstrapRefusal::kSlotNotPgoutput;
      } else if (is_lost_slot(s.wal_status)) {
        result_.refusal = BootstrapRefusal::kSlotLost;
      }
      result_.slot = std::move(s);
      return;
    }
    case Step::kCreateSlot: {
      // CREATE_REPLICATION_SLOT: slot_name, consistent_point, snapshot_name, output_plugin.
      const std::size_t column = creation_ == SlotCreation::kReplicationCommand ? 1 : 0;
      std::optional<Lsn> at;
      if (rows.size() == 1 && rows[0].size() > column && rows[0][column]) {
        at = Lsn::parse(*rows[0][column]);
      }
      if (!at) {
        throw Error::unexpected_reply(what(), "one row with the consistent point",
                                      rows_shape(rows));
      }
      result_.created_slot = at;
      step_ = Step::kDone;
      return;
    }
    case Step::kDone:
      break;
  }
  throw std::logic_error("SlotBootstrap::on_rows() called when done");
}

bool SlotBootstrap::on_error(const Error& error) {
  // Created meanwhile (by a relay starting at the same time): check the one that exists.
  if (step_ == Step::kCreateSlot && !raced_ && classify(error) == ErrorKind::kAlreadyExists) {
    raced_ = true;
    step_ = Step::kFindSlot;
    return true;
  }
  return false;
}

boost::asio::awaitable<BootstrapResult> ensure_slot_and_publication(ReplicationConnection& conn,
                                                                    const BootstrapOptions& options,
                                                                    Duration timeout) {
  SlotBootstrap b(options, SlotCreation::kReplicationCommand);
  const QuoteFn literal = [&](const std::string& v) { return conn.quote_literal(v); };
  const QuoteFn identifier = [&](const std::string& v) { return conn.quote_identifier(v); };
  while (!b.done()) {
    std::optional<Rows> rows;
    try {
      rows = co_await conn.exec(b.sql(literal, identifier), timeout);
    } catch (const Error& e) {
      if (!b.on_error(e)) throw;
    }
    if (rows) b.on_rows(*rows);
  }
  co_return b.result();
}

boost::asio::awaitable<ServerState> inspect_server(ReplicationConnection& conn, Duration timeout) {
  static const std::string what = "inspect the server";
  const Rows rows = co_await conn.exec(
      "SELECT current_setting('server_version_num'), pg_catalog.pg_is_in_recovery()::text, "
      "pg_catalog.pg_postmaster_start_time()::text, current_setting('hot_standby_feedback')",
      timeout);
  if (rows.size() != 1 || rows[0].size() != 4 || !rows[0][0] || !rows[0][1] || !rows[0][2]) {
    throw Error::unexpected_reply(what, "one row of 4 columns", rows_shape(rows));
  }
  ServerState s;
  s.version_num = std::atoi(rows[0][0]->c_str());
  s.in_recovery = *rows[0][1] == "true";
  s.postmaster_start = *rows[0][2];
  s.hot_standby_feedback = rows[0][3].value_or("");
  co_return s;
}

std::string start_replication_command(const std::string& slot, const std::string& publication,
                                      Lsn start, const QuoteFn& quote_literal,
                                      const QuoteFn& quote_identifier, bool messages) {
  return "START_REPLICATION SLOT " + quote_identifier(slot) + " LOGICAL " + start.to_string() +
         " (proto_version '1', publication_names " + quote_literal(quote_identifier(publication)) +
         (messages ? ", messages 'true'" : "") + ")";
}

}  // namespace outbox::pg
