// An asynchronous HTTP/1.1 client for the AWS calls (SQS, EventBridge), on the caller's
// io_context: one endpoint (scheme, host, port), keep-alive connections reused from a pool, at
// most `max_connections` requests in flight at once (one per connection; the others wait in a
// bounded queue), a deadline on connecting and on each exchange, TLS verified.
//
// Why Boost.Beast and not libcurl's multi interface: Beast is header-only over the Asio the relay
// already runs on (Debian 12's Boost 1.74, whose headers the project uses), so a request is a
// coroutine on the io thread with no second event loop to bridge; libcurl's multi interface on
// Asio needs its socket and timer callbacks glued to Asio descriptors by hand, and its
// development package is not on the machine. Beast costs us what libcurl would have done for us:
// TLS set up by hand (OpenSSL through Asio's ssl::stream, the system CA store, SNI, and the
// host name or address checked by OpenSSL's verification: X509_VERIFY_PARAM_set1_host/_ip), a connection closed by the server between two requests
// (retried once on a new connection when it was reused and nothing came back), no HTTP/2 (AWS's
// SQS and EventBridge endpoints speak HTTP/1.1) and no proxy support. No HTTP pipelining either:
// AWS's SDKs do not pipeline, and a response lost in a pipeline would fail every request behind
// it; throughput comes from parallel keep-alive connections instead.
//
// Plain http:// is for a local stand-in (moto); https:// verifies the server's certificate
// against the system store (or `ca_file`) and its name against the endpoint's host.
//
// Not thread-safe: construct, call and destroy on the executor's thread. Handlers run there,
// never inside async_request(). Beast and OpenSSL types stay in http_client.cpp.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/aws/sigv4.hpp"

namespace outbox::aws {

struct Endpoint {
  bool tls = false;
  std::string host;  // a name or an IPv4 address (an IPv6 literal in brackets is refused)
  std::uint16_t port = 0;
  // The Host header: the host, with ":port" when the port is not the scheme's default.
  std::string host_header;
  std::string url() const;  // scheme://host_header
};

// "http://host[:port]" or "https://host[:port]", an optional trailing '/'; anything else (a path,
// a query, user info, another scheme) throws std::invalid_argument naming what is wrong.
Endpoint parse_endpoint(std::string_view url);

struct HttpRequest {
  std::string method = "POST";
  std::string target = "/";  // path and query, as on the wire
  // Sent as given; Host (when absent: the endpoint's), Content-Length and Connection are added.
  std::vector<HttpHeader> headers;
  std::string body;
};

struct HttpResponse {
  // Empty when a response came; else what failed (connect, TLS, timeout, closed): no status.
  std::string error;
  int status = 0;
  std::vector<HttpHeader> headers;
  std::string body;
  // The first header of that name (ASCII case-insensitive); empty when none.
  std::string_view header(std::string_view name) const;
};

struct HttpClientConfig {
  // Requests in flight at once, each on a connection of its own (kept alive after it).
  std::size_t max_connections = 8;
  // Requests waiting for a connection; async_request() fails one beyond it at once.
  std::size_t max_queued = 1024;
  std::chrono::milliseconds connect_timeout{5'000};   // TCP connect and TLS handshake
  std::chrono::milliseconds request_timeout{30'000};  // writing a request and reading its response
  std::size_t max_response_bytes = 16 * 1024 * 1024;
  // A PEM bundle to trust instead of the system's store (tests, private CAs); https only.
  std::string ca_file;
};

class HttpClient {
 public:
  // Called once per request, on the executor's thread. Must not throw.
  using Handler = std::function<void(HttpResponse)>;

  // Throws std::runtime_error when the TLS context cannot be made (a bad ca_file).
  HttpClient(boost::asio::any_io_executor executor, Endpoint endpoint, HttpClientConfig config);
  // Closes every connection; the handlers of requests not answered yet are never called.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Queues the request for the first free connection (a new one while fewer than
  // max_connections are open). The handler gets the response, or an error: the queue full, a
  // connection that could not be made, a deadline passed. Never retried, except once on a fresh
  // connection when a kept-alive one turned out closed before any response byte came.
  void async_request(HttpRequest request, Handler handler);

  const Endpoint& endpoint() const;
  // Requests queued or in flight, not yet answered.
  std::size_t pending() const;
  // Connections made since construction (keep-alive: fewer than the requests).
  std::size_t connections_opened() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the connections' coroutines
};

}  // namespace outbox::aws
