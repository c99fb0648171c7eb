// /metrics as Prometheus reads it: every series the operating guide documents, with HELP and
// TYPE, labels escaped, a cumulative histogram whose +Inf bucket equals its count.
#include "outbox/app/prometheus.hpp"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

namespace outbox::app {
namespace {

relay::Metrics sample_metrics() {
  relay::Metrics m;
  m.events_published["outbox.event.Order"] = 7;
  m.events_published["outbox.event.Customer"] = 3;
  m.bytes_published = 1234;
  m.delivery_errors["msg_size_too_large"] = 2;
  m.dlq_events = 1;
  m.transactions_confirmed = 5;
  m.reconnects = 4;
  m.backpressure_seconds = 1.5;
  m.state = relay::State::kStreaming;
  m.confirmed_lsn = *pgoutput::Lsn::parse("1/20");
  m.received_lsn = *pgoutput::Lsn::parse("1/40");
  m.server_wal_end = *pgoutput::Lsn::parse("1/100");
  m.events_in_flight = 9;
  m.bytes_in_flight = 900;
  m.oldest_unacked_age_seconds = 0.25;
  m.commit_to_ack_seconds.observe(0.0005);  // first bucket
  m.commit_to_ack_seconds.observe(0.004);   // le 0.005
  m.commit_to_ack_seconds.observe(0.004);
  m.commit_to_ack_seconds.observe(100);  // +Inf only
  m.commit_to_read_seconds.observe(0.002);
  return m;
}

// name{labels} -> value, from the exposition text; comments checked separately.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

const RelayIdentity kIdentity{"my_slot", "my_pub", "public.outbox", "0.1.0"};

TEST(Prometheus, EveryDocumentedSeriesWithItsValue) {
  const std::string text = render_prometheus(sample_metrics(), kIdentity);
  auto s = samples(text);
  EXPECT_EQ(s["outbox_relay_events_published_total{topic=\"outbox.event.Order\"}"], "7");
  EXPECT_EQ(s["outbox_relay_events_published_total{topic=\"outbox.event.Customer\"}"], "3");
  EXPECT_EQ(s["outbox_relay_bytes_published_total"], "1234");
  EXPECT_EQ(s["outbox_relay_delivery_errors_total{reason=\"msg_size_too_large\"}"], "2");
  EXPECT_EQ(s["outbox_relay_dlq_events_total"], "1");
  EXPECT_EQ(s["outbox_relay_transactions_confirmed_total"], "5");
  EXPECT_EQ(s["outbox_relay_confirmed_lsn"], std::to_string((1ULL << 32) + 0x20));
  EXPECT_EQ(s["outbox_relay_received_lsn"], std::to_string((1ULL << 32) + 0x40));
  EXPECT_EQ(s["outbox_relay_server_wal_end_lsn"], std::to_string((1ULL << 32) + 0x100));
  EXPECT_EQ(s["outbox_relay_lag_bytes"], std::to_string(0x100 - 0x20));
  EXPECT_EQ(s["outbox_relay_events_in_flight"], "9");
  EXPECT_EQ(s["outbox_relay_bytes_in_flight"], "900");
  EXPECT_EQ(s["outbox_relay_oldest_in_flight_age_seconds"], "0.25");
  EXPECT_EQ(s["outbox_relay_reconnects_total"], "4");
  EXPECT_EQ(s["outbox_relay_backpressure_seconds_total"], "1.5");
  EXPECT_EQ(s["outbox_relay_state{state=\"streaming\"}"], "1");
  EXPECT_EQ(s["outbox_relay_state{state=\"connecting\"}"], "0");
  EXPECT_EQ(s["outbox_relay_state{state=\"standby\"}"], "0");
  EXPECT_EQ(s["outbox_relay_state{state=\"backpressured\"}"], "0");
  EXPECT_EQ(s["outbox_relay_state{state=\"stopping\"}"], "0");
  EXPECT_EQ(s["outbox_relay_producer_healthy"], "1");
  EXPECT_EQ(s["outbox_relay_info{slot=\"my_slot\",publication=\"my_pub\",table=\"public.outbox\","
              "version=\"0.1.0\"}"],
            "1");
}

TEST(Prometheus, HistogramIsCumulativeWithInfEqualToCount) {
  auto s = samples(render_prometheus(sample_metrics(), kIdentity));
  const std::string b = "outbox_relay_commit_to_ack_seconds_bucket";
  EXPECT_EQ(s[b + "{le=\"0.001\"}"], "1");
  EXPECT_EQ(s[b + "{le=\"0.003\"}"], "1");
  EXPECT_EQ(s[b + "{le=\"0.005\"}"], "3");
  EXPECT_EQ(s[b + "{le=\"60\"}"], "3");
  EXPECT_EQ(s[b + "{le=\"+Inf\"}"], "4");
  EXPECT_EQ(s["outbox_relay_commit_to_ack_seconds_count"], "4");
  EXPECT_EQ(s["outbox_relay_commit_to_ack_seconds_sum"], "100.0085");
  const std::string r = "outbox_relay_commit_to_read_seconds_bucket";
  EXPECT_EQ(s[r + "{le=\"0.001\"}"], "0");
  EXPECT_EQ(s[r + "{le=\"0.002\"}"], "1");
  EXPECT_EQ(s[r + "{le=\"+Inf\"}"], "1");
  EXPECT_EQ(s["outbox_relay_commit_to_read_seconds_count"], "1");
  // Buckets never decrease.
  std::uint64_t previous = 0;
  for (double bound : relay::Histogram::kBounds) {
    std::ostringstream le;
    le << bound;
    auto it = s.find(b + "{le=\"" + le.str() + "\"}");
    ASSERT_NE(it, s.end()) << bound;
    EXPECT_GE(std::stoull(it->second), previous);
    previous = std::stoull(it->second);
  }
}

TEST(Prometheus, EveryFamilyHasHelpAndTypeBeforeItsSamples) {
  const std::string text = render_prometheus(sample_metrics(), kIdentity);
  std::istringstream in(text);
  std::map<std::string, std::string> types;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(types.emplace(name, type).second) << "TYPE twice for " << name;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string sfx = suffix;
      if (family.size() > sfx.size() && family.ends_with(sfx) &&
          types.count(family.substr(0, family.size() - sfx.size()))) {
        family = family.substr(0, family.size() - sfx.size());
      }
    }
    ASSERT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
    if (types[family] == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
  EXPECT_EQ(types["outbox_relay_commit_to_ack_seconds"], "histogram");
  EXPECT_EQ(types["outbox_relay_commit_to_read_seconds"], "histogram");
  EXPECT_EQ(types["outbox_relay_state"], "gauge");
  EXPECT_TRUE(text.ends_with("\n"));
}

TEST(Prometheus, LabelValuesAreEscaped) {
  relay::Metrics m;
  m.delivery_errors["bad \"quote\" \\ and\nnewline"] = 1;
  auto s = samples(render_prometheus(m, kIdentity));
  EXPECT_EQ(
      s["outbox_relay_delivery_errors_total{reason=\"bad \\\"quote\\\" \\\\ and\\nnewline\"}"],
      "1");
}

TEST(Prometheus, LagIsZeroBeforeTheFirstKeepaliveAndNeverNegative) {
  relay::Metrics m;
  m.confirmed_lsn = *pgoutput::Lsn::parse("0/500");
  EXPECT_EQ(lag_bytes(m), 0u);
  m.server_wal_end = *pgoutput::Lsn::parse("0/400");
  EXPECT_EQ(lag_bytes(m), 0u);
  m.server_wal_end = *pgoutput::Lsn::parse("0/600");
  EXPECT_EQ(lag_bytes(m), 0x100u);
}

}  // namespace
}  // namespace outbox::app
