// A session's publication and slot before it streams (pg::ensure_slot_and_publication, as the
// setup command): created when missing unless --no-create (on a standby, only the slot); a slot
// about to be created is first looked for in the progress record (ProgressCheck: one that
// delivered before and is gone is a loss); a slot that vanished after the relay had it, or was
// invalidated, is a loss (slot_refusal(), exit 4). Private to the relay; the io thread only.
#pragma once

#include <spdlog/logger.h>

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <optional>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/relay.hpp"
#include "progress_check.hpp"
#include "server_history.hpp"

namespace outbox::relay {

// The publication first, logged before the slot is looked at. Returns the slot when it existed
// (not created now): it is compared with the progress record once the stream holds it
// (ProgressCheck::start_session()). A slot that vanished is named with the position the relay
// confirmed last (the Pipeline's). Throws FatalError for a refusal or a loss not accepted.
boost::asio::awaitable<std::optional<pg::SlotState>> ensure_publication_and_slot(
    pg::ReplicationConnection& conn, const RelayConfig& config, const ServerHistory& server,
    ProgressCheck& progress, const Pipeline& pipeline, spdlog::logger& log);

}  // namespace outbox::relay
