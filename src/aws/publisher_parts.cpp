#include "publisher_parts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace outbox::aws {

std::shared_ptr<spdlog::logger> publisher_logger() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    if (auto existing = spdlog::get("aws")) return existing;
    auto l = spdlog::default_logger()->clone("aws");
    spdlog::register_logger(l);
    return l;
  }();
  return log;
}

std::chrono::milliseconds retry_delay(int attempts, std::chrono::milliseconds base,
                                      std::chrono::milliseconds max, std::mt19937_64& rng) {
  const std::int64_t full =
      std::min<std::int64_t>(max.count(), base.count() << std::min(attempts, 16));
  std::uniform_int_distribution<std::int64_t> jitter(full / 2, full);
  return std::chrono::milliseconds(jitter(rng));
}

std::size_t RetryLog::count(std::chrono::steady_clock::time_point now) {
  ++unlogged_;
  if (now - last_ < std::chrono::seconds(5)) return 0;
  last_ = now;
  return std::exchange(unlogged_, 0);
}

HeldRecord HeldRecord::of(const sink::Record& record, std::uint64_t opaque) {
  HeldRecord h;
  h.opaque = opaque;
  h.bytes = (record.key ? record.key->size() : 0) + (record.value ? record.value->size() : 0);
  h.topic = std::string(record.topic);
  if (record.key) h.key = std::string(*record.key);
  if (record.value) h.value = std::string(*record.value);
  bool id_seen = false;
  for (const sink::Header& header : record.headers) {
    if (header.name == "id" && header.value && !id_seen) {
      id_seen = true;
      h.id = std::string(*header.value);
    } else if (header.name == "type" && header.value && !h.type) {
      h.type = std::string(*header.value);
    } else {
      h.others.emplace_back(
          std::string(header.name),
          header.value ? std::optional<std::string>(*header.value) : std::nullopt);
    }
  }
  return h;
}

sink::Delivery HeldRecord::delivered() const {
  sink::Delivery d;
  d.opaque = opaque;
  d.bytes = bytes;
  d.topic = topic;
  d.id_header = id;
  return d;
}

sink::Delivery HeldRecord::failed(sink::ErrorKind kind, std::string_view name,
                                  const std::string& text) const {
  sink::Delivery d;
  d.opaque = opaque;
  d.bytes = bytes;
  d.ok = false;
  d.kind = kind;
  d.size_error = kind == sink::ErrorKind::kSize;
  d.batch_error = sink::rejects_batch(kind);
  d.error_name = name;
  d.error = text;
  d.topic = topic;
  if (key) d.key = *key;
  if (value) d.value = *value;
  d.id_header = id;
  if (type) d.type_header = *type;
  for (const auto& [n, v] : others) {
    d.other_headers.push_back({n, v ? std::optional<std::string_view>(*v) : std::nullopt});
  }
  return d;
}

}  // namespace outbox::aws
