// The decisions of the relay's session that need no I/O, as pure functions of what the session
// knows (DESIGN.md "The one rule"): the comparison of an existing slot with the progress record
// (progress_check.hpp runs it at every start and reconnect), how far the slot may be told while
// the relay records its progress, the stop sequence's choices (stop_sequence.hpp), where a
// session's stream starts (session.hpp) and the answers to the sink's reports (sink_reports.hpp).
// Standard library and LSNs only: unit-tested in tests/unit/relay/session_rules_test.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

// ---- the slot against the progress record ------------------------------------------------

// What a session read of an existing slot, its server and the progress record.
struct RecordFacts {
  std::optional<pgoutput::Lsn> recorded;         // the record's position; none: a first start
  std::optional<std::uint32_t> record_timeline;  // the timeline the record names, if any
  pgoutput::Lsn slot_confirmed;                  // the slot's confirmed_flush_lsn (0 when NULL)
  pgoutput::Lsn server_wal_end;                  // IDENTIFY_SYSTEM's xlogpos
  std::uint32_t server_timeline = 0;
  bool on_standby = false;  // decoding on a hot standby: its WAL end says nothing of a restore
};

enum class RecordVerdict {
  kNoRecord,      // nothing recorded: a first start (a bad value waits for the slot's creation)
  kAgrees,        // the slot is not ahead of the record, and the server's WAL reaches it
  kServerBehind,  // the server's WAL ends before the record on the record's timeline (a restore)
  kSlotAhead,     // the slot is confirmed past the record: moved by another client, or made anew
};

// The relay confirms the slot only through positions its record holds, so a slot ahead of the
// record, or a server whose WAL ends before it on its timeline, is a loss. The server's check
// comes first: a restored server's slot says nothing.
RecordVerdict compare_with_record(const RecordFacts& facts);

// How far the slot may be told, at-least-once with a progress record (records_progress).
struct SlotBound {
  bool records_progress = false;  // at-least-once with a progress store
  bool verified = false;          // the slot was compared with the record this session
  pgoutput::Lsn session_from;     // the slot's confirmed position when the session began
  pgoutput::Lsn record_acked;     // the last record the store acknowledged (or read at start)
};

// The confirmable position, not past the last record stored; and until the slot was compared
// with the record, not past where the session found it: a record ahead of the server's WAL (a
// restore) bounds nothing, and a keepalive or the stop would otherwise confirm the slot past
// the loss the comparison is about to name.
pgoutput::Lsn slot_confirm_bound(pgoutput::Lsn confirmable, const SlotBound& bound);

// ---- the stop sequence ---------------------------------------------------------------------

// Exactly-once's open transaction at the end of a session that stops or fails.
enum class TxnEnd { kLeave, kCommit, kAbort };
struct TxnAtEnd {
  bool open = false;            // a broker transaction is open
  bool failed = false;          // the relay failed
  bool rewinding = false;       // the Pipeline rewinds
  bool commit_due = false;      // Transactions::commit_due(true): whole PostgreSQL transactions
  std::size_t records = 0;      // records in the open transaction
  bool in_transaction = false;  // the Pipeline is inside a PostgreSQL transaction
};
// Whole PostgreSQL transactions commit; a part of one is aborted and sent again next time.
TxnEnd transaction_at_end(const TxnAtEnd& t);

// The final publication check: a stop, or a poison event (exit 3), with acknowledged
// transactions past the last check that passed; never while rewinding, nor after any other
// failure (a publication problem, exit 5).
bool final_check_wanted(bool stopping, bool poison, bool rewinding, bool waiting_for_check);

// At the relay's end (not a rewind's session), at-least-once: whether the last confirmable
// position is recorded before the final confirmation (not when the broker refused the relay).
bool progress_flush_wanted(bool records_progress, bool broker_refused, bool ending,
                           pgoutput::Lsn target, pgoutput::Lsn record_acked);

// ---- a session's start -------------------------------------------------------------------

// Where START_REPLICATION asks the server to start: the acknowledged prefix when what the broker
// acknowledged is in this server's WAL unchanged (`history_continues`) and not past its end
// (IDENTIFY_SYSTEM's xlogpos); otherwise 0/0, the slot's own confirmed position. The server
// starts at the greater of the two.
pgoutput::Lsn stream_start(bool history_continues, pgoutput::Lsn acknowledged,
                           pgoutput::Lsn server_wal_end);

// ---- the sink's reports --------------------------------------------------------------------

// The sink stopped (a refused batch, a lost sequence or connection, a fence): what the relay does.
enum class SinkStop {
  kFenced,            // exactly-once's producer was fenced: Transactions::on_fenced()
  kFail,              // while stopping: exit 1, nothing is rewound any more
  kAbortTransaction,  // exactly-once: the broker's transaction is aborted and sent again
  kRewind,            // at-least-once: a rewind from the confirmed position
};
SinkStop answer_sink_stop(bool fenced, bool stop_requested, bool exactly_once);

// A rewind answered: the sink is halted when it goes on (a delivery timed out, not a refused
// batch, which stops it), so that records queued behind the failed one do not pass it when the
// broker answers again. Exactly-once aborts the broker's transaction instead.
bool halt_on_rewind(bool exactly_once, bool sink_stopped);

// A reader waiting for deliveries goes on after a report when a commit is under way, the Pipeline
// is not paused (backpressure), the session ends, or what is in flight fell below the low
// watermark.
bool reader_goes_on(bool committing, bool paused, bool leaving, bool below_low_watermark);

// The relay's own delivery deadline (-X message.timeout.ms, at-least-once): how often it is
// looked at (a fifth of it, between 10 ms and 1 s) and whether it passed (records queued, no
// report for that long).
std::chrono::milliseconds delivery_watch_period(std::chrono::milliseconds timeout);
bool deliveries_overdue(std::size_t queued, std::chrono::steady_clock::duration since_last_report,
                        std::chrono::milliseconds timeout);

}  // namespace outbox::relay
