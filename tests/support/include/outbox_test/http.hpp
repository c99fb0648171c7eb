// A minimal HTTP client for the relay's /metrics, /healthz and /readyz, and a reader of the
// Prometheus text format. Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace outbox_test {

// A port nobody listens on right now (the kernel's pick for an ephemeral bind).
std::uint16_t free_port();

struct HttpResult {
  int status = 0;  // 0: no answer (connection refused, timeout)
  std::string body;
};

// GET over a plain socket, HTTP/1.1, Connection: close; 5 s deadline on every read.
HttpResult http_get(std::uint16_t port, const std::string& path);

// Samples of a Prometheus exposition: "name{labels}" -> value text.
std::map<std::string, std::string> parse_samples(const std::string& text);
// The value of one series ("name{labels}" exactly as exposed), or nullopt when it is missing or
// not a number: a check against it fails when the series is gone, unlike samples["..."] != "0".
std::optional<double> sample_value(const std::map<std::string, std::string>& samples,
                                   const std::string& series);

}  // namespace outbox_test
