#include "outbox_test/http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>

namespace outbox_test {

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to an ephemeral port failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

HttpResult http_get(std::uint16_t port, const std::string& path) {
  HttpResult result;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return result;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return result;
  }
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return result;
  }
  std::string response;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return result;
  result.status = std::stoi(response.substr(9, 3));
  auto body = response.find("\r\n\r\n");
  if (body != std::string::npos) result.body = response.substr(body + 4);
  return result;
}

std::map<std::string, std::string> parse_samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

std::optional<double> sample_value(const std::map<std::string, std::string>& samples,
                                   const std::string& series) {
  auto it = samples.find(series);
  if (it == samples.end()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double value = std::stod(it->second, &used);
    if (used != it->second.size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

HealthzWatch::HealthzWatch(std::uint16_t port)
    : thread_([this, port] {
        while (polling_) {
          const auto t0 = std::chrono::steady_clock::now();
          const HttpResult r = http_get(port, "/healthz");
          const std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count();
          ++polls_;
          if (r.status == 0) ++unanswered_;
          slowest_ms_ = std::max<std::int64_t>(slowest_ms_, ms);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      }) {}

HealthzWatch::~HealthzWatch() { stop(); }

void HealthzWatch::stop() {
  polling_ = false;
  if (thread_.joinable()) thread_.join();
}

}  // namespace outbox_test
