// --messages: logical decoding messages relayed beside (or instead of) outbox inserts, in commit
// order, with the same confirmation, poison and resume rules.
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <vector>

#include "outbox/relay/pipeline.hpp"
#include "wal_frames.hpp"

namespace outbox::relay {
namespace {

constexpr std::uint32_t kRelid = 16385;
using pgoutput::Lsn;
using Step = Pipeline::Step;

// 2026-12-01 00:00:00 UTC in PostgreSQL's epoch (microseconds since 2000-01-01).
constexpr std::int64_t kCommitTime = 849'398'400'000'000;
constexpr std::int64_t kCommitTimeUnixMs = 1'796'083'200'000;

std::vector<std::byte> relation() {
  return wal::relation(
      kRelid,
      {{"id", 25}, {"aggregatetype", 25}, {"aggregateid", 25}, {"type", 25}, {"payload", 25}});
}

std::vector<std::byte> begin(std::uint64_t final_lsn) {
  return wal::begin(final_lsn, static_cast<std::uint64_t>(kCommitTime));
}

std::vector<std::byte> commit(std::uint64_t commit_lsn, std::uint64_t end_lsn) {
  return wal::commit(commit_lsn, end_lsn, static_cast<std::uint64_t>(kCommitTime));
}

std::vector<std::byte> insert(const std::string& id, const std::string& key) {
  return wal::insert(kRelid, {id, "order", key, "Created", "{}"});
}

std::string envelope(const std::string& id, const std::string& key,
                     const std::string& headers = "{}") {
  return R"({"id": ")" + id + R"(", "aggregatetype": "order", "aggregateid": ")" + key +
         R"(", "type": "Paid", "payload": {"n": 1}, "headers": )" + headers + "}";
}

std::vector<std::byte> message(std::string_view content, bool transactional = true,
                               std::string_view prefix = "outbox", std::uint64_t lsn = 0x300) {
  return wal::message(content, transactional, prefix, lsn);
}

struct Produced {
  std::string topic;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<std::pair<std::string, std::string>> headers;
  std::int64_t timestamp_ms;
  std::uint64_t opaque;
  std::size_t bytes;

  std::string header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "(none)";
  }
};

class RecordingSink : public Pipeline::Sink {
 public:
  sink::ProduceResult produce(const sink::Record& r, std::uint64_t opaque,
                               Pipeline::Route) override {
    if (queue_full) return {sink::ProduceStatus::kQueueFull, {}, false};
    Produced p{std::string(r.topic),
               r.key ? std::optional<std::string>(*r.key) : std::nullopt,
               r.value ? std::optional<std::string>(*r.value) : std::nullopt,
               {},
               r.timestamp_ms,
               opaque,
               (r.key ? r.key->size() : 0) + (r.value ? r.value->size() : 0)};
    for (const auto& h : r.headers) {
      p.headers.emplace_back(std::string(h.name), std::string(h.value.value_or("")));
    }
    records.push_back(std::move(p));
    return {sink::ProduceStatus::kQueued, {}, false};
  }
  bool stopped() const override { return false; }

  std::vector<Produced> records;
  bool queue_full = false;
};

class MessagesTest : public ::testing::Test {
 protected:
  MessagesTest() {
    config_.on_error = OnError::kDlq;
    config_.dlq_topic = "dlq";
    config_.mapper.message_prefix = "outbox";
  }

  Pipeline& pipeline() {
    if (!pipeline_) {
      pipeline_.emplace(config_, sink_, metrics_,
                        std::make_shared<spdlog::logger>(
                            "test", std::make_shared<spdlog::sinks::null_sink_mt>()));
      pipeline_->publication_verified(Lsn{~0ULL >> 1});
    }
    return *pipeline_;
  }

  Step step(const std::vector<std::byte>& frame) { return pipeline().on_frame(frame); }

  void ack(const Produced& p) {
    sink::Delivery d;
    d.opaque = p.opaque;
    d.bytes = p.bytes;
    d.ok = true;
    d.topic = p.topic;
    pipeline().on_delivery(d);
  }

  std::vector<std::string> ids_from(std::size_t first = 0) const {
    std::vector<std::string> ids;
    for (std::size_t i = first; i < sink_.records.size(); ++i) {
      ids.push_back(sink_.records[i].header("id"));
    }
    return ids;
  }

  RelayConfig config_;
  RecordingSink sink_;
  Metrics metrics_;
  std::optional<Pipeline> pipeline_;
};

TEST_F(MessagesTest, InterleavedWithInsertsInCommitOrder) {
  ASSERT_EQ(step(relation()), Step::kDone);
  for (const auto& frame :
       {begin(0x1000), insert("e1", "a"), message(envelope("m1", "a", R"({"trace": "t1"})")),
        insert("e2", "b"), commit(0x1000, 0x1010), begin(0x2000), message(envelope("m2", "b")),
        commit(0x2000, 0x2010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  EXPECT_EQ(ids_from(), (std::vector<std::string>{"e1", "m1", "e2", "m2"}));
  const Produced& m1 = sink_.records[1];
  EXPECT_EQ(m1.topic, "outbox.event.order");
  EXPECT_EQ(m1.key, "a");
  EXPECT_EQ(m1.value, R"({"n": 1})");
  EXPECT_EQ(m1.header("type"), "Paid");
  EXPECT_EQ(m1.header("trace"), "t1");
  EXPECT_EQ(m1.timestamp_ms, kCommitTimeUnixMs) << "the commit time";
  for (const Produced& p : sink_.records) ack(p);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0x2010});
}

TEST_F(MessagesTest, MessagesOnlyNeedNoTable) {
  config_.mapper.table.clear();
  for (const auto& frame : {begin(0x1000), message(envelope("m1", "a")), commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(ids_from(), std::vector<std::string>{"m1"});
  EXPECT_EQ(pipeline().confirmable(), Lsn{0}) << "not acknowledged yet";
  ack(sink_.records[0]);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0x1010});
}

TEST_F(MessagesTest, OtherPrefixesAreIgnoredAndCounted) {
  for (const auto& frame :
       {begin(0x1000), message("anything", true, "wal2json"), message(envelope("m1", "a")),
        commit(0x1000, 0x1010), message("x", false, "other")}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  EXPECT_EQ(ids_from(), std::vector<std::string>{"m1"});
  EXPECT_EQ(metrics_.other_prefix_messages, 2u);
}

TEST_F(MessagesTest, WithoutMessagesNothingIsRelayed) {
  config_.mapper.message_prefix.clear();
  for (const auto& frame : {begin(0x1000), message(envelope("m1", "a")), commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  EXPECT_TRUE(sink_.records.empty());
}

// Whoever may emit a message must not be able to stop the relay for good: under --on-error fail
// a non-transactional message with the prefix is counted and skipped, and the slot moves past it.
TEST_F(MessagesTest, NonTransactionalUnderFailIsSkippedAndConfirmedPast) {
  config_.on_error = OnError::kFail;
  ASSERT_EQ(step(message(envelope("m1", "a"), /*transactional=*/false, "outbox", 0xABC0)),
            Step::kDone);
  EXPECT_TRUE(sink_.records.empty()) << "nothing published";
  EXPECT_EQ(metrics_.rejected_messages, 1u);
  EXPECT_FALSE(pipeline().in_transaction());
  EXPECT_EQ(pipeline().confirmable(), Lsn{0xABC1}) << "just past the message";
  for (const auto& frame : {relation(), begin(0x1000), insert("e1", "a"), commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(sink_.records.size(), 1u) << "the next event still goes";
  EXPECT_EQ(sink_.records[0].header("id"), "e1");
}

TEST_F(MessagesTest, NonTransactionalUnderDlqIsDeadLetteredRawAndConfirmedPast) {
  const std::string content = envelope("m1", "a");
  ASSERT_EQ(step(message(content, /*transactional=*/false, "outbox", 0xABC0)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  const Produced& dlq = sink_.records[0];
  EXPECT_EQ(dlq.topic, "dlq");
  EXPECT_EQ(dlq.value, content) << "the raw content";
  EXPECT_NE(dlq.header("outbox.error").find("not transactional"), std::string::npos);
  EXPECT_EQ(dlq.header("outbox.lsn"), "0/ABC0");
  EXPECT_FALSE(pipeline().in_transaction());
  EXPECT_EQ(pipeline().confirmable(), Lsn{0});
  ack(dlq);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0xABC1}) << "just past the message";
}

TEST_F(MessagesTest, NonTransactionalWaitsWhenTheQueueIsFull) {
  sink_.queue_full = true;
  EXPECT_EQ(step(message("{}", false, "outbox", 0xABC0)), Step::kWaitDelivery);
  EXPECT_EQ(pipeline().tracker().tracked_transactions(), 0u) << "nothing tracked meanwhile";
  sink_.queue_full = false;
  EXPECT_EQ(step(message("{}", false, "outbox", 0xABC0)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  ack(sink_.records[0]);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0xABC1});
}

TEST_F(MessagesTest, UnparseableContentIsDeadLetteredRaw) {
  for (const auto& frame : {begin(0x1000), message("{not json"), message(envelope("m2", "a")),
                            commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  EXPECT_EQ(sink_.records[0].value, "{not json");
  EXPECT_NE(sink_.records[0].header("outbox.error").find("JSON"), std::string::npos)
      << sink_.records[0].header("outbox.error");
  EXPECT_EQ(sink_.records[0].header("outbox.table"), "logical messages with prefix 'outbox'");
  EXPECT_EQ(sink_.records[1].topic, "outbox.event.order")
      << "no aggregate was read from the bad content, so none is parked";
  EXPECT_EQ(metrics_.delivery_errors["MAPPING_ERROR"], 1u);
}

TEST_F(MessagesTest, UnparseableContentUnderFailIsSkipped) {
  config_.on_error = OnError::kFail;
  for (const auto& frame : {begin(0x1000), message(R"({"id": "m1"})"), message(envelope("m2", "a")),
                            commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].header("id"), "m2");
  EXPECT_EQ(metrics_.rejected_messages, 1u);
  ack(sink_.records[0]);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0x1010});
}

// A malformed envelope names an aggregate it cannot be trusted with: dead-lettered, it parks
// nothing, and the aggregate's next events go to their topic.
TEST_F(MessagesTest, AMalformedEnvelopeParksNoAggregate) {
  for (const auto& frame :
       {relation(), begin(0x1000),
        message(R"({"id": "m1", "aggregatetype": "order", "aggregateid": "a"})"),
        message(envelope("m2", "a")), insert("e3", "a"), commit(0x1000, 0x1010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  EXPECT_EQ(sink_.records[1].topic, "outbox.event.order");
  EXPECT_EQ(sink_.records[2].topic, "outbox.event.order");
  EXPECT_EQ(metrics_.parked_aggregates, 0u);
}

// pgoutput sends a transaction's changes, messages included, in the same order every time: a
// reconnect skips the acknowledged first ones of the cut transaction, messages counted like
// inserts (other prefixes too).
TEST_F(MessagesTest, ResumeSkipsTheAcknowledgedMessagesOfTheCutTransaction) {
  config_.max_inflight_events = 100;
  ASSERT_EQ(step(relation()), Step::kDone);
  for (const auto& frame : {begin(0x2000), insert("e1", "a"), message("x", true, "other"),
                            message(envelope("m1", "a"))}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  ASSERT_EQ(ids_from(), (std::vector<std::string>{"e1", "m1"}));
  ack(sink_.records[0]);
  ack(sink_.records[1]);
  pipeline().on_disconnect();
  pipeline().resume(/*history_continues=*/true);
  ASSERT_EQ(step(relation()), Step::kDone);
  for (const auto& frame :
       {begin(0x2000), insert("e1", "a"), message("x", true, "other"), message(envelope("m1", "a")),
        message(envelope("m2", "b")), insert("e2", "b"), commit(0x2000, 0x2010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  EXPECT_EQ(ids_from(2), (std::vector<std::string>{"m2", "e2"}));
  EXPECT_EQ(metrics_.resent_inserts_skipped, 2u) << "e1 and m1";
  EXPECT_EQ(metrics_.other_prefix_messages, 1u) << "counted when first sent";
  ack(sink_.records[2]);
  ack(sink_.records[3]);
  EXPECT_EQ(pipeline().confirmable(), Lsn{0x2010});
}

TEST_F(MessagesTest, ResumeProducesUnacknowledgedMessagesAgain) {
  config_.max_inflight_events = 100;
  for (const auto& frame : {begin(0x2000), message(envelope("m1", "a"))}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  pipeline().on_disconnect();
  pipeline().resume(/*history_continues=*/true);
  for (const auto& frame : {begin(0x2000), message(envelope("m1", "a")), commit(0x2000, 0x2010)}) {
    ASSERT_EQ(step(frame), Step::kDone);
  }
  EXPECT_EQ(ids_from(), (std::vector<std::string>{"m1", "m1"})) << "duplicates, never a gap";
}

TEST_F(MessagesTest, AcknowledgedNonTransactionalMessageIsNotDeadLetteredAgain) {
  ASSERT_EQ(step(message("{}", false, "outbox", 0xABC0)), Step::kDone);
  ack(sink_.records[0]);
  pipeline().on_disconnect();
  pipeline().resume(/*history_continues=*/true);
  ASSERT_EQ(step(message("{}", false, "outbox", 0xABC0)), Step::kDone);
  EXPECT_EQ(sink_.records.size(), 1u);
}

// A message is never a fail-stop for what the relay finds wrong with it, but a record the broker
// itself refused stays one (docs/security.md), as on_delivery() cannot tell a message's record:
// under exactly-once, a message refused twice stops the relay under --on-error fail.
TEST_F(MessagesTest, UnderExactlyOnceAMessageTheBrokerRefusedTwiceStopsTheRelayUnderFail) {
  config_.delivery = DeliveryMode::kExactlyOnce;
  config_.on_error = OnError::kFail;
  Pipeline& p = pipeline();
  const auto stream_m1 = [&] {
    for (const auto& frame :
         {begin(0x1000), message(envelope("m1", "a")), commit(0x1000, 0x1010)}) {
      ASSERT_EQ(step(frame), Step::kDone);
    }
  };
  for (int refusal = 0; refusal < 2; ++refusal) {
    ASSERT_NO_FATAL_FAILURE(stream_m1());
    ASSERT_EQ(sink_.records.size(), static_cast<std::size_t>(refusal + 1));
    // The broker refuses the message's record (its batch): the Kafka transaction aborts.
    const std::string id = sink_.records.back().header("id");
    sink::Delivery refused;
    refused.opaque = sink_.records.back().opaque;
    refused.ok = false;
    refused.kind = sink::ErrorKind::kBatch;
    refused.error_name = "INVALID_RECORD";
    refused.error = "INVALID_RECORD: refused";
    refused.id_header = id;
    p.on_delivery(refused);
    ASSERT_TRUE(p.rewinding());
    p.rewound();
    p.on_disconnect();
    p.resume(true);
  }
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  try {
    step(message(envelope("m1", "a")));
    FAIL() << "a message the broker refused twice must stop the relay under --on-error fail";
  } catch (const FatalError& e) {
    EXPECT_EQ(e.fatal.code, kExitPoisonEvent);
    EXPECT_NE(e.fatal.message.find("m1"), std::string::npos) << e.fatal.message;
    EXPECT_NE(e.fatal.message.find("INVALID_RECORD"), std::string::npos) << e.fatal.message;
  }
  EXPECT_EQ(metrics_.rejected_messages, 0u) << "not skipped as a rejected message";
}

}  // namespace
}  // namespace outbox::relay
