#include "slot_setup.hpp"

#include <array>

#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "publication_checker.hpp"
#include "slot_refusal.hpp"

namespace outbox::relay {
using common::quoted;
using pgoutput::Lsn;

boost::asio::awaitable<std::optional<pg::SlotState>> ensure_publication_and_slot(
    pg::ReplicationConnection& conn, const RelayConfig& config, const ServerHistory& server,
    ProgressCheck& progress, const Pipeline& pipeline, spdlog::logger& log) {
  std::optional<pg::SlotState> found_slot;
  const auto& m = config.mapper;
  pg::BootstrapOptions options{publication_target(config), config.slot, config.create,
                               server.had_slot()};
  const std::array<pg::BootstrapPart, 2> parts{pg::BootstrapPart::kPublication,
                                               pg::BootstrapPart::kSlot};
  for (const pg::BootstrapPart part : parts) {
    options.part = part;
    // A standby is read-only: only the slot may be made there.
    options.create =
        config.create && !(server.on_standby() && part == pg::BootstrapPart::kPublication);
    // A slot about to be created: first whether a slot of this name delivered before and is
    // gone (ProgressCheck::check_missing_slot()). Once per process: a slot the relay had and
    // lost while running is kSlotVanished (exit 4) below.
    const bool look_first = part == pg::BootstrapPart::kSlot && options.create &&
                            !server.had_slot() && progress.has_store();
    if (look_first) options.create = false;
    pg::BootstrapResult r =
        co_await pg::ensure_slot_and_publication(conn, options, config.connect_timeout);
    std::optional<Lsn> accepted;  // a loss accepted: the record moves to the new slot
    if (look_first && r.refusal == pg::BootstrapRefusal::kSlotMissing) {
      accepted = co_await progress.check_missing_slot();
      options.create = true;
      r = co_await pg::ensure_slot_and_publication(conn, options, config.connect_timeout);
      if (accepted && r.created_slot) accepted = r.created_slot;
    } else if (part == pg::BootstrapPart::kSlot && r.ok() && !r.created_slot) {
      found_slot = r.slot;
    }
    if (r.created_publication) {
      log.info("event=created_publication publication={} table={}", config.publication,
               quoted(m.table.empty() ? "none" : common::QualifiedName{m.schema, m.table}.text()));
    }
    if (r.created_slot) log.info("event=created_slot slot={}", config.slot);
    if (r.refusal) {
      throw FatalError(
          slot_refusal(*r.refusal, r.slot, config, server.on_standby(), pipeline.confirmable()));
    }
    if (accepted) co_await progress.record_accepted(*accepted);
  }
  co_return found_slot;
}

}  // namespace outbox::relay
