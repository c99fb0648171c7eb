// The relay's policies without I/O: frames as the walsender sends them go in, records come out
// through a recording Sink, delivery reports are handed back by the test.
#include "outbox/relay/pipeline.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "wal_frames.hpp"

namespace outbox::relay {
namespace {

constexpr std::uint32_t kRelid = 16385;

using wal::begin;
using wal::commit;
using wal::Frame;
using wal::keepalive;

std::vector<std::byte> relation() {
  return wal::relation(
      kRelid,
      {{"id", 25}, {"aggregatetype", 25}, {"aggregateid", 25}, {"type", 25}, {"payload", 25}});
}

std::vector<std::byte> insert(const std::string& id, std::optional<std::string> key,
                              std::optional<std::string> aggregatetype = "order") {
  return wal::insert(kRelid, {id, std::move(aggregatetype), std::move(key), std::string("Created"),
                              "{\"id\": \"" + id + "\"}"});
}

struct Produced {
  std::string topic;
  std::optional<std::string> key;
  std::string id;
  std::string error_header;  // outbox.error, for dead-letter records
  std::uint64_t opaque;
  Pipeline::Route route;
  std::size_t bytes;
  std::vector<std::pair<std::string, std::string>> headers = {};

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
                              Pipeline::Route route) override {
    if (queue_full) return {sink::ProduceStatus::kQueueFull, {}, false};
    if (gap) return {sink::ProduceStatus::kFailed, "_FATAL: producer stopped", false};
    // librdkafka's own check of message.max.bytes (key, value and headers).
    std::size_t size = (r.key ? r.key->size() : 0) + (r.value ? r.value->size() : 0);
    for (const auto& h : r.headers) size += h.name.size() + (h.value ? h.value->size() : 0);
    if (size > max_bytes) {
      return {sink::ProduceStatus::kFailed, "MSG_SIZE_TOO_LARGE: Message size too large", true};
    }
    Produced p{std::string(r.topic),
               r.key ? std::optional<std::string>(*r.key) : std::nullopt,
               "",
               "",
               opaque,
               route,
               (r.key ? r.key->size() : 0) + (r.value ? r.value->size() : 0)};
    for (const auto& h : r.headers) {
      if (h.name == "id") p.id = std::string(h.value.value_or(""));
      if (h.name == "outbox.error") p.error_header = std::string(h.value.value_or(""));
      p.headers.emplace_back(std::string(h.name), std::string(h.value.value_or("")));
    }
    records.push_back(p);
    return {sink::ProduceStatus::kQueued, {}, false};
  }
  bool stopped() const override { return gap; }
  bool stops_at_refusal() const override { return gapless; }

  std::vector<Produced> records;
  bool queue_full = false;
  bool gap = false;
  bool gapless = false;  // stops at a refused batch (Kafka's enable.gapless.guarantee)
  std::size_t max_bytes = 1'000'000;
};

class PipelineTest : public ::testing::Test {
 protected:
  PipelineTest() {
    config_.max_inflight_events = 4;
    config_.on_error = OnError::kDlq;
    config_.dlq_topic = "dlq";
  }

  Pipeline& pipeline() {
    if (!pipeline_) {
      pipeline_.emplace(config_, sink_, metrics_,
                        std::make_shared<spdlog::logger>(
                            "test", std::make_shared<spdlog::sinks::null_sink_mt>()));
      EXPECT_EQ(step(relation()), Pipeline::Step::kDone);
      pipeline_->publication_verified(pgoutput::Lsn{~0ULL >> 1});
    }
    return *pipeline_;
  }

  Pipeline::Step step(const std::vector<std::byte>& frame) { return pipeline_->on_frame(frame); }

  // The delivery report of a produced record.
  void report(Produced p, bool ok, std::string_view error_name = "INVALID_RECORD",
              sink::ErrorKind kind = sink::ErrorKind::kNone) {
    sink::Delivery d;
    d.opaque = p.opaque;
    d.bytes = p.bytes;
    d.ok = ok;
    d.kind = kind;
    d.topic = p.topic;
    d.id_header = p.id;
    if (p.key) d.key = std::string_view(*p.key);
    if (!ok) {
      d.error_name = error_name;
      d.error = std::string(error_name) + ": refused";
    }
    pipeline().on_delivery(d);
  }

  RelayConfig config_;
  RecordingSink sink_;
  Metrics metrics_;
  std::optional<Pipeline> pipeline_;
};

using Step = Pipeline::Step;
using pgoutput::Lsn;

TEST_F(PipelineTest, ConfirmsOnlyTheAcknowledgedPrefix) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  EXPECT_EQ(step(keepalive(0x5000, false)), Step::kKeepalive);
  EXPECT_EQ(p.confirmable(), Lsn{0}) << "a transaction is open";
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(p.confirmable(), Lsn{0});
  report(sink_.records[1], true);
  EXPECT_EQ(p.confirmable(), Lsn{0}) << "e1 is not acknowledged";
  report(sink_.records[0], true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
}

TEST_F(PipelineTest, CheckCapsTheConfirmedPosition) {
  pipeline_.emplace(
      config_, sink_, metrics_,
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()));
  ASSERT_EQ(step(relation()), Step::kDone);
  pipeline_->publication_verified(Lsn{0x1005});
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  EXPECT_EQ(pipeline_->acknowledged(), Lsn{0x1010});
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1005}) << "past the last check that passed";
  EXPECT_TRUE(pipeline_->waiting_for_check());
  pipeline_->publication_verified(Lsn{0x2000});
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1010});
  EXPECT_FALSE(pipeline_->waiting_for_check());
}

TEST_F(PipelineTest, BackpressureStopsAtTheBoundAndResumesAtHalf) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(step(insert("e" + std::to_string(i), "a")), Step::kDone);
  EXPECT_TRUE(p.backpressured());
  report(sink_.records[0], true);
  EXPECT_TRUE(p.backpressured()) << "3 in flight: above half of 4";
  report(sink_.records[1], true);
  EXPECT_FALSE(p.backpressured()) << "2 in flight: half of the bound";
  report(sink_.records[2], true);
  EXPECT_FALSE(p.backpressured());
}

TEST_F(PipelineTest, QueueFullWaitsAndProducesNothing) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  sink_.queue_full = true;
  EXPECT_EQ(step(insert("e1", "a")), Step::kWaitDelivery);
  EXPECT_EQ(p.tracker().inflight_events(), 0u);
  sink_.queue_full = false;
  EXPECT_EQ(step(insert("e1", "a")), Step::kDone);
  EXPECT_EQ(p.tracker().inflight_events(), 1u);
}

TEST_F(PipelineTest, PoisonUnderFailStopsWithExitCode3) {
  config_.on_error = OnError::kFail;
  pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  try {
    step(insert("e1", "a", std::nullopt));
    FAIL() << "a NULL aggregatetype must stop the relay";
  } catch (const FatalError& e) {
    EXPECT_EQ(e.fatal.code, kExitPoisonEvent);
    EXPECT_NE(e.fatal.message.find("e1"), std::string::npos) << e.fatal.message;
  }
  EXPECT_TRUE(sink_.records.empty());
}

TEST_F(PipelineTest, PoisonUnderDlqParksItsAggregate) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", std::nullopt)), Step::kDone);  // mapping error
  ASSERT_EQ(step(insert("e2", "a")), Step::kDone);                // same aggregate: parked
  ASSERT_EQ(step(insert("e3", "b")), Step::kDone);                // another: its topic
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  EXPECT_EQ(sink_.records[1].topic, "dlq");
  EXPECT_EQ(sink_.records[1].error_header.rfind("parked: ", 0), 0u)
      << sink_.records[1].error_header;
  EXPECT_EQ(sink_.records[2].topic, "outbox.event.order");
  EXPECT_EQ(metrics_.dlq_events, 2u);
  EXPECT_EQ(metrics_.parked_events, 1u);
  EXPECT_EQ(metrics_.parked_aggregates, 1u);
  for (const auto& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010}) << "dead-lettered events count as handled";
}

// An aggregate type that renders the relay's own checkpoint or dead-letter topic is poison: under
// fail the relay stops before writing there, under dlq the event is dead-lettered; nothing is
// written into either topic as an event.
TEST_F(PipelineTest, AnEventForTheRelaysOwnTopicsIsPoison) {
  config_.checkpoint_topic = "outbox.event.cp";
  config_.on_error = OnError::kFail;
  pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  try {
    step(insert("e1", "a", "cp"));
    FAIL() << "an event for the checkpoint topic must not be produced";
  } catch (const FatalError& e) {
    EXPECT_EQ(e.fatal.code, kExitPoisonEvent);
    EXPECT_NE(e.fatal.message.find("checkpoint topic (--checkpoint-topic)"), std::string::npos)
        << e.fatal.message;
  }
  EXPECT_TRUE(sink_.records.empty());
}

TEST_F(PipelineTest, AnEventForTheRelaysOwnTopicsIsDeadLetteredUnderDlq) {
  config_.checkpoint_topic = "outbox.event.cp";
  config_.dlq_topic = "outbox.event.dlq";
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", "cp")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b", "dlq")), Step::kDone);
  ASSERT_EQ(step(insert("e3", "c")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(sink_.records[0].topic, "outbox.event.dlq");
  EXPECT_NE(sink_.records[0].error_header.find("checkpoint topic"), std::string::npos);
  EXPECT_EQ(sink_.records[1].topic, "outbox.event.dlq");
  EXPECT_NE(sink_.records[1].error_header.find("dead-letter topic"), std::string::npos);
  EXPECT_EQ(sink_.records[2].topic, "outbox.event.order");
  EXPECT_EQ(metrics_.delivery_errors["RESERVED_TOPIC"], 2u);
  for (const auto& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
}

// --max-topics: an event rendering a topic past the first N distinct ones of the process is
// poison (dead-lettered under dlq, its aggregate parked); the N topics keep flowing.
TEST_F(PipelineTest, AnEventPastMaxTopicsIsDeadLetteredUnderDlq) {
  config_.max_topics = 2;
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", "t1")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b", "t2")), Step::kDone);
  ASSERT_EQ(step(insert("e3", "c", "t3")), Step::kDone);  // a third topic
  ASSERT_EQ(step(insert("e4", "d", "t1")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 4u);
  EXPECT_EQ(sink_.records[0].topic, "outbox.event.t1");
  EXPECT_EQ(sink_.records[1].topic, "outbox.event.t2");
  EXPECT_EQ(sink_.records[2].topic, "dlq");
  EXPECT_NE(sink_.records[2].error_header.find("past --max-topics 2"), std::string::npos)
      << sink_.records[2].error_header;
  EXPECT_EQ(sink_.records[3].topic, "outbox.event.t1");
  EXPECT_EQ(metrics_.delivery_errors["TOO_MANY_TOPICS"], 1u);
  for (const auto& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
}

TEST_F(PipelineTest, AnEventPastMaxTopicsStopsTheRelayUnderFail) {
  config_.max_topics = 1;
  config_.on_error = OnError::kFail;
  pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", "t1")), Step::kDone);
  try {
    step(insert("e2", "b", "t2"));
    FAIL() << "an event past --max-topics must not be produced";
  } catch (const FatalError& e) {
    EXPECT_EQ(e.fatal.code, kExitPoisonEvent);
    EXPECT_NE(e.fatal.message.find("--max-topics 1"), std::string::npos) << e.fatal.message;
  }
  ASSERT_EQ(sink_.records.size(), 1u);
}

// A dead-letter record too large itself (a huge key or aggregate type, which the topic header
// and the error repeat) goes compact: no value, fields cut, outbox.truncated saying so; its
// acknowledgement counts for the event and the relay goes on.
TEST_F(PipelineTest, AnOversizedEventIsDeadLetteredCompact) {
  sink_.max_bytes = 100'000;
  Pipeline& p = pipeline();
  const std::string huge(300'000, 'k');
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", huge, huge)), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  const Produced& dead = sink_.records[0];
  EXPECT_EQ(dead.topic, "dlq");
  EXPECT_EQ(dead.id, "e1");
  ASSERT_TRUE(dead.key);
  EXPECT_EQ(dead.key->rfind(std::string(1024, 'k') + "... (300000 bytes)", 0), 0u);
  EXPECT_LT(dead.header("outbox.original.topic").size(), 1100u);
  EXPECT_NE(dead.header("outbox.truncated").find("too large"), std::string::npos);
  EXPECT_EQ(sink_.records[1].topic, "outbox.event.order");
  for (const auto& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  EXPECT_FALSE(p.fatal().has_value());
}

TEST_F(PipelineTest, BrokerRefusalUnderDlqDeadLettersAndParks) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  report(sink_.records[0], false, "TOPIC_EXCEPTION", sink::ErrorKind::kRecord);
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[1].topic, "dlq");
  EXPECT_EQ(p.confirmable(), Lsn{0}) << "handled only once the dead-letter record is acknowledged";
  report(sink_.records[1], true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  ASSERT_EQ(step(begin(0x2000)), Step::kDone);
  ASSERT_EQ(step(insert("e2", "a")), Step::kDone);
  EXPECT_EQ(sink_.records.back().topic, "dlq") << "aggregate a is parked";
  EXPECT_FALSE(p.fatal().has_value());
}

// The broker (not the producer) refuses a dead-letter record as too large (the dead-letter
// topic's max.message.bytes below the producer's message.max.bytes): nothing is confirmed past
// it, the relay rewinds, and when the stream brings the event again it is dead-lettered compact.
// Only a compact record refused too stops the relay.
class BrokerRefusedDeadLetterTest : public PipelineTest {
 protected:
  void refuse_as_too_large(const Produced& r) {
    sink::Delivery d;
    d.opaque = r.opaque;
    d.bytes = r.bytes;
    d.ok = false;
    d.kind = sink::ErrorKind::kSize;
    d.size_error = true;
    d.topic = r.topic;
    d.id_header = r.id;
    if (r.key) d.key = std::string_view(*r.key);
    for (const auto& [name, value] : r.headers) {
      if (name != "id" && name != "type") d.other_headers.push_back({name, value});
    }
    d.error_name = "MSG_SIZE_TOO_LARGE";
    d.error = "MSG_SIZE_TOO_LARGE: Broker: Message size too large";
    pipeline().on_delivery(d);
  }
};

TEST_F(BrokerRefusedDeadLetterTest, GoesCompactAfterARewind) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", std::nullopt)), Step::kDone);  // mapping error
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].header("outbox.truncated"), "(none)");
  refuse_as_too_large(sink_.records[0]);
  EXPECT_FALSE(p.fatal().has_value());
  EXPECT_TRUE(p.rewinding());
  EXPECT_EQ(p.confirmable(), Lsn{0});

  sink_.records.clear();
  p.on_disconnect();
  p.rewound();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", std::nullopt)), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  EXPECT_EQ(sink_.records[0].id, "e1");
  EXPECT_NE(sink_.records[0].header("outbox.truncated").find("too large"), std::string::npos);
  report(sink_.records[0], true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  EXPECT_FALSE(p.fatal().has_value());
}

TEST_F(BrokerRefusedDeadLetterTest, ACompactRecordRefusedTooStopsTheRelay) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", std::nullopt)), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  refuse_as_too_large(sink_.records[0]);
  sink_.records.clear();
  p.on_disconnect();
  p.rewound();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", std::nullopt)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  refuse_as_too_large(sink_.records[0]);
  ASSERT_TRUE(p.fatal().has_value());
  EXPECT_EQ(p.fatal()->code, kExitPoisonEvent);
  EXPECT_EQ(p.confirmable(), Lsn{0});
}

// Bounded cardinality: past Metrics::kMaxTopicSeries topics, events count under topic="_other".
TEST_F(PipelineTest, PublishedEventsBeyondTheTopicSeriesCapCountUnderOther) {
  Pipeline& p = pipeline();
  const std::size_t topics = Metrics::kMaxTopicSeries + 50;
  for (std::size_t i = 0; i < topics; ++i) {
    ASSERT_EQ(step(begin(0x1000 + 0x100 * i)), Step::kDone);
    ASSERT_EQ(step(insert("e" + std::to_string(i), "k", "t" + std::to_string(i))), Step::kDone);
    ASSERT_EQ(step(commit(0x1000 + 0x100 * i, 0x1010 + 0x100 * i)), Step::kDone);
    report(sink_.records.back(), true);
  }
  EXPECT_EQ(metrics_.events_published.size(), Metrics::kMaxTopicSeries + 1);
  EXPECT_EQ(metrics_.events_published[std::string(Metrics::kOtherTopics)], 50u);
  EXPECT_EQ(metrics_.events_published["outbox.event.t0"], 1u);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010 + 0x100 * (topics - 1)});
}

// Bounded parked set: past its cap every aggregate is parked (nothing passes a dead-lettered
// event, nothing is dropped), and the set's memory is freed.
TEST_F(PipelineTest, PastTheParkedCapEveryAggregateIsParked) {
  config_.max_inflight_events = 1'000'000;
  Pipeline& p = pipeline();
  constexpr std::size_t kCap = 100'000;  // Pipeline's kMaxParkedAggregates
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  for (std::size_t i = 0; i <= kCap; ++i) {
    if (i == kCap) EXPECT_EQ(metrics_.all_aggregates_parked, 0u) << "not before the cap";
    ASSERT_EQ(step(insert("e" + std::to_string(i), "k" + std::to_string(i), std::nullopt)),
              Step::kDone);
  }
  EXPECT_EQ(metrics_.parked_aggregates, kCap + 1);
  EXPECT_EQ(metrics_.all_aggregates_parked, 1u) << "outbox_relay_all_aggregates_parked";
  ASSERT_EQ(step(insert("good", "never-seen")), Step::kDone);
  EXPECT_EQ(sink_.records.back().topic, "dlq") << "every aggregate is parked past the cap";
  EXPECT_EQ(sink_.records.back().error_header.rfind("parked: ", 0), 0u);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  EXPECT_EQ(sink_.records.size(), kCap + 2) << "every event went somewhere";
  for (const auto& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  EXPECT_FALSE(p.fatal().has_value());
}

TEST_F(PipelineTest, RefusedBatchRewindsAndSendsItsRecordsAloneInOrder) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  ASSERT_EQ(step(insert("e3", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  const std::vector<Produced> first(sink_.records);
  // The broker refused e1's batch (e1, e2); the producer stopped; e3 was purged unsent.
  sink_.gap = true;
  report(first[0], false, "INVALID_RECORD");
  EXPECT_TRUE(p.rewinding());
  report(first[1], false, "INVALID_RECORD");
  report(first[2], false, "_PURGE_QUEUE");
  EXPECT_FALSE(p.fatal().has_value());
  EXPECT_EQ(metrics_.dlq_events, 0u) << "nothing is poison yet";
  EXPECT_EQ(metrics_.producer_rewinds, 1u);

  // The session ended; new producer; the stream starts again at the confirmed position.
  sink_.gap = false;
  sink_.records.clear();
  p.on_disconnect();
  p.rewound();
  EXPECT_FALSE(p.rewinding());
  EXPECT_EQ(p.tracker().inflight_events(), 0u);
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].route, Pipeline::Route::kAlone);
  EXPECT_EQ(step(insert("e2", "b")), Step::kWaitDelivery) << "nothing passes a record sent alone";
  report(sink_.records[0], false, "INVALID_RECORD");  // e1 alone: the bad one
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[1].topic, "dlq");
  EXPECT_EQ(sink_.records[1].id, "e1");
  EXPECT_EQ(step(insert("e2", "b")), Step::kWaitDelivery)
      << "a record of the refused batch waits until nothing is in flight";
  report(sink_.records[1], true);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  EXPECT_EQ(sink_.records[2].route, Pipeline::Route::kAlone);
  EXPECT_EQ(step(insert("e3", "a")), Step::kWaitDelivery)
      << "no record, of the refused batch or not, passes a record sent alone";
  report(sink_.records[2], true);
  ASSERT_EQ(step(insert("e3", "a")), Step::kDone);  // purged, never sent: batched, and parked
  EXPECT_EQ(sink_.records[3].topic, "dlq") << "e3 follows e1 of aggregate a";
  EXPECT_EQ(sink_.records[3].route, Pipeline::Route::kBatched);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  report(sink_.records[3], true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
}

// A batch refused in the middle of a long stream, to a sink that stops at a refused batch
// (Kafka's enable.gapless.guarantee): the records it failed go again in windows, halved at each
// refusal and grown past it (bisection), not one round trip each; the bad one alone is poison,
// and every aggregate's first deliveries are in commit order. The broker here answers everything
// in flight at once (one round trip): a batch holding the poison (a NULL key) is refused whole,
// with the three records before it, and the producer stops, failing everything after it.
TEST_F(PipelineTest, RefusedRecordsGoAgainInWindowsHalvedAtEachRefusal) {
  config_.max_inflight_events = 100'000;
  sink_.gapless = true;
  Pipeline& p = pipeline();
  constexpr int kEvents = 1000;
  constexpr int kPoison = 600;
  constexpr int kAggregates = 7;
  const auto id = [](int i) { return "e" + std::to_string(i); };
  std::vector<int> delivered;  // first deliveries to the topic, in order
  std::set<std::string> seen;
  std::size_t answered = 0;  // sink_.records reported so far
  std::size_t round_trips = 0;
  std::size_t sent_alone = 0;
  std::size_t dead_lettered = 0;
  std::size_t largest_window = 0;  // records of the first refusal sent again in one round trip
  const auto answer = [&] {
    if (answered == sink_.records.size()) return;
    ++round_trips;
    const std::vector<Produced> flight(sink_.records.begin() + static_cast<long>(answered),
                                       sink_.records.end());
    answered = sink_.records.size();
    if (metrics_.producer_rewinds > 0) {
      std::size_t failed_before = 0;  // records of the first refusal (e597 to e1000)
      for (const Produced& r : flight) {
        if (r.topic != "dlq" && std::stoi(r.id.substr(1)) >= kPoison - 3) ++failed_before;
      }
      largest_window = std::max(largest_window, failed_before);
    }
    std::optional<std::size_t> refused_from;
    std::optional<std::size_t> poison_at;
    for (std::size_t j = 0; j < flight.size(); ++j) {
      if (flight[j].route == Pipeline::Route::kBatched && flight[j].id == id(kPoison) &&
          flight[j].topic != "dlq") {
        poison_at = j;
        refused_from = j >= 3 ? j - 3 : 0;
        break;
      }
    }
    for (std::size_t j = 0; j < flight.size(); ++j) {
      const Produced& r = flight[j];
      if (r.route == Pipeline::Route::kAlone) {
        ++sent_alone;
        const bool poison = r.id == id(kPoison);
        if (!poison && seen.insert(r.id).second) delivered.push_back(std::stoi(r.id.substr(1)));
        report(r, !poison, "INVALID_RECORD");
        continue;
      }
      if (refused_from && j >= *refused_from) {
        sink_.gap = true;  // the producer stopped
        report(r, false, j <= *poison_at ? "INVALID_RECORD" : "_PURGE_QUEUE");
        continue;
      }
      if (r.topic == "dlq") {
        EXPECT_EQ(r.id, id(kPoison)) << "only the poison is dead-lettered";
        ++dead_lettered;
      } else if (seen.insert(r.id).second) {
        delivered.push_back(std::stoi(r.id.substr(1)));
      }
      report(r, true);
    }
  };
  std::size_t sessions = 0;
  for (;;) {
    ASSERT_LT(++sessions, 50u) << "the bad record was not found";
    ASSERT_EQ(step(begin(0x1000)), Step::kDone);
    for (int i = 1; i <= kEvents && !p.rewinding();) {
      const std::optional<std::string> key =
          i == kPoison ? std::nullopt
                       : std::optional<std::string>("agg-" + std::to_string(i % kAggregates));
      const Step s = step(insert(id(i), key));
      if (s == Step::kDone) {
        ++i;
        continue;
      }
      ASSERT_EQ(s, Step::kWaitDelivery);
      answer();
    }
    if (!p.rewinding()) {
      ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
    }
    while (answered < sink_.records.size()) answer();
    if (!p.rewinding()) break;
    // The session ends; a new producer; the stream again from the confirmed position.
    sink_.gap = false;
    sink_.records.clear();
    answered = 0;
    p.on_disconnect();
    p.rewound();
  }
  ASSERT_FALSE(p.fatal().has_value()) << p.fatal()->message;
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  EXPECT_EQ(dead_lettered, 1u) << "the poison alone is dead-lettered, once";
  EXPECT_EQ(metrics_.dlq_events, 1u);
  EXPECT_EQ(delivered.size(), static_cast<std::size_t>(kEvents - 1)) << "every good event";
  std::array<int, kAggregates> last{};
  for (int seq : delivered) {
    EXPECT_GT(seq, last[seq % kAggregates]) << "aggregate " << seq % kAggregates << " out of order";
    last[seq % kAggregates] = seq;
  }
  // 404 records failed by the first refusal (597 to 1000). One at a time: 404 round trips after
  // the rewind. Bisection: about log2(404) = 8.7 rewinds more and 3 log2(404) round trips.
  EXPECT_LE(metrics_.producer_rewinds, 11u);
  EXPECT_LE(round_trips, 1u + 30u) << "one round trip for the first batch, then the windows";
  EXPECT_LE(sent_alone, 10u);
  EXPECT_GE(largest_window, 100u) << "the records went again in windows, not one at a time";
  std::cout << "[ figures ] rewinds=" << metrics_.producer_rewinds << " round_trips=" << round_trips
            << " sent_alone=" << sent_alone << " largest_window=" << largest_window << "\n";
}

// A sink whose connection was lost (NATS JetStream) stops and fails what it had in flight as
// transient: a rewind, nothing poison, and the records go again batched, not alone.
TEST_F(PipelineTest, TransientFailuresOfAStoppedSinkAreSentAgainBatched) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  const std::vector<Produced> first(sink_.records);
  sink_.gap = true;
  for (const Produced& r : first) {
    sink::Delivery d;
    d.opaque = r.opaque;
    d.bytes = r.bytes;
    d.ok = false;
    d.kind = sink::ErrorKind::kTransient;
    d.error_name = "CONNECTION_LOST";
    d.error = "NATS connection lost";
    d.topic = r.topic;
    d.id_header = r.id;
    pipeline().on_delivery(d);
  }
  EXPECT_TRUE(p.rewinding());
  EXPECT_FALSE(p.fatal().has_value());
  EXPECT_EQ(metrics_.dlq_events, 0u);
  sink_.gap = false;
  sink_.records.clear();
  p.on_disconnect();
  p.rewound();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone) << "not held back behind a record sent alone";
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[0].route, Pipeline::Route::kBatched);
  EXPECT_EQ(sink_.records[1].route, Pipeline::Route::kBatched);
  EXPECT_NE(sink_.records[1].topic, "dlq");
}

// A delivery that timed out (librdkafka's message.timeout.ms, JetStream's acknowledgement wait)
// while the sink goes on: the broker did not answer, which says nothing against the record.
// Under --on-error dlq and fail alike: a rewind, nothing dead-lettered, parked, poison or
// suspect, and nothing confirmed past it.
class TimedOutDeliveryTest : public PipelineTest, public ::testing::WithParamInterface<OnError> {};

TEST_P(TimedOutDeliveryTest, RewindsAndSendsAgainBatched) {
  config_.on_error = GetParam();
  config_.dlq_topic = "dlq";
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  const std::vector<Produced> first(sink_.records);
  report(first[0], false, "_MSG_TIMED_OUT", sink::ErrorKind::kTransient);
  EXPECT_TRUE(p.rewinding());
  EXPECT_FALSE(p.fatal().has_value());
  report(first[1], false, "_MSG_TIMED_OUT", sink::ErrorKind::kTransient);
  EXPECT_FALSE(p.fatal().has_value());
  EXPECT_EQ(metrics_.dlq_events, 0u);
  EXPECT_EQ(sink_.records.size(), 2u) << "nothing dead-lettered";
  EXPECT_EQ(p.confirmable(), Lsn{0});

  sink_.records.clear();
  p.on_disconnect();
  p.rewound();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e2", "b")), Step::kDone) << "not held back behind a record sent alone";
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  for (const Produced& r : sink_.records) {
    EXPECT_EQ(r.route, Pipeline::Route::kBatched) << r.id;
    EXPECT_EQ(r.topic, "outbox.event.order") << r.id << " not parked";
  }
  for (const Produced& r : std::vector<Produced>(sink_.records)) report(r, true);
  EXPECT_EQ(p.confirmable(), Lsn{0x1010});
  EXPECT_FALSE(p.fatal().has_value());
}

INSTANTIATE_TEST_SUITE_P(OnError, TimedOutDeliveryTest,
                         ::testing::Values(OnError::kFail, OnError::kDlq), [](const auto& info) {
                           return std::string(info.param == OnError::kFail ? "Fail" : "Dlq");
                         });

TEST_F(PipelineTest, ProduceIntoAStoppedProducerRewindsInsteadOfPoisoning) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  sink_.gap = true;
  EXPECT_EQ(step(insert("e1", "a")), Step::kWaitDelivery);
  EXPECT_TRUE(p.rewinding());
  EXPECT_EQ(metrics_.dlq_events, 0u);
  EXPECT_FALSE(p.fatal().has_value());
}

TEST_F(PipelineTest, IdleKeepaliveMovesThePositionOnlyWithNothingInFlight) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(keepalive(0x500, false)), Step::kKeepalive);
  EXPECT_TRUE(p.keepalive().idle_advanced);
  EXPECT_EQ(p.confirmable(), Lsn{0x500});
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(keepalive(0x2000, true)), Step::kKeepalive);
  EXPECT_FALSE(p.keepalive().idle_advanced) << "a transaction is open";
  EXPECT_TRUE(p.keepalive().reply_requested);
  EXPECT_EQ(p.confirmable(), Lsn{0x500});
}

TEST_F(PipelineTest, SkippedChangesAreCounted) {
  pipeline();
  Frame f = Frame::xlog(0x300);
  f.u8('U');
  f.be(kRelid, 4);
  f.u8('N');
  f.be(0, 2);
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(f.b), Step::kDone);
  EXPECT_EQ(metrics_.skipped_changes["update"], 1u);
  EXPECT_TRUE(sink_.records.empty());
}

// A hostile aggregate type (newline, quote, forged field, invalid UTF-8) in a poison event: the
// dead-letter warnings stay one line each, the detail one quoted value with the text escaped.
TEST_F(PipelineTest, HostileAggregateTypeIsLoggedOnOneLine) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  sink->set_pattern("%v");
  pipeline_.emplace(config_, sink_, metrics_, std::make_shared<spdlog::logger>("test", sink));
  ASSERT_EQ(step(relation()), Step::kDone);
  pipeline_->publication_verified(Lsn{~0ULL >> 1});
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a", "x\n evil=1 \" forged=2 \xff")), Step::kDone);
  const std::string log = out.str();
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u) << log;  // dead_lettered, then aggregate_parked
  EXPECT_TRUE(lines[0].starts_with("event=dead_lettered ")) << log;
  EXPECT_TRUE(lines[1].starts_with("event=aggregate_parked ")) << log;
  EXPECT_NE(log.find("x\\n evil=1 \\\" forged=2 \xEF\xBF\xBD"), std::string::npos) << log;
  EXPECT_EQ(log.find('\xff'), std::string::npos) << log;
}

// ---- no re-send after a reconnect ----------------------------------------------------------

class ReconnectTest : public PipelineTest {
 protected:
  ReconnectTest() { config_.max_inflight_events = 100; }

  // Transaction 0x1000 (e1, e2) acknowledged; transaction 0x2000 cut after e3.
  void stream_until_cut(bool ack_e3) {
    pipeline();
    ASSERT_EQ(step(begin(0x1000)), Step::kDone);
    ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
    ASSERT_EQ(step(insert("e2", "b")), Step::kDone);
    ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
    ASSERT_EQ(step(begin(0x2000)), Step::kDone);
    ASSERT_EQ(step(insert("e3", "a")), Step::kDone);
    ASSERT_EQ(sink_.records.size(), 3u);
    report(sink_.records[0], true);
    report(sink_.records[1], true);
    if (ack_e3) report(sink_.records[2], true);
    pipeline_->on_disconnect();
    ASSERT_EQ(pipeline_->confirmable(), Lsn{0x1010});
  }

  // The server sends both transactions again, in full.
  void resend() {
    ASSERT_EQ(step(relation()), Step::kDone);
    for (const auto& frame :
         {begin(0x1000), insert("e1", "a"), insert("e2", "b"), commit(0x1000, 0x1010),
          begin(0x2000), insert("e3", "a"), insert("e4", "b"), commit(0x2000, 0x2010)}) {
      ASSERT_EQ(step(frame), Step::kDone);
    }
  }

  std::vector<std::string> ids_from(std::size_t first) const {
    std::vector<std::string> ids;
    for (std::size_t i = first; i < sink_.records.size(); ++i) ids.push_back(sink_.records[i].id);
    return ids;
  }
};

TEST_F(ReconnectTest, WhatKafkaAcknowledgedIsNotProducedAgain) {
  ASSERT_NO_FATAL_FAILURE(stream_until_cut(/*ack_e3=*/true));
  pipeline_->resume(/*history_continues=*/true);
  ASSERT_NO_FATAL_FAILURE(resend());
  EXPECT_EQ(ids_from(3), std::vector<std::string>{"e4"})
      << "the acknowledged transaction, and e3 before the cut, are not produced again";
  EXPECT_EQ(metrics_.resent_transactions_skipped, 1u);
  EXPECT_EQ(metrics_.resent_inserts_skipped, 3u);
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1010});
  report(sink_.records[3], true);
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x2010}) << "e3's copy before the cut and e4 acked";
}

TEST_F(ReconnectTest, UnacknowledgedInsertsOfTheCutTransactionAreProducedAgain) {
  ASSERT_NO_FATAL_FAILURE(stream_until_cut(/*ack_e3=*/false));
  pipeline_->resume(/*history_continues=*/true);
  ASSERT_NO_FATAL_FAILURE(resend());
  EXPECT_EQ(ids_from(3), (std::vector<std::string>{"e3", "e4"}));
  report(sink_.records[3], true);
  report(sink_.records[4], true);
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1010}) << "the first copy of e3 is not acknowledged";
  report(sink_.records[2], true);
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x2010});
}

TEST_F(ReconnectTest, ANewTimelineProducesEverythingAgain) {
  ASSERT_NO_FATAL_FAILURE(stream_until_cut(/*ack_e3=*/true));
  pipeline_->resume(/*history_continues=*/false);
  ASSERT_NO_FATAL_FAILURE(resend());
  EXPECT_EQ(ids_from(3), (std::vector<std::string>{"e1", "e2", "e3", "e4"}));
  EXPECT_EQ(metrics_.resent_inserts_skipped, 0u);
}

TEST_F(ReconnectTest, ACutTransactionCutAgainCountsItsSkippedInserts) {
  ASSERT_NO_FATAL_FAILURE(stream_until_cut(/*ack_e3=*/true));
  pipeline_->resume(/*history_continues=*/true);
  ASSERT_EQ(step(relation()), Step::kDone);
  ASSERT_EQ(step(begin(0x2000)), Step::kDone);
  ASSERT_EQ(step(insert("e3", "a")), Step::kDone);
  ASSERT_EQ(step(insert("e4", "b")), Step::kDone);
  ASSERT_EQ(ids_from(3), std::vector<std::string>{"e4"});
  report(sink_.records[3], true);
  pipeline_->on_disconnect();
  pipeline_->resume(/*history_continues=*/true);
  ASSERT_NO_FATAL_FAILURE(resend());
  EXPECT_EQ(ids_from(4), std::vector<std::string>{}) << "e3 and e4 were both acknowledged";
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x2010});
}

// A rewind that begins mid-stream (the relay's delivery deadline passed while the broker was
// frozen): the sink is halted, and no later event may reach it in that session, or it would
// reach the broker, when it answers again, ahead of the earlier events the rewind sends again.
TEST_F(PipelineTest, NothingIsProducedOnceARewindBegan) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  p.begin_rewind("no delivery report within message.timeout.ms");
  EXPECT_EQ(step(insert("e2", "a")), Step::kWaitDelivery);
  EXPECT_EQ(step(insert("e3", "b")), Step::kWaitDelivery);
  EXPECT_EQ(sink_.records.size(), 1u) << "an event went to the halted sink after the rewind began";
}

TEST_F(ReconnectTest, ARewindProducesTheCutTransactionAgain) {
  ASSERT_NO_FATAL_FAILURE(stream_until_cut(/*ack_e3=*/true));
  pipeline_->begin_rewind("test");
  pipeline_->rewound();
  pipeline_->resume(/*history_continues=*/true);
  ASSERT_NO_FATAL_FAILURE(resend());
  EXPECT_EQ(ids_from(3), (std::vector<std::string>{"e3", "e4"}));
}

}  // namespace
}  // namespace outbox::relay

namespace outbox::relay {
namespace {

// After a promotion: what was acknowledged before the switch point stays acknowledged (and
// skipped when the server sends it again); what lay past it goes back to it, so that the new
// timeline's own transactions there are sent.
TEST_F(PipelineTest, TimelineSwitchKeepsWhatLiesBeforeTheSwitchPoint) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  report(sink_.records[0], true);
  ASSERT_EQ(p.acknowledged(), Lsn{0x1010});
  EXPECT_EQ(p.timeline_switched(Lsn{0x2000}), Lsn{}) << "nothing lay past the switch point";
  EXPECT_EQ(p.acknowledged(), Lsn{0x1010});
  p.on_disconnect();
  p.resume(true);
  // Sent again by the promoted server: skipped, not produced twice.
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  EXPECT_EQ(sink_.records.size(), 1u);
}

TEST_F(PipelineTest, TimelineSwitchBeforeTheAcknowledgedPrefixGoesBackToIt) {
  Pipeline& p = pipeline();
  ASSERT_EQ(step(begin(0x1000)), Step::kDone);
  ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  ASSERT_EQ(step(begin(0x3000)), Step::kDone);
  ASSERT_EQ(step(insert("ghost", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x3000, 0x3010)), Step::kDone);
  report(sink_.records[0], true);
  report(sink_.records[1], true);
  ASSERT_EQ(p.acknowledged(), Lsn{0x3010});
  // The new timeline left the old one at 0x2000: the second transaction is a ghost.
  EXPECT_EQ(p.timeline_switched(Lsn{0x2000}), Lsn{0x3010}) << "how far past it Kafka was";
  EXPECT_EQ(p.acknowledged(), Lsn{0x2000});
  p.on_disconnect();
  p.resume(true);
  // The promoted server's own transaction at the same positions is new: sent, not skipped.
  ASSERT_EQ(step(begin(0x3000)), Step::kDone);
  ASSERT_EQ(step(insert("new", "a")), Step::kDone);
  ASSERT_EQ(step(commit(0x3000, 0x3010)), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(sink_.records[2].id, "new");
}

// Exactly-once: a record the broker refused goes alone after the abort; refused again, it is
// poison in the next transaction (dead-lettered with the broker's error, its aggregate parked).
TEST_F(PipelineTest, ExactlyOnceARecordRefusedTwiceIsDeadLetteredAndParksItsAggregate) {
  config_.delivery = DeliveryMode::kExactlyOnce;
  Pipeline& p = pipeline();
  const auto refuse = [&](const Produced& r) {
    report(r, false, "INVALID_RECORD", sink::ErrorKind::kBatch);
    ASSERT_TRUE(p.rewinding()) << "a refused record aborts its Kafka transaction";
    p.rewound();
    p.on_disconnect();
    p.resume(true);
  };
  const auto stream_e1 = [&] {
    ASSERT_EQ(step(begin(0x1000)), Step::kDone);
    ASSERT_EQ(step(insert("e1", "a")), Step::kDone);
    ASSERT_EQ(step(commit(0x1000, 0x1010)), Step::kDone);
  };
  ASSERT_NO_FATAL_FAILURE(stream_e1());
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].route, Pipeline::Route::kBatched);
  ASSERT_NO_FATAL_FAILURE(refuse(sink_.records[0]));

  ASSERT_NO_FATAL_FAILURE(stream_e1());
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[1].id, "e1");
  EXPECT_EQ(sink_.records[1].route, Pipeline::Route::kAlone) << "a refused record goes alone";
  ASSERT_NO_FATAL_FAILURE(refuse(sink_.records[1]));

  ASSERT_NO_FATAL_FAILURE(stream_e1());
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(sink_.records[2].topic, "dlq");
  EXPECT_EQ(sink_.records[2].id, "e1");
  EXPECT_EQ(sink_.records[2].error_header, "INVALID_RECORD: refused");
  EXPECT_EQ(sink_.records[2].header("outbox.table"), "public.outbox");
  EXPECT_EQ(metrics_.delivery_errors["INVALID_RECORD"], 1u);

  ASSERT_EQ(step(begin(0x2000)), Step::kDone);
  ASSERT_EQ(step(insert("e2", "a")), Step::kDone);
  ASSERT_EQ(sink_.records.size(), 4u);
  EXPECT_EQ(sink_.records[3].topic, "dlq") << "aggregate a is parked";
  EXPECT_EQ(metrics_.parked_events, 1u);
}

}  // namespace
}  // namespace outbox::relay
