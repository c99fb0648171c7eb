// A small HTTP/1.1 server (Boost.Beast) on the relay's io_context, for /metrics, /healthz and
// /readyz: one request per connection, read and write deadlines so a stuck client cannot hold a
// connection, a cap on concurrent connections (a new connection at the cap closes the oldest one
// that has not sent a complete request, so idle clients cannot starve a probe), GET and HEAD only.
// Not thread-safe: construct, start, stop and destroy on the io_context thread; the handler runs
// there too, so it may read the relay's state directly.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace outbox::app {

namespace detail {
struct HttpServerState;
}

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called with the request path (query string removed); GET and HEAD only reach it.
using HttpHandler = std::function<HttpResponse(std::string_view path)>;

struct HttpServerLimits {
  std::chrono::milliseconds io_timeout{5000};  // whole request read; whole response write
  std::size_t max_connections = 32;            // at the cap, a new one closes the oldest idle one
  std::size_t max_header_bytes = 8192;
};

class HttpServer {
 public:
  // Binds and listens at once. Throws boost::system::system_error (address in use...).
  HttpServer(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& endpoint,
             HttpHandler handler, HttpServerLimits limits = {});
  ~HttpServer();  // stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();  // begins accepting
  // Stops accepting and closes open connections; pending handlers finish with operation_aborted.
  void stop();
  // The bound endpoint (the actual port when 0 was asked for).
  boost::asio::ip::tcp::endpoint local_endpoint() const;

 private:
  std::shared_ptr<detail::HttpServerState>
      impl_;  // shared: pending handlers keep it alive past stop()
};

}  // namespace outbox::app
