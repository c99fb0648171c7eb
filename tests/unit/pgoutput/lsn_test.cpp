#include "outbox/pgoutput/lsn.hpp"

#include <gtest/gtest.h>

namespace outbox::pgoutput {
namespace {

TEST(Lsn, PrintsLikePostgres) {
  EXPECT_EQ(Lsn{0}.to_string(), "0/0");
  EXPECT_EQ(Lsn{0x16B3748}.to_string(), "0/16B3748");
  EXPECT_EQ(Lsn{0x16B374D848}.to_string(), "16/B374D848");
  EXPECT_EQ(Lsn{0x100000000}.to_string(), "1/0");
  EXPECT_EQ(Lsn{UINT64_MAX}.to_string(), "FFFFFFFF/FFFFFFFF");
}

TEST(Lsn, ParsesWhatItPrints) {
  for (std::uint64_t v :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0x16B3748}, std::uint64_t{0x16B374D848},
        std::uint64_t{0xFFFFFFFF}, std::uint64_t{0x100000000}, UINT64_MAX}) {
    const auto parsed = Lsn::parse(Lsn{v}.to_string());
    ASSERT_TRUE(parsed.has_value()) << v;
    EXPECT_EQ(parsed->value, v);
  }
}

TEST(Lsn, ParseIsCaseInsensitiveAndTakesLeadingZerosUpToEightDigits) {
  EXPECT_EQ(Lsn::parse("16/b374d848"), Lsn{0x16B374D848});
  EXPECT_EQ(Lsn::parse("16/B374d848"), Lsn{0x16B374D848});
  EXPECT_EQ(Lsn::parse("00000016/0000000A"), Lsn{0x160000000A});
}

TEST(Lsn, ParseRejectsAnythingElse) {
  for (const char* bad : {"",     "/",           "0",           "0/",          "/0",    "0/0/0",
                          "0//0", "123456789/0", "0/123456789", "000000000/0", "0x1/0", "1/0x0",
                          " 1/0", "1/0 ",        "1 /0",        "-1/0",        "+1/0",  "1/-0",
                          "g/0",  "1/G",         "1:0",         "1\\0",        "1/0\n"}) {
    EXPECT_FALSE(Lsn::parse(bad).has_value()) << '"' << bad << '"';
  }
  EXPECT_FALSE(Lsn::parse(std::string_view("1/0\0", 4)).has_value());
}

TEST(Lsn, OrdersByPosition) {
  EXPECT_LT(*Lsn::parse("0/FFFFFFFF"), *Lsn::parse("1/0"));
  EXPECT_TRUE(Lsn{}.is_zero());
}

TEST(PgTimestamp, ConvertsFromThe2000Epoch) {
  EXPECT_EQ(to_unix_millis(0), 946'684'800'000LL);
  EXPECT_EQ(from_unix_micros(946'684'800'000'000LL), 0);
  EXPECT_EQ(to_unix_millis(from_unix_micros(1'704'164'645'123'456LL)), 1'704'164'645'123LL);
}

}  // namespace
}  // namespace outbox::pgoutput
