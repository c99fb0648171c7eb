// The Kafka record of the outbox shapes (README "More of Debezium's outbox shapes"): the header
// placements after id and type, the partition and the timestamp from columns, a tombstone's null
// value; and the dead-letter record keeping the header placements, whether the event was refused
// before it was produced (parked) or by the broker.
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/relay/pipeline.hpp"
#include "wal_frames.hpp"

namespace outbox::relay {
namespace {

constexpr std::uint32_t kRelid = 16386;

// id, aggregatetype, aggregateid, type, payload (bytea), tenant, shard (int4), at (timestamptz).
std::vector<std::byte> relation() {
  return wal::relation(kRelid, {{"id", 2950},
                                {"aggregatetype", 25},
                                {"aggregateid", 25},
                                {"type", 25},
                                {"payload", 17},
                                {"tenant", 25},
                                {"shard", 23},
                                {"at", 1184}});
}

// Commit time: 2000-01-01 00:00:00 UTC.
std::vector<std::byte> begin(std::uint64_t final_lsn) { return wal::begin(final_lsn); }

std::vector<std::byte> insert(const std::string& id, const std::string& key,
                              std::optional<std::string> payload, std::optional<std::string> tenant,
                              std::optional<std::string> shard, std::optional<std::string> at) {
  return wal::insert(kRelid, {id, "order", key, "Paid", std::move(payload), std::move(tenant),
                              std::move(shard), std::move(at)});
}

struct Produced {
  std::string topic;
  std::optional<std::string> value;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
  std::int64_t timestamp_ms;
  std::int32_t partition;
  std::uint64_t opaque;
};

class Sink : public Pipeline::Sink {
 public:
  sink::ProduceResult produce(const sink::Record& r, std::uint64_t opaque,
                               Pipeline::Route) override {
    Produced p{std::string(r.topic),
               r.value ? std::optional<std::string>(*r.value) : std::nullopt,
               {},
               r.timestamp_ms,
               r.partition,
               opaque};
    for (const auto& h : r.headers) {
      p.headers.emplace_back(std::string(h.name),
                             h.value ? std::optional<std::string>(*h.value) : std::nullopt);
    }
    records.push_back(std::move(p));
    return {sink::ProduceStatus::kQueued, {}, false};
  }
  bool stopped() const override { return false; }
  std::vector<Produced> records;
};

using Headers = std::vector<std::pair<std::string, std::optional<std::string>>>;

class PipelineShapes : public ::testing::Test {
 protected:
  PipelineShapes() {
    config_.on_error = OnError::kDlq;
    config_.dlq_topic = "dlq";
    config_.mapper.additional_placements = {
        {.column = "tenant", .kind = mapping::Placement::Kind::kHeader, .alias = "tenant"},
        {.column = "shard", .kind = mapping::Placement::Kind::kPartition, .alias = "shard"},
        {.column = "type", .kind = mapping::Placement::Kind::kHeader, .alias = "eventType"}};
    config_.mapper.column_timestamp = "at";
    config_.mapper.tombstone_on_empty_payload = true;
    pipeline_.emplace(
        config_, sink_, metrics_,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()));
    pipeline_->publication_verified(pgoutput::Lsn{~0ULL >> 1});
    EXPECT_EQ(pipeline_->on_frame(relation()), Pipeline::Step::kDone);
    EXPECT_EQ(pipeline_->on_frame(begin(0x1000)), Pipeline::Step::kDone);
  }
  Pipeline::Step step(const std::vector<std::byte>& frame) { return pipeline_->on_frame(frame); }

  RelayConfig config_;
  Sink sink_;
  Metrics metrics_;
  std::optional<Pipeline> pipeline_;
};

constexpr std::int64_t kCommitTimeMs = 946'684'800'000;  // the Begin's commit time

TEST_F(PipelineShapes, RecordCarriesPlacementsTimestampAndRawBytes) {
  ASSERT_EQ(step(insert("e1", "a", "\\x00ff41", "acme", "3", "2021-03-04 05:06:07.891+00")),
            Pipeline::Step::kDone);
  ASSERT_EQ(step(insert("e2", "b", "\\x", std::nullopt, std::nullopt, std::nullopt)),
            Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  const Produced& r = sink_.records[0];
  EXPECT_EQ(r.topic, "outbox.event.order");
  EXPECT_EQ(r.value, std::string("\x00\xff\x41", 3));
  EXPECT_EQ(r.headers,
            (Headers{{"id", "e1"}, {"type", "Paid"}, {"tenant", "acme"}, {"eventType", "Paid"}}));
  EXPECT_EQ(r.partition, 3);
  EXPECT_EQ(r.timestamp_ms, 1'614'834'367'891);
  const Produced& defaults = sink_.records[1];
  EXPECT_EQ(defaults.value, "");
  EXPECT_EQ(
      defaults.headers,
      (Headers{{"id", "e2"}, {"type", "Paid"}, {"tenant", std::nullopt}, {"eventType", "Paid"}}));
  EXPECT_EQ(defaults.partition, -1) << "the partitioner's choice";
  EXPECT_EQ(defaults.timestamp_ms, kCommitTimeMs);
}

TEST_F(PipelineShapes, NullPayloadIsATombstone) {
  ASSERT_EQ(step(insert("e1", "a", std::nullopt, "acme", std::nullopt, std::nullopt)),
            Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].topic, "outbox.event.order");
  EXPECT_EQ(sink_.records[0].value, std::nullopt);
}

TEST_F(PipelineShapes, DeadLetterRecordsKeepTheHeaderPlacements) {
  // A negative partition is a mapping error; the next event of its aggregate is parked.
  ASSERT_EQ(step(insert("e1", "a", "\\x01", "acme", "-1", std::nullopt)), Pipeline::Step::kDone);
  ASSERT_EQ(step(insert("e2", "a", "\\x02", "beta", "1", std::nullopt)), Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  EXPECT_EQ(sink_.records[0].value, std::string("\x01"));
  EXPECT_EQ(sink_.records[1].topic, "dlq");
  EXPECT_EQ(sink_.records[1].value, std::string("\x02"));
  const Headers& parked = sink_.records[1].headers;
  ASSERT_GE(parked.size(), 4u);
  EXPECT_EQ(parked[2], (std::pair<std::string, std::optional<std::string>>{"tenant", "beta"}));
  EXPECT_EQ(parked[3], (std::pair<std::string, std::optional<std::string>>{"eventType", "Paid"}));
  EXPECT_EQ(sink_.records[1].partition, -1) << "the dead-letter topic is partitioned by key";

  // Refused by the broker: the delivery report's other headers go to the dead-letter record.
  ASSERT_EQ(step(insert("e3", "b", "\\x03", "gamma", "0", std::nullopt)), Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 3u);
  sink::Delivery d;
  d.opaque = sink_.records[2].opaque;
  d.ok = false;
  d.kind = sink::ErrorKind::kRecord;
  d.error_name = "UNKNOWN_PARTITION";
  d.error = "UNKNOWN_PARTITION: no such partition";
  d.topic = "outbox.event.order";
  d.id_header = "e3";
  d.key = std::string_view("b");
  d.value = std::string_view("\x03");
  d.type_header = std::string_view("Paid");
  d.other_headers = {{"tenant", std::string_view("gamma")},
                     {"eventType", std::string_view("Paid")}};
  pipeline_->on_delivery(d);
  ASSERT_EQ(sink_.records.size(), 4u);
  const Produced& dead = sink_.records[3];
  EXPECT_EQ(dead.topic, "dlq");
  ASSERT_GE(dead.headers.size(), 4u);
  EXPECT_EQ(dead.headers[2],
            (std::pair<std::string, std::optional<std::string>>{"tenant", "gamma"}));
  EXPECT_FALSE(pipeline_->fatal().has_value());
}

}  // namespace
}  // namespace outbox::relay
