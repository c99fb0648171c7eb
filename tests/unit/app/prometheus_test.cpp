// /metrics as Prometheus reads it: every series the operating guide documents, with HELP and
// TYPE, labels escaped, a cumulative histogram whose +Inf bucket equals its count.
#include "outbox/app/prometheus.hpp"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <vector>

#include "outbox/app/backlog_sampler.hpp"
#include "outbox/app/failover_sampler.hpp"
#include "outbox/app/metric_defs.hpp"

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
  // Every other figure with a value of its own, so that a series showing another's value fails.
  m.producer_rewinds = 11;
  m.kafka_transactions_committed = 12;
  m.kafka_transactions_aborted = 13;
  m.resent_transactions_skipped = 14;
  m.resent_inserts_skipped = 15;
  m.other_prefix_messages = 16;
  m.skipped_changes["other_table"] = 17;
  m.skipped_changes["update"] = 18;
  m.skipped_changes["delete"] = 19;
  m.skipped_changes["truncate"] = 20;
  m.parked_events = 21;
  m.invalid_traceparents = 22;
  m.parked_aggregates = 23;
  m.publication_checks = 24;
  m.publication_verified_lsn = *pgoutput::Lsn::parse("1/18");
  m.kafka_commit_seconds.observe(0.25);
  m.kafka_commit_seconds.observe(0.5);
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
  EXPECT_EQ(s["outbox_relay_producer_rewinds_total"], "11");
  EXPECT_EQ(s["outbox_relay_kafka_transactions_committed_total"], "12");
  EXPECT_EQ(s["outbox_relay_kafka_transactions_aborted_total"], "13");
  EXPECT_EQ(s["outbox_relay_resent_transactions_skipped_total"], "14");
  EXPECT_EQ(s["outbox_relay_resent_inserts_skipped_total"], "15");
  EXPECT_EQ(s["outbox_relay_ignored_messages_total"], "16");
  EXPECT_EQ(s["outbox_relay_skipped_changes_total{reason=\"other_table\"}"], "17");
  EXPECT_EQ(s["outbox_relay_skipped_changes_total{reason=\"update\"}"], "18");
  EXPECT_EQ(s["outbox_relay_skipped_changes_total{reason=\"delete\"}"], "19");
  EXPECT_EQ(s["outbox_relay_skipped_changes_total{reason=\"truncate\"}"], "20");
  EXPECT_EQ(s["outbox_relay_parked_events_total"], "21");
  EXPECT_EQ(s["outbox_relay_invalid_traceparent_total"], "22");
  EXPECT_EQ(s["outbox_relay_parked_aggregates"], "23");
  EXPECT_EQ(s["outbox_relay_publication_checks_total"], "24");
  EXPECT_EQ(s["outbox_relay_publication_verified_lsn"], std::to_string((1ULL << 32) + 0x18));
  // The histograms by their count and sum (buckets: HistogramIsCumulativeWithInfEqualToCount).
  EXPECT_EQ(s["outbox_relay_commit_to_ack_seconds_count"], "4");
  EXPECT_EQ(s["outbox_relay_commit_to_read_seconds_count"], "1");
  EXPECT_EQ(s["outbox_relay_commit_to_read_seconds_sum"], "0.002");
  EXPECT_EQ(s["outbox_relay_kafka_commit_seconds_count"], "2");
  EXPECT_EQ(s["outbox_relay_kafka_commit_seconds_sum"], "0.75");
  EXPECT_EQ(s["outbox_relay_kafka_commit_seconds_bucket{le=\"+Inf\"}"], "2");
}

// The backlog series, rendered beside the relay's own once a count succeeded.
TEST(Prometheus, EveryDocumentedBacklogSeriesWithItsValue) {
  BacklogSample b;
  b.counted = true;
  b.pending_events = 31;
  b.lower_bound = true;
  // Realistic clock values: a Unix time in seconds needs its 13 significant digits.
  b.oldest_commit_unix_ms = 1'764'612'340'000;
  b.scan_seconds = 0.75;
  b.scanned_at_unix_ms = 1'764'612'345'678;
  b.scans_ok = 32;
  b.scans_failed = 33;
  auto s = samples(render_backlog_prometheus(b, 1'764'612'344'500));
  EXPECT_EQ(s["outbox_relay_pending_events"], "31");
  EXPECT_EQ(s["outbox_relay_pending_events_lower_bound"], "1");
  EXPECT_EQ(s["outbox_relay_oldest_pending_age_seconds"], "4.5");
  EXPECT_EQ(s["outbox_relay_backlog_scan_duration_seconds"], "0.75");
  EXPECT_EQ(s["outbox_relay_backlog_scan_timestamp_seconds"], "1764612345.678");
  EXPECT_EQ(s["outbox_relay_backlog_scans_total{result=\"ok\"}"], "32");
  EXPECT_EQ(s["outbox_relay_backlog_scans_total{result=\"error\"}"], "33");

  // Before the first successful count only the scan counters exist (the gauges are absent, not
  // 0: an alert on them must not see an empty backlog that was never counted).
  BacklogSample none;
  none.scans_failed = 2;
  auto n = samples(render_backlog_prometheus(none, 1'764'612'344'500));
  EXPECT_EQ(n.count("outbox_relay_pending_events"), 0u);
  EXPECT_EQ(n.count("outbox_relay_oldest_pending_age_seconds"), 0u);
  EXPECT_EQ(n["outbox_relay_backlog_scans_total{result=\"error\"}"], "2");
  EXPECT_EQ(n["outbox_relay_backlog_scans_total{result=\"ok\"}"], "0");
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

// run --standby's series: the gauge once a check answered, the checks by result always.
TEST(Prometheus, FailoverReadinessMetric) {
  FailoverSample s;
  s.failed_checks = 2;
  std::string text = render_failover_prometheus(s);
  EXPECT_EQ(text.find("outbox_relay_failover_ready "), std::string::npos) << text;
  EXPECT_NE(text.find("outbox_relay_failover_checks_total{result=\"error\"} 2\n"),
            std::string::npos)
      << text;
  s.checked = true;
  s.ready = true;
  s.ready_checks = 3;
  text = render_failover_prometheus(s);
  EXPECT_NE(text.find("# TYPE outbox_relay_failover_ready gauge\noutbox_relay_failover_ready 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("outbox_relay_failover_checks_total{result=\"ready\"} 3\n"),
            std::string::npos)
      << text;
}

// The definitions docgen lists (docs/metrics.md) are what /metrics serves: every family in their
// order with its HELP and TYPE, and the label names of its samples; nothing served beside them.
TEST(Prometheus, TheServedFamiliesAreTheDefinitions) {
  BacklogSample backlog;
  backlog.counted = true;
  FailoverSample failover;
  failover.checked = true;
  const std::string text = render_prometheus(sample_metrics(), kIdentity) +
                           render_backlog_prometheus(backlog, 0) +
                           render_failover_prometheus(failover);
  std::vector<MetricDef> defs = relay_metric_defs();
  for (auto more : {backlog_metric_defs(), failover_metric_defs()}) {
    defs.insert(defs.end(), more.begin(), more.end());
  }
  std::vector<std::string> served;          // HELP names, in order
  std::map<std::string, std::string> help;  // name -> HELP text
  std::map<std::string, std::string> type;
  std::map<std::string, std::string> labels;  // name -> label names of its first sample
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      const std::size_t space = line.find(' ', 7);
      served.push_back(line.substr(7, space - 7));
      help[served.back()] = line.substr(space + 1);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      type[line.substr(7, line.rfind(' ') - 7)] = line.substr(line.rfind(' ') + 1);
    } else if (const std::size_t open = line.find('{');
               open != std::string::npos && !labels.count(line.substr(0, open))) {
      std::string names;
      const std::string inner = line.substr(open + 1, line.find('}') - open - 1);
      for (std::size_t at = 0; at < inner.size();) {
        const std::size_t eq = inner.find('=', at);
        if (!names.empty()) names += ",";
        names += inner.substr(at, eq - at);
        at = inner.find('"', inner.find('"', eq) + 1) + 2;
      }
      labels[line.substr(0, open)] = names;
    }
  }
  ASSERT_EQ(served.size(), defs.size());
  for (std::size_t i = 0; i < defs.size(); ++i) {
    const std::string name(defs[i].name);
    EXPECT_EQ(served[i], name);
    EXPECT_EQ(help[name], defs[i].help) << name;
    EXPECT_EQ(type[name], type_name(defs[i].type)) << name;
    std::string names;
    for (const std::string_view l : defs[i].labels)
      names += (names.empty() ? "" : ",") + std::string(l);
    if (defs[i].type == MetricType::kHistogram) {
      EXPECT_EQ(labels[name + "_bucket"], "le") << name;
    } else {
      EXPECT_EQ(labels[name], names) << name;
    }
  }
}

}  // namespace
}  // namespace outbox::app
