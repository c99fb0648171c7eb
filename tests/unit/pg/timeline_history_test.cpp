// TIMELINE_HISTORY's file: each ancestor timeline and where it ended.
#include <gtest/gtest.h>

#include "outbox/pg/error.hpp"
#include "outbox/pg/replication_connection.hpp"

namespace outbox::pg {
namespace {

TEST(TimelineHistory, EachAncestorWithItsSwitchPoint) {
  const TimelineHistory h = parse_timeline_history(
      "1\t0/3000060\tno recovery target specified\n"
      "\n"
      "# a comment\n"
      "2\t0/5A00F28\tno recovery target specified\n");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h.at(1), *Lsn::parse("0/3000060"));
  EXPECT_EQ(h.at(2), *Lsn::parse("0/5A00F28"));
}

TEST(TimelineHistory, HexEncodedContentAsBytea) {
  // "1\t0/3000060\tx\n" in hex.
  const TimelineHistory h = parse_timeline_history("\\x3109302f3330303030363009780a");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h.at(1), *Lsn::parse("0/3000060"));
}

TEST(TimelineHistory, AnUnreadableLineIsAnErrorNamingIt) {
  try {
    parse_timeline_history("1\t0/3000060\tok\nnonsense\n");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace outbox::pg
