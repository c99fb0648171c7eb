// The Kafka record of --format cloudevents and the trace context columns: Debezium's id and type
// headers first, then the CloudEvents attributes with ce_time from the Begin's commit time (in
// microseconds), the trace context, the placements; an invalid traceparent counted in the metric
// and the event still produced; a row without a type dead-lettered, and the parked event after it
// keeping its CloudEvents headers.
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

constexpr std::uint32_t kRelid = 16390;
constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// id, aggregatetype, aggregateid, type, payload (jsonb), traceparent, tracestate, tenant.
std::vector<std::byte> relation() {
  return wal::relation(kRelid, {{"id", 2950},
                                {"aggregatetype", 25},
                                {"aggregateid", 25},
                                {"type", 25},
                                {"payload", 3802},
                                {"traceparent", 25},
                                {"tracestate", 25},
                                {"tenant", 25}});
}

// Commit time 2026-12-01T05:55:23.123456Z, in PostgreSQL's microseconds since 2000-01-01.
constexpr std::uint64_t kPgCommitTime = 1'796'104'523'123'456ULL - 946'684'800'000'000ULL;

std::vector<std::byte> begin(std::uint64_t final_lsn) {
  return wal::begin(final_lsn, kPgCommitTime);
}

std::vector<std::byte> insert(const std::string& id, const std::string& key,
                              std::optional<std::string> type,
                              std::optional<std::string> traceparent) {
  return wal::insert(
      kRelid, {id, "order", key, std::move(type), "{}", std::move(traceparent), "rojo=1", "acme"});
}

using Headers = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct Produced {
  std::string topic;
  Headers headers;
  std::int64_t timestamp_ms;
};

class Sink : public Pipeline::Sink {
 public:
  sink::ProduceResult produce(const sink::Record& r, std::uint64_t, Pipeline::Route) override {
    Produced p{std::string(r.topic), {}, r.timestamp_ms};
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

class PipelineCloudEvents : public ::testing::Test {
 protected:
  PipelineCloudEvents() {
    config_.on_error = OnError::kDlq;
    config_.dlq_topic = "dlq";
    config_.mapper.format = mapping::Format::kCloudEvents;
    config_.mapper.column_traceparent = "traceparent";
    config_.mapper.column_tracestate = "tracestate";
    config_.mapper.additional_placements = {
        {.column = "tenant", .kind = mapping::Placement::Kind::kHeader, .alias = "ce_tenant"}};
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

TEST_F(PipelineCloudEvents, HeadersInOrderWithTheCommitTime) {
  ASSERT_EQ(step(insert("e1", "a", "Paid", kTraceparent)), Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 1u);
  EXPECT_EQ(sink_.records[0].topic, "outbox.event.order");
  EXPECT_EQ(sink_.records[0].headers, (Headers{{"id", "e1"},
                                               {"type", "Paid"},
                                               {"ce_specversion", "1.0"},
                                               {"ce_id", "e1"},
                                               {"ce_source", "/outbox/order"},
                                               {"ce_type", "Paid"},
                                               {"ce_time", "2026-12-01T05:55:23.123456Z"},
                                               {"ce_subject", "a"},
                                               {"content-type", "application/json"},
                                               {"traceparent", kTraceparent},
                                               {"tracestate", "rojo=1"},
                                               {"ce_tenant", "acme"}}));
  EXPECT_EQ(sink_.records[0].timestamp_ms, 1'796'104'523'123);
  EXPECT_EQ(metrics_.invalid_traceparents, 0u);
}

TEST_F(PipelineCloudEvents, InvalidTraceparentIsCountedAndTheEventGoes) {
  ASSERT_EQ(step(insert("e1", "a", "Paid", "00-bad")), Pipeline::Step::kDone);
  ASSERT_EQ(step(insert("e2", "b", "Paid", "nope")), Pipeline::Step::kDone);
  ASSERT_EQ(step(insert("e3", "c", "Paid", std::nullopt)), Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 3u);
  EXPECT_EQ(metrics_.invalid_traceparents, 2u) << "a NULL column is no invalid value";
  for (const Produced& p : sink_.records) {
    EXPECT_EQ(p.topic, "outbox.event.order");
    for (const auto& [name, value] : p.headers) {
      EXPECT_NE(name, "traceparent");
      EXPECT_NE(name, "tracestate");
    }
  }
}

TEST_F(PipelineCloudEvents, NullTypeIsDeadLetteredAndItsAggregateParkedWithItsHeaders) {
  ASSERT_EQ(step(insert("e1", "a", std::nullopt, kTraceparent)), Pipeline::Step::kDone);
  ASSERT_EQ(step(insert("e2", "a", "Paid", kTraceparent)), Pipeline::Step::kDone);
  ASSERT_EQ(sink_.records.size(), 2u);
  EXPECT_EQ(sink_.records[0].topic, "dlq");
  bool named = false;
  for (const auto& [name, value] : sink_.records[0].headers) {
    if (name == "outbox.error") named = value && value->find("ce_type") != std::string::npos;
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(sink_.records[1].topic, "dlq");
  const Headers& parked = sink_.records[1].headers;
  ASSERT_GE(parked.size(), 12u);
  EXPECT_EQ(parked[2],
            (std::pair<std::string, std::optional<std::string>>{"ce_specversion", "1.0"}));
  EXPECT_EQ(parked[11], (std::pair<std::string, std::optional<std::string>>{"ce_tenant", "acme"}));
}

}  // namespace
}  // namespace outbox::relay
