// Counting the backlog from pgoutput bytes, as `status` does over a copy of the slot: only
// committed inserts into the outbox or one of its partitions count (under the root's relid or a
// partition's own), the oldest is the earliest commit; and the health rules over the count.
#include "outbox/lifecycle/backlog.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../pgoutput/golden.hpp"
#include "outbox/pgoutput/decoder.hpp"

namespace outbox::lifecycle {
namespace {

using Bytes = std::vector<std::byte>;
using pgoutput::testing::golden;

// Minimal pgoutput encoders (proto_version 1, big-endian), to build streams the golden capture
// does not hold (partitions, several relations).
void put_u8(Bytes& b, std::uint8_t v) { b.push_back(std::byte{v}); }
template <typename T>
void put_be(Bytes& b, T v) {
  for (int i = sizeof(T) - 1; i >= 0; --i) {
    put_u8(b, static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
  }
}
void put_cstring(Bytes& b, const std::string& s) {
  for (char c : s) put_u8(b, static_cast<std::uint8_t>(c));
  put_u8(b, 0);
}

Bytes begin(std::uint64_t lsn, std::int64_t commit_time, std::uint32_t xid) {
  Bytes b;
  put_u8(b, 'B');
  put_be<std::uint64_t>(b, lsn);
  put_be<std::int64_t>(b, commit_time);
  put_be<std::uint32_t>(b, xid);
  return b;
}
Bytes commit(std::uint64_t lsn, std::int64_t commit_time) {
  Bytes b;
  put_u8(b, 'C');
  put_u8(b, 0);
  put_be<std::uint64_t>(b, lsn);
  put_be<std::uint64_t>(b, lsn + 0x30);
  put_be<std::int64_t>(b, commit_time);
  return b;
}
Bytes relation(std::uint32_t relid, const std::string& nsp, const std::string& name) {
  Bytes b;
  put_u8(b, 'R');
  put_be<std::uint32_t>(b, relid);
  put_cstring(b, nsp);
  put_cstring(b, name);
  put_u8(b, 'd');
  put_be<std::uint16_t>(b, 1);
  put_u8(b, 1);
  put_cstring(b, "id");
  put_be<std::uint32_t>(b, 20);
  put_be<std::int32_t>(b, -1);
  return b;
}
Bytes insert(std::uint32_t relid, const std::string& id) {
  Bytes b;
  put_u8(b, 'I');
  put_be<std::uint32_t>(b, relid);
  put_u8(b, 'N');
  put_be<std::uint16_t>(b, 1);
  put_u8(b, 't');
  put_be<std::uint32_t>(b, static_cast<std::uint32_t>(id.size()));
  for (char c : id) put_u8(b, static_cast<std::uint8_t>(c));
  return b;
}

constexpr std::uint32_t kRoot = 16400, kPart1 = 16410, kPart2 = 16420, kOther = 16500;

TEST(Backlog, CountsCommittedOutboxInsertsOfTheGoldenStream) {
  // Captured from PostgreSQL 15: outbox inserts 2 + 1 + 1 in three transactions; one transaction
  // inserts into "audit" only, one truncates; updates, deletes, messages, an origin (whose commit
  // time is older than the first's), types.
  std::vector<Bytes> stream;
  for (const auto& name : pgoutput::testing::golden_names()) {
    if (name == "binary_insert") continue;  // the first Insert again, in binary mode
    stream.push_back(golden(name));
  }
  const BacklogCount c = count_backlog(stream, {}, "public", "outbox");
  EXPECT_EQ(c.pending_events, 4u);
  EXPECT_EQ(c.pending_transactions, 3u);
  EXPECT_EQ(c.changes_scanned, stream.size());
  const auto first =
      std::get<pgoutput::Begin>(std::get<pgoutput::Message>(pgoutput::decode(golden("01_begin"))));
  ASSERT_TRUE(c.oldest_commit_time);
  EXPECT_EQ(*c.oldest_commit_time, first.commit_time);
  EXPECT_EQ(c.oldest_commit_lsn, first.final_lsn);

  // The other table of the capture, by name: its one insert.
  EXPECT_EQ(count_backlog(stream, {}, "public", "audit").pending_events, 1u);
  EXPECT_EQ(count_backlog(stream, {}, "public", "nothing").pending_events, 0u);
}

TEST(Backlog, PartitionsCountUnderTheirOwnRelidOrTheRoots) {
  // publish_via_partition_root = false: inserts come under each partition's relid and name.
  const std::vector<Bytes> leaves = {begin(0x1000, 2'000'000, 700),
                                     relation(kPart1, "public", "outbox_2026_11"),
                                     insert(kPart1, "a"),
                                     relation(kPart2, "public", "outbox_2026_12"),
                                     insert(kPart2, "b"),
                                     insert(kPart2, "c"),
                                     relation(kOther, "public", "orders"),
                                     insert(kOther, "x"),
                                     commit(0x1000, 2'000'000)};
  BacklogCount c = count_backlog(leaves, {kRoot, kPart1, kPart2}, "public", "outbox");
  EXPECT_EQ(c.pending_events, 3u);
  EXPECT_EQ(c.pending_transactions, 1u);
  // Without the catalog's tree, partitions published under their own names are not the outbox.
  EXPECT_EQ(count_backlog(leaves, {kRoot}, "public", "outbox").pending_events, 0u);

  // publish_via_partition_root = true: the root's relid and name; a partition dropped since
  // (relid no longer in the tree) still counts by the root's name.
  const std::vector<Bytes> via_root = {begin(0x2000, 5'000'000, 800),
                                       relation(kRoot, "public", "outbox"), insert(kRoot, "a"),
                                       insert(kRoot, "b"), commit(0x2000, 5'000'000)};
  EXPECT_EQ(count_backlog(via_root, {kRoot}, "public", "outbox").pending_events, 2u);
  EXPECT_EQ(count_backlog(via_root, {}, "public", "outbox").pending_events, 2u);
  EXPECT_EQ(count_backlog(via_root, {}, "app", "outbox").pending_events, 0u);
}

TEST(Backlog, OldestIsTheFirstCommitWithAnOutboxInsert) {
  const std::vector<Bytes> stream = {
      // Touches another table only: not pending outbox work, however old.
      begin(0x100, 1'000, 1), relation(kOther, "public", "orders"), insert(kOther, "x"),
      commit(0x100, 1'000), begin(0x200, 3'000, 2), relation(kRoot, "public", "outbox"),
      insert(kRoot, "a"), commit(0x200, 3'000),
      // An earlier commit time later in commit order (a transaction applied under a
      // replication origin carries the origin's time): the first in commit order stays oldest.
      begin(0x300, 2'500, 3), insert(kRoot, "b"), commit(0x300, 2'500)};
  const BacklogCount c = count_backlog(stream, {kRoot}, "public", "outbox");
  EXPECT_EQ(c.pending_events, 2u);
  EXPECT_EQ(c.pending_transactions, 2u);
  EXPECT_EQ(c.oldest_commit_time, 3'000);
  EXPECT_EQ(c.oldest_commit_lsn, pgoutput::Lsn{0x200});
}

TEST(Backlog, ATransactionCountsOnlyAtItsCommit) {
  BacklogCounter counter({kRoot}, "public", "outbox");
  counter.add(begin(0x100, 1, 1), pgoutput::Lsn{0x100});
  counter.add(relation(kRoot, "public", "outbox"), pgoutput::Lsn{0x100});
  counter.add(insert(kRoot, "a"), pgoutput::Lsn{0x100});
  EXPECT_EQ(counter.count().pending_events, 0u);
  counter.add(commit(0x100, 1), pgoutput::Lsn{0x100});
  EXPECT_EQ(counter.count().pending_events, 1u);
  EXPECT_EQ(counter.count().changes_scanned, 4u);
}

TEST(Backlog, BadBytesNameTheLsn) {
  BacklogCounter counter({kRoot}, "public", "outbox");
  Bytes truncated = begin(0x100, 1, 1);
  truncated.resize(5);
  try {
    counter.add(truncated, pgoutput::Lsn{0x16B374D848});
    FAIL() << "no error";
  } catch (const BacklogDecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("at LSN 16/B374D848"), std::string::npos) << e.what();
  }
  EXPECT_THROW(counter.add(insert(kRoot, "a"), pgoutput::Lsn{0x200}), BacklogDecodeError);
  EXPECT_THROW(counter.add(commit(0x200, 1), pgoutput::Lsn{0x200}), BacklogDecodeError);
}

BacklogStatus counted(std::uint64_t events, std::optional<std::int64_t> oldest_age_us) {
  BacklogStatus b;
  b.scan_limit = 100'000;
  b.count = BacklogCount{};
  b.count->pending_events = events;
  b.count->pending_transactions = events;
  b.count->changes_scanned = 3 * events;
  b.server_now = 1'000'000'000'000;
  if (oldest_age_us) b.count->oldest_commit_time = b.server_now - *oldest_age_us;
  return b;
}

TEST(Backlog, LimitsOnCountAndAge) {
  BacklogStatus b = counted(10, 90'000'000);
  EXPECT_TRUE(backlog_problems(b).empty());
  b.max_pending = 10;
  EXPECT_TRUE(backlog_problems(b).empty());
  b.max_pending = 9;
  ASSERT_EQ(backlog_problems(b).size(), 1u);
  EXPECT_EQ(backlog_problems(b)[0], "10 pending events exceed --max-pending 9");
  b.max_pending.reset();
  b.max_age = std::chrono::minutes(2);
  EXPECT_TRUE(backlog_problems(b).empty());
  b.max_age = std::chrono::seconds(60);
  ASSERT_EQ(backlog_problems(b).size(), 1u);
  EXPECT_EQ(backlog_problems(b)[0],
            "oldest pending event committed 1m 30s ago exceeds --max-age 1m 00s");
  EXPECT_EQ(oldest_age_seconds(b), 90.0);

  // Nothing pending: no age, nothing to complain about.
  BacklogStatus none = counted(0, std::nullopt);
  none.max_pending = 0;
  none.max_age = std::chrono::seconds(1);
  EXPECT_TRUE(backlog_problems(none).empty());
  EXPECT_FALSE(oldest_age_seconds(none));
}

TEST(Backlog, AScanStoppedAtTheBoundGivesLowerBounds) {
  BacklogStatus b = counted(33'334, 5'000'000);
  b.stopped_at_limit = true;
  b.max_pending = 1000;
  EXPECT_EQ(backlog_problems(b)[0], ">= 33334 pending events exceed --max-pending 1000");
  b.max_pending = 50'000;  // the count so far is below it: cannot tell
  ASSERT_EQ(backlog_problems(b).size(), 1u);
  EXPECT_NE(backlog_problems(b)[0].find("cannot check --max-pending 50000"), std::string::npos);
  const std::string text = format_backlog_text(b);
  EXPECT_NE(text.find("pending_events        >= 33334 (in >= 33334 transactions"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stopped at --scan-limit 100000 changes: counts are lower bounds"),
            std::string::npos)
      << text;
  const std::string json = format_backlog_json_fields(b);
  EXPECT_NE(json.find("\"pending_events\":33334,\"pending_transactions\":33334,"
                      "\"pending_lower_bound\":true"),
            std::string::npos)
      << json;
}

TEST(Backlog, NotCounted) {
  BacklogStatus missing;
  missing.slot_missing = true;
  missing.error = "slot does not exist";
  missing.max_pending = 1;
  EXPECT_TRUE(backlog_problems(missing).empty());  // the slot's own problem says it
  EXPECT_EQ(format_backlog_text(missing), "pending_events        unknown (slot does not exist)\n");
  BacklogStatus failed;
  failed.error = "copy replication slot s: all replication slots are in use";
  EXPECT_TRUE(backlog_problems(failed).empty());  // nothing asked of the backlog
  failed.max_age = std::chrono::seconds(1);
  ASSERT_EQ(backlog_problems(failed).size(), 1u);
  EXPECT_EQ(backlog_problems(failed)[0],
            "pending events not counted: copy replication slot s: all replication slots are in "
            "use");
  EXPECT_NE(format_backlog_json_fields(failed).find("\"pending_events\":null"), std::string::npos);
}

TEST(Backlog, Timestamps) {
  EXPECT_EQ(format_pg_timestamp(0), "2000-01-01 00:00:00.000000+00");
  // 2026-11-30 06:20:21.013282 UTC
  EXPECT_EQ(format_pg_timestamp(pgoutput::from_unix_micros(1'796'019'621'013'282LL)),
            "2026-11-30 06:20:21.013282+00");
  EXPECT_EQ(human_duration(12.34), "12.3s");
  EXPECT_EQ(human_duration(3 * 3600 + 5 * 60 + 7), "3h 05m");
  EXPECT_EQ(human_duration(2 * 86400 + 4 * 3600), "2d 04h");
}

}  // namespace
}  // namespace outbox::lifecycle
