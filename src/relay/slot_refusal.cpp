#include "slot_refusal.hpp"

#include "outbox/pg/slot_rules.hpp"

namespace outbox::relay {

Fatal slot_refusal(pg::BootstrapRefusal r, const std::optional<pg::SlotState>& slot,
                   const RelayConfig& config, bool on_standby, pgoutput::Lsn confirmed) {
  switch (r) {
    case pg::BootstrapRefusal::kPublicationMissing:
      if (on_standby && config.create) {
        return {kExitError, "publication " + config.publication +
                                " does not exist, and the server of --pg is a standby "
                                "(read-only): create it on the primary (outbox-relay setup "
                                "--pg PRIMARY ...); it reaches the standby by replication"};
      }
      return {kExitError,
              "publication " + config.publication + " does not exist and --no-create was given"};
    case pg::BootstrapRefusal::kSlotMissing:
      return {kExitError, "replication slot " + config.slot + " " + pg::slot_missing_words() +
                              " and --no-create was given"};
    case pg::BootstrapRefusal::kSlotVanished:
      return {kExitSlotLost,
              "replication slot " + config.slot +
                  " disappeared while the relay was using it; events committed after its last "
                  "confirmed position " +
                  confirmed.to_string() +
                  " may never reach the broker. Reconcile the outbox rows committed since then "
                  "(outbox-relay reconcile --repair), then start the relay once with "
                  "--accept-slot-loss, which creates the slot anew."};
    case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
      return {kExitError, "replication slot " + config.slot +
                              " was created by another connection while the relay created "
                              "it, and dropped again"};
    case pg::BootstrapRefusal::kSlotNotPgoutput:
      return {kExitError, "replication slot " + config.slot + " " +
                              pg::slot_not_pgoutput_words(slot ? slot->slot_type : "?",
                                                          slot ? slot->plugin.value_or("") : "?")};
    case pg::BootstrapRefusal::kSlotLost:
      return {
          kExitSlotLost,
          "replication slot " + config.slot + " " + pg::slot_lost_words() + ": " +
              pg::slot_lost_consequence() + " (confirmed_flush_lsn " +
              (slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string() : "?") +
              "; pg_replication_slots.invalidation_reason says why: wal_removed for "
              "max_slot_wal_keep_size, idle_timeout for PostgreSQL 18's "
              "idle_replication_slot_timeout). Drop the slot, reconcile the outbox rows committed "
              "after that position (outbox-relay reconcile --repair), then start the relay "
              "once with --accept-slot-loss to create a new one."};
  }
  return {kExitError, "replication slot " + config.slot + " cannot be used"};
}

}  // namespace outbox::relay
