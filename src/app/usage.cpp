// The help texts (usage() in options.hpp, reconcile_usage() in reconcile_options.hpp): each
// command's prose around the flag list printed from its table.
#include "command_tables.hpp"
#include "flags.hpp"
#include "outbox/app/options.hpp"
#include "outbox/app/reconcile_options.hpp"

namespace outbox::app {
namespace {

// The flag lines of a command's table, built over throwaway options.
template <class Opts>
std::string flag_help(flags::Table (*table_of)(Opts&)) {
  Opts o;
  return flags::help(table_of(o));
}

}  // namespace

std::string usage() {
  std::string commands;
  for (const flags::CommandWord& c : flags::command_words())
    flags::append_row(commands, c.word, c.summary);
  return R"(outbox-relay: relays committed inserts of a PostgreSQL outbox table to Kafka, in commit order,
confirming the replication slot only after the broker acknowledged every event up to it.

usage: outbox-relay [run] --pg CONNINFO --brokers HOST:PORT[,...] [flags]
       outbox-relay setup|status|drop|reconcile|prune --pg CONNINFO [flags]
                                         (see outbox-relay COMMAND --help)

commands:
)" + commands +
         R"(
flags of run:
)" + flag_help(flags::run_flags) +
         R"(
environment: every flag --NAME-X but -X and --additional-placement (repeatable), --help, --version,
drop --yes and reconcile --repair can also be set as OUTBOX_RELAY_NAME_X (e.g.
OUTBOX_RELAY_KAFKA_CONFIG, OUTBOX_RELAY_PG); the command line wins. libpq reads PGPASSWORD
and PGPASSFILE (~/.pgpass) for the --pg password.

exit codes: 0 stopped by a signal, 1 error, 2 bad flags, 3 event could not be mapped or delivered,
            4 replication slot lost, 5 the publication or table would hide outbox inserts (or the
            publication was altered while streaming): nothing past them is confirmed
)";
}

std::string usage(Command command) {
  switch (command) {
    case Command::kRun:
      return usage();
    case Command::kSetup:
      return R"(outbox-relay setup: creates the publication (FOR TABLE the outbox table, inserts only, partitions
under the table's name) and checks that it publishes every insert into the table, then creates the
logical replication slot (pgoutput) the relay uses; with --create-table also the outbox table with
the default columns (id uuid, aggregatetype, aggregateid, type, payload jsonb, and created_at
timestamptz, the time column of prune and reconcile). Prints what it did.
Idempotent: what exists is left as it is.

usage: outbox-relay setup --pg CONNINFO [flags]

)" + flag_help(flags::setup_flags) +
             R"(
exit codes: 0 done (or nothing to do), 1 error (the message names the object and the server's error),
            2 bad flags, 5 the publication would hide inserts into the table from the relay
)";
    case Command::kStatus:
      return R"(outbox-relay status: the slot's state from pg_replication_slots and pg_stat_replication: active
and by which PID, confirmed_flush_lsn, restart_lsn, WAL retained for it, wal_status, lag; and the
backlog: the outbox events committed but not yet confirmed by the slot, and the commit time and
age of the oldest. The backlog is counted without moving the slot, also while a relay holds it:
the slot is copied to a temporary slot (it needs one free replication slot) and the copy is
decoded up to the current WAL position, at most --scan-limit changes.

usage: outbox-relay status --pg CONNINFO [flags]

)" + flag_help(flags::status_flags) +
             R"(
exit codes: 0 healthy, 1 slot missing, lost, retaining more than --max-retained, or more pending
            events than --max-pending or older than --max-age (or an error), 2 bad flags
)";
    case Command::kReconcile:
      return reconcile_usage();
    case Command::kDrop:
      return R"(outbox-relay drop: drops the logical replication slot and the publication. The server then
frees the WAL the slot retained; events committed but not yet relayed are not relayed any more.
Stop the relay first: a slot in use cannot be dropped.

usage: outbox-relay drop --pg CONNINFO --yes [flags]

)" + flag_help(flags::drop_flags) +
             R"(
exit codes: 0 dropped (or already absent), 1 error or --yes missing, 2 bad flags
)";
    case Command::kPrune:
      return R"(outbox-relay prune: deletes outbox rows older than --older-than (by --column-time) that the slot
has certainly confirmed, so certainly relayed: rows whose inserting transaction (xmin) is older
than the slot's catalog_xmin. Every transaction older than catalog_xmin committed before a WAL
position the slot has confirmed. Rows of transactions the slot may still send are never deleted.
Deletes run in batches of --batch rows, each its own short transaction, with --pause between them.
On a partitioned outbox, a range partition on --column-time that ends before the cutoff and whose
rows are all prunable is dropped whole instead (after locking it and checking again, with a 1s
lock timeout: a busy partition is pruned row by row; list, hash and default partitions never go).
Refuses when the slot does not exist, is lost, or has no catalog_xmin: then nothing is known.

usage: outbox-relay prune --pg CONNINFO --older-than DURATION [flags]

)" + flag_help(flags::prune_flags) +
             R"(
exit codes: 0 done (also when nothing was prunable), 1 refused or error, 2 bad flags
)";
  }
  return usage();
}

std::string reconcile_usage() {
  return R"(outbox-relay reconcile: checks that every outbox row of a time window is in Kafka. Reads the rows
still in the table whose --column-time is in [--since, --until), computes each row's topic with the
relay's template and columns, reads those topics (from the first record stamped at or after
since - --margin), matches records to rows by the "id" header and prints every row Kafka lacks
(id, aggregate id, topic, time) and a summary. With --repair it publishes the missing events in
commit order (idempotent producer, acks=all, murmur2_random) and waits for every acknowledgement.
With --nats instead of --brokers the stream is JetStream: the stream capturing each subject is read
from the messages stored at or after since - --margin (headers only), and --repair publishes with
Nats-Msg-Id = the id.
Each row goes through the relay's own mapper, fed the row's text as pgoutput sends it: given the
relay's mapping flags (--table repeated, --topic, --column-*, --require-json,
--additional-placement, --column-timestamp, --tombstone-on-empty-payload, --format, --ce-source,
--content-type, --column-traceparent, --column-tracestate; OUTBOX_RELAY_* variables too), a
repaired record is the relay's in topic, key, value, headers, partition and timestamp. Without
--column-timestamp the record is stamped with the commit time when track_commit_timestamp is on,
else with the --column-time value. A row the mapper rejects is listed as unmappable with the
relay's reason, never repaired. Not supported: events without a table (logical messages).
Use it after exit code 4 (slot lost), exit code 5 (publication or table refused), a database
restore, or a move from Debezium. Progress goes to stderr.

usage: outbox-relay reconcile --pg CONNINFO --brokers HOST:PORT[,...] --column-time NAME
                              --since AGE|TIMESTAMP [--until AGE|TIMESTAMP] [--repair] [flags]

)" + flag_help(flags::reconcile_table) +
         R"(
exit codes: 0 nothing missing (or, with --repair, everything missing was published), 1 rows missing
            or unmappable, or an error, 2 bad flags
)";
}

}  // namespace outbox::app
