// The mapper's parts that decide alone, tested without a Mapper: PostgreSQL's text output of the
// values the mapper reads (column_values.hpp, timestamps.hpp), RFC 3339 for ce_time, the W3C
// traceparent rule (trace_context.hpp) and Kafka's topic name rule (topic_name.hpp). The Mapper's
// tests (mapper_test, shapes_test, cloudevents_test) cover how they are used for a row.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "column_values.hpp"
#include "timestamps.hpp"
#include "topic_name.hpp"
#include "trace_context.hpp"

namespace outbox::mapping {
namespace {

std::string rfc3339(std::int64_t us) {
  std::array<char, 32> text{};
  return std::string(text.data(), format_rfc3339(us, text));
}

TEST(Timestamps, IsoOutputWithEveryOffsetShapeToMicroseconds) {
  std::int64_t us = 0;
  EXPECT_EQ(parse_timestamp("2026-12-01 05:55:23.123456+00", us), "");
  EXPECT_EQ(us, 1'796'104'523'123'456);
  EXPECT_EQ(parse_timestamp("2026-12-01 11:25:23.123456+05:30", us), "");
  EXPECT_EQ(us, 1'796'104'523'123'456);
  EXPECT_EQ(parse_timestamp("2026-12-01 02:24:08.123456-03:31:15", us), "");
  EXPECT_EQ(us, 1'796'104'523'123'456);
  // timestamp without time zone: taken as UTC; no fraction; a fraction past microseconds cut.
  EXPECT_EQ(parse_timestamp("2026-12-01 05:55:23", us), "");
  EXPECT_EQ(us, 1'796'104'523'000'000);
  EXPECT_EQ(parse_timestamp("2026-12-01 05:55:23.1234569", us), "");
  EXPECT_EQ(us, 1'796'104'523'123'456);
  EXPECT_EQ(parse_timestamp("2024-02-29 00:00:00+00", us), "");
  EXPECT_EQ(rfc3339(us), "2024-02-29T00:00:00.000000Z");
  EXPECT_EQ(parse_timestamp("12026-12-01 05:55:23+00", us), "");  // five-digit years print so
}

TEST(Timestamps, WhatAKafkaTimestampCannotCarryIsSaid) {
  std::int64_t us = 0;
  EXPECT_EQ(parse_timestamp("infinity", us), "is infinite, which a Kafka timestamp cannot carry");
  EXPECT_EQ(parse_timestamp("-infinity", us), "is infinite, which a Kafka timestamp cannot carry");
  EXPECT_EQ(parse_timestamp("0044-03-15 12:00:00+00 BC", us),
            "is a date BC, which a Kafka timestamp cannot carry");
  EXPECT_EQ(parse_timestamp("1970-01-01 00:00:00+00", us),
            "is not after 1970-01-01 00:00:00 UTC, which a Kafka timestamp needs");
  for (const std::string_view bad :
       {"", "2026-12-01", "2026-12-01T05:55:23+00", "26-12-01 05:55:23", "2026-13-01 05:55:23",
        "2026-12-01 05:55:23.", "2026-12-01 05:55:23+0", "2026-12-01 05:55:23 UTC"}) {
    EXPECT_NE(parse_timestamp(bad, us).find("DateStyle ISO"), std::string_view::npos) << bad;
  }
}

TEST(Timestamps, Rfc3339InUtcWithMicrosecondsWithinYearsOneTo9999) {
  EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(rfc3339(1'796'104'523'123'456), "2026-12-01T05:55:23.123456Z");
  EXPECT_EQ(rfc3339(-1), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(rfc3339(-62'135'596'800'000'000), "0001-01-01T00:00:00.000000Z");
  EXPECT_EQ(rfc3339(-62'135'596'800'000'001), "");
  EXPECT_EQ(rfc3339(253'402'300'799'999'999), "9999-12-31T23:59:59.999999Z");
  EXPECT_EQ(rfc3339(253'402'300'800'000'000), "");
}

TEST(ColumnValues, ByteaInBothOutputFormats) {
  std::string out;
  EXPECT_EQ(decode_bytea("\\x00ff7F", out), "");
  EXPECT_EQ(out, std::string("\x00\xff\x7f", 3));
  EXPECT_EQ(decode_bytea("\\x", out), "");
  EXPECT_EQ(out, "");
  EXPECT_EQ(decode_bytea("a\\\\b\\000\\377", out), "");
  EXPECT_EQ(out, std::string("a\\b\x00\xff", 5));
  EXPECT_EQ(decode_bytea("\\x0", out), "is bytea hex output with an odd number of digits");
  EXPECT_EQ(decode_bytea("\\x0g", out),
            "is bytea hex output with a character that is not a hex digit");
  for (const std::string_view bad : {"\\", "a\\b", "\\400", "\\08"}) {
    EXPECT_EQ(decode_bytea(bad, out),
              "is neither hex nor escape bytea output (a backslash without \\\\ or \\ooo)")
        << bad;
  }
}

TEST(ColumnValues, PartitionNumbersFitAnInt32AndAreNotNegative) {
  std::int32_t partition = -1;
  EXPECT_EQ(parse_partition("0", partition), "");
  EXPECT_EQ(partition, 0);
  EXPECT_EQ(parse_partition("2147483647", partition), "");
  EXPECT_EQ(partition, 2'147'483'647);
  EXPECT_EQ(parse_partition("2147483648", partition),
            "is larger than the largest partition number (2147483647)");
  EXPECT_EQ(parse_partition("-1", partition), "is negative, which is no partition");
  EXPECT_EQ(parse_partition("", partition), "is not an integer");
  EXPECT_EQ(parse_partition("1e3", partition), "is not an integer");
}

TEST(ColumnValues, BlankIsJavasTrimThenEmpty) {
  EXPECT_TRUE(is_blank(""));
  EXPECT_TRUE(is_blank(std::string_view(" \t\r\n\x01", 5)));
  EXPECT_FALSE(is_blank(" {} "));
}

TEST(TraceContext, TraceparentVersionsIdsAndCase) {
  constexpr std::string_view kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_TRUE(is_valid_traceparent(kValid));
  EXPECT_FALSE(is_valid_traceparent(std::string(kValid) + "-x"));  // version 00 has no more
  EXPECT_TRUE(is_valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));
  EXPECT_FALSE(is_valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
  EXPECT_FALSE(is_valid_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(is_valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
  EXPECT_FALSE(is_valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
  EXPECT_FALSE(is_valid_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(is_valid_traceparent(kValid.substr(0, 54)));
}

TEST(TopicName, KafkasRule) {
  EXPECT_TRUE(is_valid_topic("outbox.event.Order_v2-eu"));
  EXPECT_TRUE(is_valid_topic(std::string(249, 'a')));
  EXPECT_FALSE(is_valid_topic(std::string(250, 'a')));
  EXPECT_FALSE(is_valid_topic(""));
  EXPECT_FALSE(is_valid_topic("."));
  EXPECT_FALSE(is_valid_topic(".."));
  EXPECT_TRUE(is_valid_topic("..."));
  EXPECT_FALSE(is_valid_topic("outbox.event.Order Placed"));
  EXPECT_EQ(invalid_topic_reason("a b", "${t}"),
            "renders topic \"a b\" from template \"${t}\", which is not a valid Kafka topic name "
            "(1 to 249 characters of [a-zA-Z0-9._-], not \".\" or \"..\")");
}

}  // namespace
}  // namespace outbox::mapping
