// What the SQS and EventBridge publishers share (src/aws/publisher_parts.hpp), without a server:
// what a held record keeps and reports (a dead letter is made of a failed report's fields), the
// retry delay's bounds, and the pace of the retry log lines.
#include "aws/publisher_parts.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

namespace aws = outbox::aws;
namespace sink = outbox::sink;
using namespace std::chrono_literals;

TEST(HeldRecord, KeepsTheRecordAndReportsItWhole) {
  const std::string key = "order-7";
  const std::string value = R"({"total":12})";
  std::vector<sink::Header> headers = {{"id", std::string_view("e-1")},
                                       {"trace", std::nullopt},
                                       {"type", std::string_view("OrderCreated")},
                                       {"id", std::string_view("second id")},
                                       {"tenant", std::string_view("t9")}};
  sink::Record record;
  record.topic = "orders";
  record.key = key;
  record.value = value;
  record.headers = headers;
  const aws::HeldRecord held = aws::HeldRecord::of(record, 42);
  EXPECT_EQ(held.opaque, 42u);
  EXPECT_EQ(held.bytes, key.size() + value.size());
  EXPECT_EQ(held.id, "e-1");
  ASSERT_TRUE(held.type.has_value());
  EXPECT_EQ(*held.type, "OrderCreated");

  const sink::Delivery ok = held.delivered();
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.opaque, 42u);
  EXPECT_EQ(ok.bytes, held.bytes);
  EXPECT_EQ(ok.topic, "orders");
  EXPECT_EQ(ok.id_header, "e-1");

  const std::string why = "refused";
  const sink::Delivery failed = held.failed(sink::ErrorKind::kSize, "MessageTooLong", why);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.kind, sink::ErrorKind::kSize);
  EXPECT_TRUE(failed.size_error);
  EXPECT_EQ(failed.error_name, "MessageTooLong");
  EXPECT_EQ(failed.error, why);
  ASSERT_TRUE(failed.key.has_value());
  EXPECT_EQ(*failed.key, key);
  ASSERT_TRUE(failed.value.has_value());
  EXPECT_EQ(*failed.value, value);
  EXPECT_EQ(failed.id_header, "e-1");
  ASSERT_TRUE(failed.type_header.has_value());
  EXPECT_EQ(*failed.type_header, "OrderCreated");
  // Every other header, in its order, a second "id" among them: the dead letter loses none.
  ASSERT_EQ(failed.other_headers.size(), 3u);
  EXPECT_EQ(failed.other_headers[0].name, "trace");
  EXPECT_FALSE(failed.other_headers[0].value.has_value());
  EXPECT_EQ(failed.other_headers[1].name, "id");
  EXPECT_EQ(failed.other_headers[2].name, "tenant");
  ASSERT_TRUE(failed.other_headers[2].value.has_value());
  EXPECT_EQ(*failed.other_headers[2].value, "t9");
}

TEST(HeldRecord, ATombstoneHasNoValue) {
  sink::Record record;
  record.topic = "orders";
  const aws::HeldRecord held = aws::HeldRecord::of(record, 1);
  EXPECT_EQ(held.bytes, 0u);
  const sink::Delivery failed = held.failed(sink::ErrorKind::kTransient, "Halted", "halted");
  EXPECT_FALSE(failed.key.has_value());
  EXPECT_FALSE(failed.value.has_value());
  EXPECT_FALSE(failed.size_error);
}

TEST(RetryDelay, DoublesFromTheBaseToTheCapJitteredInItsUpperHalf) {
  std::mt19937_64 rng(7);
  for (int attempts = 0; attempts < 40; ++attempts) {
    const auto full = std::min<std::int64_t>(10'000, std::int64_t{100} << std::min(attempts, 16));
    for (int i = 0; i < 50; ++i) {
      const auto d = aws::retry_delay(attempts, 100ms, 10'000ms, rng).count();
      EXPECT_GE(d, full / 2) << "attempt " << attempts;
      EXPECT_LE(d, full) << "attempt " << attempts;
    }
  }
}

TEST(RetryLog, OneLineInFiveSecondsCountingTheRetriesBetween) {
  aws::RetryLog log;
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  EXPECT_EQ(log.count(t0), 1u);  // the first retry is said at once
  EXPECT_EQ(log.count(t0 + 1s), 0u);
  EXPECT_EQ(log.count(t0 + 4s), 0u);
  EXPECT_EQ(log.count(t0 + 5s), 3u);  // the two kept back and this one
  EXPECT_EQ(log.count(t0 + 6s), 0u);
  EXPECT_EQ(log.count(t0 + 11s), 2u);
}

}  // namespace
