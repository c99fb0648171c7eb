// A renderer's table of metric families: each row a definition (metric_defs.hpp) and how its
// samples are read from the renderer's input; the text exposition format (version 0.0.4)
// written from the rows. Private to app.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/app/metric_defs.hpp"
#include "outbox/relay/metrics.hpp"

namespace outbox::app {

// The samples of one family, written with its name and label names.
class Series {
 public:
  Series(std::string& out, const MetricDef& def) : out_(out), def_(def) {}
  // The family's one sample (no labels).
  void value(std::uint64_t v) { sample(def_.name, "", number(v)); }
  void value(double v) { sample(def_.name, "", number(v)); }
  // A sample with the values of the family's labels, in their order.
  void labelled(std::initializer_list<std::string_view> values, std::uint64_t v);
  // A histogram's cumulative buckets (`le`), +Inf, _sum and _count.
  void histogram(const relay::Histogram& h);

  static std::string number(double v);
  static std::string number(std::uint64_t v) { return std::to_string(v); }

 private:
  void sample(std::string_view name, std::string_view labels, const std::string& value);

  std::string& out_;
  const MetricDef& def_;
};

template <typename In>
struct MetricFamily {
  MetricDef def;
  // Writes the family's samples from `In`; false: the family is not served now (nor its HELP
  // and TYPE).
  std::function<bool(Series&, const In&)> write;
};

// Every family's HELP, TYPE and samples, in the table's order.
template <typename In>
std::string render_families(const std::vector<MetricFamily<In>>& families, const In& in) {
  std::string out;
  for (const MetricFamily<In>& f : families) {
    const std::size_t mark = out.size();
    out.append("# HELP ").append(f.def.name).append(" ").append(f.def.help).append("\n");
    out.append("# TYPE ").append(f.def.name).append(" ").append(type_name(f.def.type));
    out.append("\n");
    Series series(out, f.def);
    if (!f.write(series, in)) out.resize(mark);
  }
  return out;
}

template <typename In>
std::vector<MetricDef> defs_of(const std::vector<MetricFamily<In>>& families) {
  std::vector<MetricDef> out;
  out.reserve(families.size());
  for (const MetricFamily<In>& f : families) out.push_back(f.def);
  return out;
}

}  // namespace outbox::app
