// The publication and the replication slot the relay streams from: found, created when missing
// (unless told not to), and refused when unusable. The relay runs this before every
// START_REPLICATION on its asynchronous replication connection; the setup command runs it on a
// blocking AdminSession (admin.hpp). Both run the same steps, decided here once.
//
// SlotBootstrap holds the decisions and no I/O: it names the next statement, reads its rows (or
// its error), and ends with a BootstrapResult. ensure_slot_and_publication() runs it on a
// connection. A refusal is returned, not thrown: each caller words it for its own users and picks
// its own exit code; an Error from the server is thrown.
//
// Also ReplicationStart: the START_REPLICATION command for the slot and the publication.
// Not thread-safe: a SlotBootstrap is used by one thread; the rest are plain values.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>

#include "outbox/pg/error.hpp"
#include "outbox/pg/publication_check.hpp"  // PublicationTarget, QuoteFn
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pg {

enum class BootstrapPart {
  kPublication,  // the publication only
  kSlot,         // the slot only
  kBoth,         // the publication, then the slot
};

struct BootstrapOptions {
  PublicationTarget target;  // the publication, and the table it is created for
  std::string slot;
  // Create what is missing; false (the relay's --no-create): refuse instead.
  bool create = true;
  // The caller streamed from this slot before, in this process: its absence is a loss, refused
  // even when `create` is set (a new slot would start after the events it missed).
  bool slot_was_held = false;
  BootstrapPart part = BootstrapPart::kBoth;
  // Create a missing slot as a failover slot (PostgreSQL 17+), which a standby with
  // sync_replication_slots = on keeps a synced copy of. An existing slot is taken as it is.
  bool failover = false;
};

// An existing slot as pg_replication_slots shows it.
struct SlotState {
  std::string slot_type;              // "logical" or "physical"
  std::optional<std::string> plugin;  // NULL for a physical slot
  std::string wal_status;             // reserved, extended, unreserved, lost ("" when NULL)
  std::optional<Lsn> confirmed_flush_lsn;
  bool active = false;
};

enum class BootstrapRefusal {
  kPublicationMissing,    // the publication does not exist and `create` is false
  kSlotMissing,           // the slot does not exist and `create` is false
  kSlotVanished,          // the slot does not exist and `slot_was_held`
  kSlotDroppedMeanwhile,  // another connection created it while we did (42710), then dropped it
  kSlotNotPgoutput,       // the slot exists but is physical or decodes with another plugin
  kSlotLost,              // the slot exists but was invalidated (wal_status lost)
};

struct BootstrapResult {
  bool created_publication = false;
  std::optional<Lsn> created_slot;  // set when this run created the slot: its consistent point
  std::optional<SlotState> slot;    // the slot found (not created), also when refused for it
  std::optional<BootstrapRefusal> refusal;  // set: the steps after the refused one did not run

  bool ok() const { return !refusal; }
};

// How a missing slot is created: CREATE_REPLICATION_SLOT ... NOEXPORT_SNAPSHOT needs a
// replication connection; pg_create_logical_replication_slot() works on a plain one.
enum class SlotCreation { kReplicationCommand, kSqlFunction };

class SlotBootstrap {
 public:
  enum class Step { kFindPublication, kCreatePublication, kFindSlot, kCreateSlot, kDone };

  SlotBootstrap(BootstrapOptions options, SlotCreation creation);

  Step step() const { return step_; }
  bool done() const { return step_ == Step::kDone; }
  // The statement of step() (not kDone), quoted with the functions of the connection it runs on.
  std::string sql(const QuoteFn& quote_literal, const QuoteFn& quote_identifier) const;
  // What step() does, to prefix its errors: "create replication slot S", ...
  std::string what() const;
  // The rows the statement returned. Throws Error::unexpected_reply on rows of another shape.
  void on_rows(const Rows& rows);
  // The statement failed. True when that answers the step (the slot was created meanwhile by
  // someone else: it is looked up again); false: the caller rethrows the error.
  bool on_error(const Error& error);

  const BootstrapResult& result() const { return result_; }

 private:
  void after_publication();

  BootstrapOptions options_;
  SlotCreation creation_;
  Step step_;
  bool raced_ = false;  // creating the slot failed with 42710
  BootstrapResult result_;
};

// Runs SlotBootstrap on `conn`, which must be a replication connection (connect(..., true)): a
// missing slot is created with CREATE_REPLICATION_SLOT ... NOEXPORT_SNAPSHOT. Each statement
// waits at most `timeout`. Throws Error as ReplicationConnection::exec() does.
boost::asio::awaitable<BootstrapResult> ensure_slot_and_publication(ReplicationConnection& conn,
                                                                    const BootstrapOptions& options,
                                                                    Duration timeout);

// The server a replication connection reached, asked before the relay streams.
struct ServerState {
  int version_num = 0;       // server_version_num, e.g. 180001
  bool in_recovery = false;  // a hot standby: the slot decodes there (PostgreSQL 16+), read-only
  // pg_postmaster_start_time(): with the system identifier, one running server. A server never
  // gives up WAL it wrote or replayed while it runs, also across its own promotion.
  std::string postmaster_start;
  std::string hot_standby_feedback;  // "on"/"off"
};

// Reads ServerState with one query on `conn` (a replication connection takes simple SQL).
boost::asio::awaitable<ServerState> inspect_server(ReplicationConnection& conn, Duration timeout);

// START_REPLICATION SLOT "slot" LOGICAL <start> (proto_version '1', publication_names '"pub"'):
// pgoutput's protocol version 1 (no streaming of transactions in progress), and the publication
// name quoted as an identifier inside a string literal, as pgoutput parses the option. The server
// starts at the greater of `start` and the slot's confirmed_flush_lsn, and skips transactions
// whose commit record begins before it (0/0: the slot's position). With `messages`, also
// messages 'true' (PostgreSQL 14+): logical decoding messages (pg_logical_emit_message) come too,
// transactional ones inside their transaction.
std::string start_replication_command(const std::string& slot, const std::string& publication,
                                      Lsn start, const QuoteFn& quote_literal,
                                      const QuoteFn& quote_identifier, bool messages = false);

}  // namespace outbox::pg
