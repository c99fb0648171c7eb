// The SQS sink's logic without I/O: a record as an SQS message (body, binary payloads, FIFO ids,
// attributes and what happens past SQS's 10), and GroupScheduler's order: batches within the
// limits, one entry of a group in flight, a throttled entry with a later one of its group
// waiting, other groups flowing.
#include "aws/sqs_batching.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace aws = outbox::aws;
namespace sink = outbox::sink;
using Clock = std::chrono::steady_clock;

std::map<std::string, aws::SqsMessageAttribute> by_name(const aws::SqsSendEntry& e) {
  std::map<std::string, aws::SqsMessageAttribute> out;
  for (const auto& a : e.attributes) out[a.name] = a;
  return out;
}

TEST(SqsMapping, FifoMessageOfAnOutboxEvent) {
  const sink::Header headers[] = {{"id", "6c1f0e0e-1a4b-4c55-9b9e-0d3f5c2d7a10"},
                                  {"type", "OrderCreated"},
                                  {"traceparent", std::nullopt},
                                  {"region", ""}};
  sink::Record r{"outbox.event.order", "order-42", R"({"total":12})", headers};
  const aws::MappedMessage m = aws::map_record(r, true, 262'144);
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.entry.body, R"({"total":12})");
  EXPECT_EQ(m.entry.group_id, "order-42");
  EXPECT_EQ(m.entry.deduplication_id, "6c1f0e0e-1a4b-4c55-9b9e-0d3f5c2d7a10");
  auto a = by_name(m.entry);
  ASSERT_EQ(a.size(), 4u);  // NULL and empty headers left out
  EXPECT_EQ(a["topic"].value, "outbox.event.order");
  EXPECT_EQ(a["id"].value, "6c1f0e0e-1a4b-4c55-9b9e-0d3f5c2d7a10");
  EXPECT_EQ(a["type"].value, "OrderCreated");
  EXPECT_EQ(a["key"].value, "order-42");
  EXPECT_EQ(a["type"].data_type, "String");
  EXPECT_EQ(m.entry.attributes[0].name, "id");
}

TEST(SqsMapping, StandardQueueHasNoGroupNorDeduplicationId) {
  const sink::Header headers[] = {{"id", "a"}};
  sink::Record r{"t", "k", "v", headers};
  const aws::MappedMessage m = aws::map_record(r, false, 0);
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.entry.group_id, "");
  EXPECT_EQ(m.entry.deduplication_id, "");
}

TEST(SqsMapping, BinaryPayloadGoesAsBase64WithAnAttributeSayingSo) {
  const std::string bytes("\x00\x01\xff\xfe payload", 12);
  const sink::Header headers[] = {{"id", "1"}};
  sink::Record r{"t", "k", bytes, headers};
  const aws::MappedMessage m = aws::map_record(r, true, 0);
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.entry.body, "AAH//iBwYXlsb2Fk");
  EXPECT_EQ(by_name(m.entry)["outbox.body"].value, "base64");
  // Control characters SQS refuses in text make base64 too; tab, newline and CR do not.
  sink::Record ctl{"t", "k", std::string_view("a\x01z"), headers};
  EXPECT_EQ(aws::map_record(ctl, true, 0).entry.body, "YQF6");
  sink::Record ok{"t", "k", std::string_view("a\tb\nc\r\xc3\xa9"), headers};
  EXPECT_EQ(aws::map_record(ok, true, 0).entry.body, "a\tb\nc\r\xc3\xa9");
  EXPECT_EQ(by_name(aws::map_record(ok, true, 0).entry).count("outbox.body"), 0u);
}

TEST(SqsMapping, NullAndEmptyPayloads) {
  const sink::Header headers[] = {{"id", "1"}};
  sink::Record null_value{"t", "k", std::nullopt, headers};
  auto m = aws::map_record(null_value, true, 0);
  EXPECT_EQ(m.entry.body, "null");
  EXPECT_EQ(by_name(m.entry)["outbox.body"].value, "null");
  sink::Record empty{"t", "k", "", headers};
  m = aws::map_record(empty, true, 0);
  EXPECT_EQ(m.entry.body, "null");
  EXPECT_EQ(by_name(m.entry)["outbox.body"].value, "empty");
}

TEST(SqsMapping, KeylessRecordGroupsByTopicAndLongKeysAreHashed) {
  const sink::Header headers[] = {{"id", "1"}};
  sink::Record keyless{"outbox.event.order", std::nullopt, "{}", headers};
  EXPECT_EQ(aws::map_record(keyless, true, 0).entry.group_id, "outbox.event.order");
  const std::string long_key(200, 'k');
  sink::Record long_one{"t", long_key, "{}", headers};
  const std::string g = aws::map_record(long_one, true, 0).entry.group_id;
  EXPECT_EQ(g.size(), 71u);
  EXPECT_TRUE(g.starts_with("sha256:"));
  EXPECT_EQ(g, aws::map_record(long_one, true, 0).entry.group_id);  // one key, one group
  sink::Record spaced{"t", "a b", "{}", headers};
  EXPECT_TRUE(aws::map_record(spaced, true, 0).entry.group_id.starts_with("sha256:"));
  EXPECT_NE(aws::map_record(spaced, true, 0).entry.group_id, g);
  // The key stays whole in its attribute.
  EXPECT_EQ(by_name(aws::map_record(long_one, true, 0).entry)["key"].value, long_key);
}

TEST(SqsMapping, HeaderValueThatIsNotTextGoesBinary) {
  const sink::Header headers[] = {{"id", "1"}, {"blob", std::string_view("\x01\x02", 2)}};
  sink::Record r{"t", "k", "{}", headers};
  auto a = by_name(aws::map_record(r, true, 0).entry);
  EXPECT_EQ(a["blob"].data_type, "Binary");
  EXPECT_EQ(a["blob"].value, std::string("\x01\x02", 2));
}

TEST(SqsMapping, PastTenAttributesTheRestGoesInOutboxHeaders) {
  // CloudEvents' attributes, a trace context and a placed header: 12 with id, type and key.
  const sink::Header headers[] = {
      {"id", "1"},
      {"type", "T"},
      {"ce_specversion", "1.0"},
      {"ce_id", "1"},
      {"ce_source", "/s"},
      {"ce_type", "T"},
      {"ce_time", "2026-12-04T06:00:00Z"},
      {"ce_subject", "k"},
      {"content-type", "application/json"},
      {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
      {"tracestate", "congo=t61rcWkgMzE"},
      {"bad name!", "x"}};
  sink::Record r{"t", "k", "{}", headers};
  const aws::MappedMessage m = aws::map_record(r, true, 0);
  ASSERT_EQ(m.error, "");
  ASSERT_EQ(m.entry.attributes.size(), 10u);
  EXPECT_EQ(m.entry.attributes[0].name, "id");
  EXPECT_EQ(m.entry.attributes[1].name, "type");
  EXPECT_EQ(m.entry.attributes[2].name, "key");
  EXPECT_EQ(m.entry.attributes[3].name, "topic");
  EXPECT_EQ(m.entry.attributes[9].name, "outbox.headers");
  // Every header is somewhere: nothing dropped.
  std::set<std::string> seen;
  for (std::size_t i = 0; i < 9; ++i) seen.insert(m.entry.attributes[i].name);
  simdjson::dom::parser parser;
  simdjson::dom::object rest = parser.parse(m.entry.attributes[9].value).get_object();
  for (auto field : rest) seen.insert(std::string(field.key));
  for (const auto& h : headers) EXPECT_TRUE(seen.contains(std::string(h.name))) << h.name;
  EXPECT_EQ(std::string_view(rest["bad name!"].get_string().value()), "x");
}

TEST(SqsMapping, DeadLetterRecordKeepsItsOutboxFieldsAsAttributes) {
  // The dead-letter record's own headers go before the event's other headers.
  const sink::Header headers[] = {{"id", "1"},
                                  {"type", "T"},
                                  {"ce_specversion", "1.0"},
                                  {"ce_id", "1"},
                                  {"ce_source", "/s"},
                                  {"ce_type", "T"},
                                  {"ce_time", "x"},
                                  {"outbox.error", "refused"},
                                  {"outbox.original.topic", "t"},
                                  {"outbox.table", "public.outbox"},
                                  {"outbox.lsn", "0/1"}};
  sink::Record r{"outbox.dlq", "k", std::nullopt, headers};
  auto a = by_name(aws::map_record(r, true, 0).entry);
  EXPECT_EQ(a.size(), 10u);
  for (const char* n : {"outbox.error", "outbox.original.topic", "outbox.table", "outbox.lsn"}) {
    EXPECT_EQ(a.count(n), 1u) << n;
  }
}

TEST(SqsMapping, TooLargeForTheQueueIsASizeError) {
  const sink::Header headers[] = {{"id", "1"}};
  const std::string body(2000, 'x');
  sink::Record r{"t", "k", body, headers};
  EXPECT_EQ(aws::map_record(r, true, 4096).error, "");
  const aws::MappedMessage m = aws::map_record(r, true, 1024);
  EXPECT_TRUE(m.size_error);
  EXPECT_NE(m.error.find("MessageTooLong"), std::string::npos) << m.error;
  // base64 counts as sent: 1500 bytes of binary are 2000 of text.
  const std::string binary(1500, '\x01');
  sink::Record b{"t", "k", binary, headers};
  EXPECT_TRUE(aws::map_record(b, true, 1999).size_error);
  // The queue's MaximumMessageSize up to SQS's 1 MiB: 600 KiB passes a 1 MiB queue, not a
  // 256 KiB one; a queue claiming more than 1 MiB (or none: 0) is held to 1 MiB.
  const std::string large(600 * 1024, 'x');
  sink::Record big{"t", "k", large, headers};
  EXPECT_EQ(aws::map_record(big, true, 1'048'576).error, "");
  EXPECT_TRUE(aws::map_record(big, true, 262'144).size_error);
  const std::string huge(1'048'577, 'x');
  sink::Record over{"t", "k", huge, headers};
  EXPECT_TRUE(aws::map_record(over, true, 4'194'304).size_error);
  EXPECT_TRUE(aws::map_record(over, true, 0).size_error);
}

TEST(SqsMapping, IdsAndNames) {
  EXPECT_TRUE(aws::sqs_id("abc-!~"));
  EXPECT_FALSE(aws::sqs_id(""));
  EXPECT_FALSE(aws::sqs_id("a b"));
  EXPECT_FALSE(aws::sqs_id(std::string(129, 'a')));
  EXPECT_TRUE(aws::sqs_attribute_name("outbox.original.topic"));
  EXPECT_FALSE(aws::sqs_attribute_name("AWS.x"));
  EXPECT_FALSE(aws::sqs_attribute_name("amazon.x"));
  EXPECT_FALSE(aws::sqs_attribute_name(".a"));
  EXPECT_FALSE(aws::sqs_attribute_name("a..b"));
  EXPECT_FALSE(aws::sqs_text("\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(aws::sqs_text("\xef\xbf\xbf"));  // U+FFFF
  EXPECT_TRUE(aws::sqs_text("\xf0\x9f\x98\x80"));
}

// ---- GroupScheduler ---------------------------------------------------------------------------

TEST(SqsScheduler, OneEntryOfAGroupInFlightOtherGroupsFlow) {
  aws::GroupScheduler s;
  s.add(1, "a", 10);
  s.add(2, "a", 10);
  s.add(3, "b", 10);
  s.add(4, "a", 10);
  s.add(5, "c", 10);
  const auto now = Clock::now();
  EXPECT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{1, 3, 5}));
  EXPECT_TRUE(s.next_batch(10, 1000, now).empty());  // a's next waits for 1
  s.done(3);
  EXPECT_TRUE(s.next_batch(10, 1000, now).empty());
  s.done(1);
  EXPECT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{2}));
  s.done(2);
  s.done(5);
  EXPECT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{4}));
  s.done(4);
  EXPECT_EQ(s.held(), 0u);
}

// The case the design is for: an entry throttled while a later entry of its group waits. The
// later one never goes before the retried one was acknowledged; other groups go meanwhile.
TEST(SqsScheduler, ThrottledEntryHoldsItsGroupUntilItsRetryPassed) {
  aws::GroupScheduler s;
  s.add(1, "a", 10);
  s.add(2, "b", 10);
  s.add(3, "a", 10);
  s.add(4, "b", 10);
  auto now = Clock::now();
  ASSERT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{1, 2}));
  s.retry(1, now + std::chrono::milliseconds(100));                         // throttled
  s.done(2);                                                                // passed
  EXPECT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{4}));  // b flows, not 3
  EXPECT_EQ(s.next_retry(), now + std::chrono::milliseconds(100));
  s.done(4);
  EXPECT_TRUE(s.next_batch(10, 1000, now + std::chrono::milliseconds(50)).empty());
  EXPECT_EQ(s.next_batch(10, 1000, now + std::chrono::milliseconds(100)),
            (std::vector<std::uint64_t>{1}));  // the retry, still first of a
  s.retry(1, now + std::chrono::milliseconds(300));
  EXPECT_TRUE(s.next_batch(10, 1000, now + std::chrono::milliseconds(200)).empty());
  EXPECT_EQ(s.next_batch(10, 1000, now + std::chrono::milliseconds(300)),
            (std::vector<std::uint64_t>{1}));
  s.done(1);
  EXPECT_EQ(s.next_batch(10, 1000, now + std::chrono::milliseconds(300)),
            (std::vector<std::uint64_t>{3}));
}

TEST(SqsScheduler, BatchesWithinEntriesAndBytes) {
  aws::GroupScheduler s;
  for (std::uint64_t i = 1; i <= 25; ++i) s.add(i, "g" + std::to_string(i), 100);
  const auto now = Clock::now();
  EXPECT_EQ(s.next_batch(10, 100'000, now).size(), 10u);
  EXPECT_EQ(s.next_batch(10, 350, now).size(), 3u);  // bytes
  const auto rest = s.next_batch(10, 100'000, now);
  EXPECT_EQ(rest.size(), 10u);
  EXPECT_EQ(rest.front(), 14u);
  EXPECT_EQ(s.in_flight(), 23u);
  // An entry larger than the rest of the room waits for the next batch, its group with it.
  aws::GroupScheduler t;
  t.add(1, "a", 200);
  t.add(2, "b", 900);
  t.add(3, "c", 200);
  EXPECT_EQ(t.next_batch(10, 1000, now), (std::vector<std::uint64_t>{1, 3}));
  EXPECT_EQ(t.next_batch(10, 1000, now), (std::vector<std::uint64_t>{2}));
}

TEST(SqsScheduler, StandardQueueEntriesAreIndependent) {
  aws::GroupScheduler s;
  for (std::uint64_t i = 1; i <= 5; ++i) s.add(i, "", 10);
  const auto now = Clock::now();
  EXPECT_EQ(s.next_batch(10, 1000, now).size(), 5u);
  s.retry(2, now + std::chrono::seconds(1));
  s.add(6, "", 10);
  EXPECT_EQ(s.next_batch(10, 1000, now), (std::vector<std::uint64_t>{6}));
}

TEST(SqsScheduler, ClearForgetsEverything) {
  aws::GroupScheduler s;
  s.add(1, "a", 1);
  s.add(2, "a", 1);
  (void)s.next_batch(10, 100, Clock::now());
  s.retry(1, Clock::now());
  s.clear();
  EXPECT_EQ(s.held(), 0u);
  EXPECT_FALSE(s.next_retry());
  s.add(3, "a", 1);
  EXPECT_EQ(s.next_batch(10, 100, Clock::now()), (std::vector<std::uint64_t>{3}));
}

}  // namespace
