// Why the relay cannot use its publication or slot (pg::BootstrapRefusal), in the words and exit
// code it stops with: a missing publication or slot with --no-create, a slot that vanished or
// was invalidated (a loss, exit 4, with the recovery: reconcile, then --accept-slot-loss), a slot
// of another kind. Private to the relay.
#pragma once

#include <optional>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::relay {

// `on_standby`: the server of --pg is a hot standby (read-only); `confirmed`: the position the
// relay confirmed last, named when the slot vanished.
Fatal slot_refusal(pg::BootstrapRefusal refusal, const std::optional<pg::SlotState>& slot,
                   const RelayConfig& config, bool on_standby, pgoutput::Lsn confirmed);

}  // namespace outbox::relay
