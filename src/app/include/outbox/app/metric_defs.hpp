// The metric families /metrics serves, each defined once: name, type, label names, help. The
// renderers (render_prometheus, render_backlog_prometheus, render_failover_prometheus) write
// their families from the rows that hold these definitions, and docgen's list of metrics
// (reference.hpp: docs/metrics.md's generated table) is made from the same rows. Pure.
#pragma once

#include <string_view>
#include <vector>

namespace outbox::app {

enum class MetricType { kCounter, kGauge, kHistogram };
// "counter", "gauge", "histogram": the # TYPE word.
std::string_view type_name(MetricType type);

struct MetricDef {
  std::string_view name;
  MetricType type;
  // The label names of its series, in the order written (a histogram's `le` is not listed).
  std::vector<std::string_view> labels;
  std::string_view help;  // the # HELP text
};

// Each renderer's families, in the order served.
std::vector<MetricDef> relay_metric_defs();     // render_prometheus (prometheus.hpp)
std::vector<MetricDef> backlog_metric_defs();   // render_backlog_prometheus (backlog_sampler.hpp)
std::vector<MetricDef> failover_metric_defs();  // render_failover_prometheus (failover_sampler.hpp)

}  // namespace outbox::app
