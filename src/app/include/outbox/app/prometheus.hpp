// Renders a relay::Metrics snapshot in the Prometheus text exposition format (version 0.0.4).
// Pure: no I/O, no clock. Thread-safe as long as the snapshot is not written meanwhile.
#pragma once

#include <string>
#include <string_view>

#include "outbox/relay/metrics.hpp"

namespace outbox::app {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Identifies the relay in the `outbox_relay_info` series.
struct RelayIdentity {
  std::string slot;
  std::string publication;
  std::string table;  // schema.table
  std::string version;
};

std::string render_prometheus(const relay::Metrics& metrics, const RelayIdentity& identity);

// A label value with backslash, double quote and newline escaped as the format requires.
std::string escape_label_value(std::string_view value);

// Server WAL end minus confirmed position, zero when the server end is not known yet or behind.
std::uint64_t lag_bytes(const relay::Metrics& metrics);

}  // namespace outbox::app
