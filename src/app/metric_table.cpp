#include "metric_table.hpp"

#include <array>
#include <charconv>
#include <cmath>

#include "outbox/app/prometheus.hpp"

namespace outbox::app {

std::string_view type_name(MetricType type) {
  // In the order of MetricType's values.
  constexpr std::array<std::string_view, 3> kNames{"counter", "gauge", "histogram"};
  return kNames.at(static_cast<std::size_t>(type));
}

std::string Series::number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

void Series::sample(std::string_view name, std::string_view labels, const std::string& value) {
  out_.append(name);
  if (!labels.empty()) out_.append("{").append(labels).append("}");
  out_.append(" ").append(value).append("\n");
}

void Series::labelled(std::initializer_list<std::string_view> values, std::uint64_t v) {
  std::string labels;
  std::size_t i = 0;
  for (const std::string_view value : values) {
    if (i > 0) labels += ",";
    labels.append(def_.labels.at(i++)).append("=\"").append(escape_label_value(value));
    labels += "\"";
  }
  sample(def_.name, labels, number(v));
}

void Series::histogram(const relay::Histogram& h) {
  const std::string bucket = std::string(def_.name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < relay::Histogram::kBounds.size(); ++i) {
    cumulative += h.buckets[i];
    sample(bucket, "le=\"" + number(relay::Histogram::kBounds[i]) + "\"", number(cumulative));
  }
  cumulative += h.buckets.back();
  sample(bucket, "le=\"+Inf\"", number(cumulative));
  sample(std::string(def_.name) + "_sum", "", number(h.sum));
  sample(std::string(def_.name) + "_count", "", number(h.count));
}

}  // namespace outbox::app
