#include "outbox/pg/slot_rules.hpp"

namespace outbox::pg {

bool is_pgoutput_slot(std::string_view slot_type, std::string_view plugin) {
  return slot_type == "logical" && plugin == "pgoutput";
}

bool is_lost_slot(std::string_view wal_status) { return wal_status == "lost"; }

std::string slot_missing_words() { return "does not exist"; }

std::string slot_not_pgoutput_words(std::string_view slot_type, std::string_view plugin) {
  return "is a " + std::string(slot_type) + " slot with plugin " + std::string(plugin) +
         ", not logical pgoutput";
}

std::string slot_lost_words() { return "is lost (wal_status lost)"; }

std::string slot_lost_consequence() {
  return "PostgreSQL invalidated it and will not decode from it again; events committed since its "
         "confirmed position were never relayed";
}

std::string slot_in_use_words(std::optional<int> pid) {
  return "is in use by PID " + (pid ? std::to_string(*pid) : std::string("?"));
}

}  // namespace outbox::pg
