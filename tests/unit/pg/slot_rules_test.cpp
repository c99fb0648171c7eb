// The one set of rules and words for a slot the relay cannot use, as the relay, setup, status and
// prune print them after their own subject.
#include "outbox/pg/slot_rules.hpp"

#include <gtest/gtest.h>

namespace outbox::pg {
namespace {

TEST(SlotRules, OnlyALogicalPgoutputSlotIsTheRelays) {
  EXPECT_TRUE(is_pgoutput_slot("logical", "pgoutput"));
  EXPECT_FALSE(is_pgoutput_slot("logical", "wal2json"));
  EXPECT_FALSE(is_pgoutput_slot("physical", ""));
  EXPECT_TRUE(is_lost_slot("lost"));
  for (const char* status : {"reserved", "extended", "unreserved", ""}) {
    EXPECT_FALSE(is_lost_slot(status)) << status;
  }
}

TEST(SlotRules, Words) {
  EXPECT_EQ("replication slot s " + slot_missing_words(), "replication slot s does not exist");
  EXPECT_EQ("slot " + slot_not_pgoutput_words("physical", ""),
            "slot is a physical slot with plugin , not logical pgoutput");
  EXPECT_EQ("slot " + slot_lost_words() + ": " + slot_lost_consequence(),
            "slot is lost (wal_status lost): PostgreSQL invalidated it and will not decode from "
            "it again; events committed since its confirmed position were never relayed");
  EXPECT_EQ(slot_in_use_words(4242), "is in use by PID 4242");
  EXPECT_EQ(slot_in_use_words(std::nullopt), "is in use by PID ?");
}

}  // namespace
}  // namespace outbox::pg
