// A minimal HTTP client for the relay's /metrics, /healthz and /readyz, and a reader of the
// Prometheus text format. Thread-safety: free functions, no shared state.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>

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

// Polls GET /healthz on `port` every 200 ms on a thread of its own until stop() (or the end of its
// scope): how often it answered and the slowest answer. The relay serves /healthz on its io
// thread, so an answer slower than a few hundred ms means that thread was blocked.
class HealthzWatch {
 public:
  explicit HealthzWatch(std::uint16_t port);
  ~HealthzWatch();
  HealthzWatch(const HealthzWatch&) = delete;
  HealthzWatch& operator=(const HealthzWatch&) = delete;

  void stop();
  int polls() const { return polls_; }
  int unanswered() const { return unanswered_; }  // no answer within http_get's 5 s
  std::int64_t slowest_ms() const { return slowest_ms_; }

 private:
  std::atomic<bool> polling_{true};
  std::atomic<int> polls_{0};
  std::atomic<int> unanswered_{0};
  std::atomic<std::int64_t> slowest_ms_{0};
  std::thread thread_;
};

}  // namespace outbox_test
