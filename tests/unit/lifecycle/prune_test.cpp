// When `prune` refuses to trust the slot or the time column: nothing is deleted unless the slot
// is the relay's live logical slot in this database with a catalog_xmin, and the retention
// column exists and is a timestamp.
#include "outbox/lifecycle/prune.hpp"

#include <gtest/gtest.h>

namespace outbox::lifecycle {
namespace {

PruneSlotView good_slot() {
  return {true, "logical", "pgoutput", "reserved", "app", "app", "1234"};
}

TEST(Prune, TrustsOnlyALiveLogicalSlotWithACatalogXmin) {
  EXPECT_EQ(prune_refusal("s", good_slot()), "");

  EXPECT_EQ(prune_refusal("s", PruneSlotView{}),
            "refusing to prune: replication slot s does not exist, so nothing tells which outbox "
            "rows were relayed (give the relay's --slot)");
  auto physical = good_slot();
  physical.slot_type = "physical";
  physical.plugin = "";
  EXPECT_NE(
      prune_refusal("s", physical).find("is a physical slot with plugin , not logical pgoutput"),
      std::string::npos);
  auto other_db = good_slot();
  other_db.database = "billing";
  EXPECT_NE(prune_refusal("s", other_db).find("belongs to database billing, not app"),
            std::string::npos);
  auto lost = good_slot();
  lost.wal_status = "lost";
  EXPECT_NE(prune_refusal("s", lost).find("is lost"), std::string::npos);
  auto creating = good_slot();
  creating.catalog_xmin = "";
  EXPECT_NE(prune_refusal("s", creating).find("has no catalog_xmin"), std::string::npos);
}

TEST(Prune, TheTimeColumnMustExistAndBeATimestamp) {
  EXPECT_EQ(
      time_column_refusal("public.outbox", "created_at", std::string("timestamp with time zone")),
      "");
  EXPECT_EQ(time_column_refusal("public.outbox", "day", std::string("date")), "");
  const std::string missing = time_column_refusal("public.outbox", "created_at", std::nullopt);
  EXPECT_EQ(missing.rfind("refusing to prune: table public.outbox has no column created_at "
                          "(--column-time)",
                          0),
            0u)
      << missing;
  EXPECT_NE(time_column_refusal("public.outbox", "payload", std::string("jsonb"))
                .find("column payload of table public.outbox is of type jsonb"),
            std::string::npos);
}

// The relay's progress record against the slot: a slot confirmed past it was made anew or moved
// by another client, and the rows of the events in between are the only copy: refused. A record
// that cannot be read, is missing or is not a position: refused too.
TEST(Prune, TrustsTheSlotOnlyWhenItIsNotAheadOfTheProgressRecord) {
  using pgoutput::Lsn;
  sinks::StoredProgress record;
  record.key = "7/s";
  record.lsn = Lsn{0x2000};
  const std::string where = "topic cp";
  EXPECT_EQ(progress_refusal("s", Lsn{0x2000}, record, where), "");
  EXPECT_EQ(progress_refusal("s", Lsn{0x1000}, record, where), "");
  EXPECT_EQ(progress_refusal("s", std::nullopt, record, where), "");
  const std::string ahead = progress_refusal("s", Lsn{0x2001}, record, where);
  EXPECT_EQ(ahead.rfind("refusing to prune: slot s is confirmed through 0/2001, past the relay's "
                        "progress record 0/2000 (topic cp, key 7/s): the slot was made anew or "
                        "moved by another client",
                        0),
            0u)
      << ahead;
  EXPECT_NE(ahead.find("reconcile --since ... --repair"), std::string::npos) << ahead;
  EXPECT_NE(ahead.find("--accept-slot-loss"), std::string::npos) << ahead;

  sinks::StoredProgress none;
  none.key = "7/s";
  EXPECT_EQ(progress_refusal("s", Lsn{0x1000}, none, where)
                .rfind("refusing to prune: no progress record of slot s (topic cp, key 7/s)", 0),
            0u);
  sinks::StoredProgress unreadable = none;
  unreadable.error = "Kafka away";
  EXPECT_EQ(progress_refusal("s", Lsn{0x1000}, unreadable, where),
            "refusing to prune: cannot read the relay's progress record of slot s (topic cp, key "
            "7/s): Kafka away");
  sinks::StoredProgress bad = none;
  bad.bad = "garbage";
  EXPECT_EQ(progress_refusal("s", Lsn{0x1000}, bad, where),
            "refusing to prune: the progress record of slot s (topic cp, key 7/s) holds "
            "\"garbage\", not a WAL position");
}

}  // namespace
}  // namespace outbox::lifecycle
