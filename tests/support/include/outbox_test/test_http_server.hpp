// A tiny HTTP/1.1 server on 127.0.0.1 for the tests that play an endpoint the relay asks (the
// instance metadata service, a container credentials endpoint, STS): each request goes to the
// test's handler, which answers it (and may block to hold it: the server has one thread), and is
// recorded. Keep-alive as the client asks. Thread-safe.
//
//   TestHttpServer imds([](const ServedRequest& r) { return ServedAnswer{200, "token"}; });
//   env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url();
//   ... imds.requests()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox_test {

struct ServedRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The first header of that name (case-insensitive); empty when none.
  std::string header(std::string_view name) const;
};

struct ServedAnswer {
  ServedAnswer(int status_ = 200, std::string body_ = {},
               std::vector<std::pair<std::string, std::string>> headers_ = {})
      : status(status_), body(std::move(body_)), headers(std::move(headers_)) {}
  int status;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class TestHttpServer {
 public:
  using Handler = std::function<ServedAnswer(const ServedRequest&)>;
  // Listens on an ephemeral port at once; throws std::runtime_error when it cannot.
  explicit TestHttpServer(Handler handler);
  ~TestHttpServer();
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  std::uint16_t port() const;
  std::string url() const;  // http://127.0.0.1:PORT
  std::vector<ServedRequest> requests() const;
  std::size_t count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox_test
