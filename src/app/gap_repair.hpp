// A gap left by a slot lost while the relay was down, repaired from the outbox table before the
// relay starts (run --gap-repair-column). Private to app; blocking (libpq, a Kafka consumer and
// producer, a JetStream reader and publisher, or the SQS or EventBridge sink on a private
// io_context): runs before the relay's io_context does.
#pragma once

#include "outbox/app/options.hpp"

namespace outbox::app {

// When the relay's progress record (Kafka's checkpoint topic, with --nats the key-value bucket,
// with --sqs or --eventbridge the --progress-table) shows a slot of this name delivered
// through a position and the slot is now missing or confirmed past it: the slot is made first (a
// missing one, so that nothing committed from now on is missed), then the outbox rows of the gap
// that the broker lacks (Kafka's records, or the JetStream messages stored on the rows' subjects)
// are published with reconcile's repair over the time column, from the record's time (Kafka's
// timestamp, or when JetStream stored the value) minus the margin to now, in commit order
// (reconcile's); SQS and EventBridge cannot be read back, so every row of that window is sent
// again, from the record's time (the table's written_at) minus the margin (at least once).
// `config.gap_repaired` says so: the relay then goes on past that loss, before
// any event of the new slot is streamed. Nothing to repair, or a case it cannot repair (no record
// time, a lost slot, --no-create with the slot missing, the broker unreachable): `config` is left
// as it is and the relay's own check decides (exit 4 names the range). When no row of the outbox
// has the column at or before the record's time (the delivered rows were deleted, so the gap's may
// be too), nothing is changed or published. Returns kExitOk, or kExitSlotLost when the repair
// failed or cannot be trusted (said on stderr).
int repair_slot_gap(const Options& options, relay::RelayConfig& config);

}  // namespace outbox::app
