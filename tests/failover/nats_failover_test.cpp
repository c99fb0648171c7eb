// The JetStream counterpart of promotion_test.cpp's FailoverWithoutTheSlot (docs/failures.md,
// "Slot losses: repaired or stopped"): a PostgreSQL 15 primary fails over to its standby
// (pg_pair.sh with OUTBOX_PAIR_PG_VERSION=15: no failover slots, so the promoted standby never had
// the relay's slot), the relay publishing to the lane's nats-server (--nats, OUTBOX_NATS) with its
// progress record in the JetStream key-value bucket. JetStream has at-least-once delivery only:
// one mode. The pair: pair_fixture.hpp; the stream read back with libnats (tests/nats'
// stream_reader.hpp). Label failover: scripts/test.sh starts a nats-server in the lanes of the
// failover tier as in those of the nats tier.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/nats/publisher.hpp"
#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"
#include "pair_fixture.hpp"
#include "stream_reader.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;
using outbox_test::nats::Stored;
using outbox_test::nats::StreamReader;

// A PostgreSQL 15 pair, the relay publishing to JetStream, a stream per test capturing its
// subject (topics_[0]), dropped in TearDown.
class NatsFailoverWithoutTheSlot : public PairTest {
 protected:
  NatsFailoverWithoutTheSlot() : PairTest("natsfo", true) {}
  std::string pair_version() const override { return "15"; }

  void SetUp() override {
    PairTest::SetUp();
    if (HasFatalFailure()) return;
    stream_ = "OUTBOX_RELAY_" + suffix_;
    outbox::nats::PublisherConfig c;
    c.urls = nats_;
    ASSERT_EQ(outbox::nats::ensure_stream(c, stream_, {topics_[0]}, 10min, 10s), "");
  }
  void TearDown() override {
    PairTest::TearDown();
    if (!stream_.empty()) {
      try {
        StreamReader(access()).drop(stream_);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "cleanup: stream " << stream_ << ": " << e.what();
      }
    }
  }

  StreamReader::Access access() const { return {nats_, {}, {}, {}}; }
  std::vector<Stored> stored() { return StreamReader(access()).all(stream_); }

  void insert(int first_seq, int count) {
    pg_->query(
        "INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) SELECT $1, 'agg-' || (g % 3),"
            " 'Changed', jsonb_build_object('seq', g) FROM generate_series($2::bigint,"
            " $3::bigint) AS g ORDER BY g",
        {aggregatetypes_[0], std::to_string(first_seq), std::to_string(first_seq + count - 1)});
  }

  std::string stream_;
};

TEST_F(NatsFailoverWithoutTheSlot, TheRelayStopsNamingTheRangeAndARestartRepairsTheGap) {
  constexpr int kRelayed = 10, kGap = 6, kAfter = 4;
  create_outbox_table(", created_at timestamptz NOT NULL DEFAULT clock_timestamp()");
  ASSERT_NO_FATAL_FAILURE(wait_for_table_on_standby());
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert(0, kRelayed);
  const Lsn end = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until([&] { return stored().size() >= std::size_t{kRelayed}; }, 60s, 100ms))
      << stored().size() << " stored; see " << relay.log_path();
  ASSERT_TRUE(expect_confirmed_reaches(end, 60s));
  // The standby replayed all of it: nothing the relay delivered is lost at the promotion.
  PgClient standby(standby_);
  ASSERT_TRUE(wait_until(
      [&] {
        const auto at = standby.scalar("SELECT pg_last_wal_replay_lsn()::text");
        return at && parse_lsn(*at) >= end;
      },
      30s));
  ASSERT_EQ(pair({"kill-primary"}).exit_code, 0);
  ASSERT_EQ(pair({"promote"}).exit_code, 0);

  // The relay reconnects to the promoted standby, finds no slot there and stops, naming the
  // position it delivered through; it makes none (a new slot would start past the gap).
  const auto code = relay.wait_exit(90s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop on the promoted standby\n"
                                << tail_file(relay.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("slot " + slot_ +
                 " disappeared while the relay was using it; events committed after its last "
                 "confirmed position ([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), end) << "the position named is before what was confirmed";
  ASSERT_TRUE(reconnect_pg(30s));
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a slot on the promoted standby";

  // The gap: committed on the promoted standby while it has no slot. prune, reading the same
  // record in the bucket, deletes none of it.
  insert(kRelayed, kGap);
  const CommandResult pruned =
      run_to_end(relay_bin_,
                 {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                  "--nats", nats_, "--column-time", "created_at", "--older-than", "1ms"},
                 log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pruned.exit_code, 1) << pruned.out << pruned.err;
  EXPECT_EQ(pg_->scalar("SELECT count(*)::text FROM " + qualified_table()),
            std::optional<std::string>(std::to_string(kRelayed + kGap)));
  EXPECT_EQ(stored().size(), std::size_t{kRelayed}) << "nothing was published past the loss";

  // Started again with --gap-repair-column: the slot made, the gap's rows the stream lacks
  // published from the table, then streaming.
  RelayProcess& repaired = start_relay({"--gap-repair-column", "created_at"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(repaired));
  insert(kRelayed + kGap, kAfter);
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), std::size_t{kRelayed + kGap + kAfter});
  std::vector<Stored> messages;
  ASSERT_TRUE(wait_until(
      [&] {
        messages = stored();
        return messages.size() >= rows.size();
      },
      60s, 100ms))
      << messages.size() << " stored for " << rows.size() << " rows; see " << repaired.log_path();
  EXPECT_TRUE(expect_confirmed_reaches(after, 30s));
  messages = stored();

  // Every row of the promoted database stored once, nothing else, each aggregate in order.
  Problems problems;
  std::set<std::string> seen;
  std::map<std::string, std::int64_t> last_seq;
  for (const Stored& s : messages) {
    const auto id = s.headers.find("id");
    const auto row = id == s.headers.end() ? rows.end() : rows.find(id->second);
    if (row == rows.end()) {
      problems.add("not a row of the promoted database: seq " + std::to_string(s.seq));
      continue;
    }
    if (!seen.insert(id->second).second) {
      problems.add("stored twice: " + id->second);
      continue;
    }
    EXPECT_EQ(s.data, row->second.payload);
    const std::string& agg = row->second.aggregateid;
    if (auto last = last_seq.find(agg); last != last_seq.end() && last->second >= row->second.seq) {
      problems.add("not in commit order: " + agg + " seq " + std::to_string(row->second.seq) +
                   " after " + std::to_string(last->second));
    }
    last_seq[agg] = row->second.seq;
  }
  EXPECT_EQ(problems.count(), 0u) << problems.describe();
  EXPECT_EQ(seen.size(), rows.size()) << "rows of the promoted database missing in the stream";
  EXPECT_EQ(messages.size(), rows.size());
  const std::string repaired_log = read_file(repaired.log_path());
  EXPECT_NE(repaired_log.find("event=slot_gap_repaired"), std::string::npos) << repaired_log;
  EXPECT_NE(repaired_log.find(" repaired=" + std::to_string(kGap) + " failed=0"), std::string::npos)
      << repaired_log;
  expect_graceful_stop(repaired);
}

}  // namespace
}  // namespace outbox_test
