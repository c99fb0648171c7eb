#include "outbox/app/http_server.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdint>
#include <map>
#include <vector>

#include "outbox/common/log_text.hpp"

namespace outbox::app {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class Session;

}  // namespace

struct detail::HttpServerState : std::enable_shared_from_this<HttpServerState> {
  HttpServerState(asio::io_context& io, const tcp::endpoint& endpoint, HttpHandler h,
                  HttpServerLimits l)
      : acceptor(io), retry_timer(io), handler(std::move(h)), limits(l) {
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen();
  }

  void accept();
  void stop();

  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;  // after a failed accept (e.g. out of descriptors)
  HttpHandler handler;
  HttpServerLimits limits;
  // Open connections by accept order: the first one still reading is the oldest that has not
  // sent a complete request, the one closed when a new connection finds the cap reached.
  std::map<std::uint64_t, Session*> sessions;
  std::uint64_t next_session = 0;
  bool stopped = false;
};

namespace {

// One connection: read one request (with a deadline), answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<detail::HttpServerState> server)
      : stream_(std::move(socket)), server_(std::move(server)), seq_(server_->next_session++) {
    server_->sessions.emplace(seq_, this);
    parser_.header_limit(static_cast<std::uint32_t>(server_->limits.max_header_bytes));
    parser_.body_limit(1024);
  }
  ~Session() { server_->sessions.erase(seq_); }

  // Still waiting for a complete request (not answering, not closed).
  bool reading() const { return reading_ && !closed_; }
  bool open() const { return !closed_; }

  void start() {
    stream_.expires_after(server_->limits.io_timeout);
    http::async_read(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void close() {
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void on_read(beast::error_code ec) {
    reading_ = false;
    if (ec) {
      // Timeouts, resets and garbage end the connection without an answer.
      close();
      return;
    }
    const auto& req = parser_.get();
    response_.version(req.version());
    response_.keep_alive(false);
    response_.set(http::field::server, "outbox-relay");
    HttpResponse r;
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      r = {405, "text/plain; charset=utf-8", "method not allowed\n"};
      response_.set(http::field::allow, "GET, HEAD");
    } else {
      std::string_view target(req.target().data(), req.target().size());
      std::string_view path = target.substr(0, target.find('?'));
      try {
        r = server_->handler(path);
      } catch (const std::exception& e) {
        r = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
      }
    }
    response_.result(r.status);
    response_.set(http::field::content_type, r.content_type);
    response_.set(http::field::cache_control, "no-store");
    response_.body() = req.method() == http::verb::head ? std::string() : std::move(r.body);
    response_.prepare_payload();
    if (req.method() == http::verb::head) response_.content_length(r.body.size());
    stream_.expires_after(server_->limits.io_timeout);
    http::async_write(
        stream_, response_,
        [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{4096};
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> response_;
  std::shared_ptr<detail::HttpServerState> server_;
  std::uint64_t seq_;
  bool reading_ = true;
  bool closed_ = false;
};

}  // namespace

void detail::HttpServerState::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of file descriptors and the like: try again a little later, not in a tight loop.
      spdlog::warn("event=metrics_accept_failed error={}", common::quoted(ec.message()));
      self->retry_timer.expires_after(std::chrono::milliseconds(500));
      self->retry_timer.async_wait([self](beast::error_code wait_ec) {
        if (!wait_ec && !self->stopped) self->accept();
      });
      return;
    } else {
      // At the cap, a new connection makes room by closing the oldest one that has not sent a
      // complete request (or, when every open one is being answered, the oldest of them): idle or
      // slow clients cannot starve a probe, however many sockets they hold, and the relay holds
      // at most max_connections of them. Closed sessions leave the map once their pending handler
      // has run, so only the open ones count.
      std::size_t open = 0;
      Session* oldest_reading = nullptr;
      Session* oldest = nullptr;
      for (const auto& [seq, s] : self->sessions) {
        if (!s->open()) continue;
        ++open;
        if (!oldest) oldest = s;
        if (!oldest_reading && s->reading()) oldest_reading = s;
      }
      if (open >= self->limits.max_connections && oldest) {
        (oldest_reading ? oldest_reading : oldest)->close();
      }
      std::make_shared<Session>(std::move(socket), self)->start();
    }
    self->accept();
  });
}

void detail::HttpServerState::stop() {
  if (stopped) return;
  stopped = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  retry_timer.cancel();
  // Copy: close() may not erase synchronously, but be safe against reentrancy.
  std::vector<Session*> open;
  for (const auto& [seq, s] : sessions) open.push_back(s);
  for (Session* s : open) s->close();
}

HttpServer::HttpServer(asio::io_context& io, const tcp::endpoint& endpoint, HttpHandler handler,
                       HttpServerLimits limits)
    : impl_(std::make_shared<detail::HttpServerState>(io, endpoint, std::move(handler), limits)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() { impl_->accept(); }

void HttpServer::stop() { impl_->stop(); }

tcp::endpoint HttpServer::local_endpoint() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec);
}

}  // namespace outbox::app
