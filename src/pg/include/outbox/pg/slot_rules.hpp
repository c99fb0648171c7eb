// The rules for the relay's replication slot and the words for a slot that cannot be used, in one
// place: the relay (its refusals and exit code 4), setup, status, prune and the failover checks
// judge a slot with these predicates, and word its problem with these phrases after a subject of
// their own ("replication slot S " or "slot ") and before advice of their own. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace outbox::pg {

// A slot the relay can stream from: logical, decoding with pgoutput.
bool is_pgoutput_slot(std::string_view slot_type, std::string_view plugin);

// PostgreSQL removed WAL the slot needed (pg_replication_slots.wal_status 'lost'): it can never
// be streamed from again.
bool is_lost_slot(std::string_view wal_status);

// "does not exist"
std::string slot_missing_words();
// "is a physical slot with plugin , not logical pgoutput" (the plugin as the catalog gives it)
std::string slot_not_pgoutput_words(std::string_view slot_type, std::string_view plugin);
// "is lost (wal_status lost)"
std::string slot_lost_words();
// What a lost slot means for the outbox: "the WAL it needed was removed; events committed since
// its confirmed position were never relayed".
std::string slot_lost_consequence();
// "is in use by PID 4242" ("?" for an unknown PID)
std::string slot_in_use_words(std::optional<int> pid);

}  // namespace outbox::pg
