#include "outbox_test/test_http_server.hpp"

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

namespace outbox_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string ServedRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(beast::string_view(n.data(), n.size()),
                       beast::string_view(name.data(), name.size()))) {
      return v;
    }
  }
  return {};
}

struct TestHttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  Handler handler;
  std::thread thread;
  mutable std::mutex mutex;
  std::vector<ServedRequest> seen;

  asio::awaitable<void> serve(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      beast::error_code ec;
      http::request<http::string_body> req;
      co_await http::async_read(stream, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ServedRequest r;
      r.method = std::string(req.method_string());
      r.target = std::string(req.target());
      for (const auto& f : req) {
        r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      }
      r.body = req.body();
      {
        std::lock_guard lock(mutex);
        seen.push_back(r);
      }
      ServedAnswer a = handler(r);
      http::response<http::string_body> res{static_cast<http::status>(a.status), req.version()};
      for (const auto& [n, v] : a.headers) res.set(n, v);
      res.body() = std::move(a.body);
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !req.keep_alive()) co_return;
    }
  }

  asio::awaitable<void> accept() {
    for (;;) {
      beast::error_code ec;
      tcp::socket socket =
          co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(io, serve(std::move(socket)), asio::detached);
    }
  }
};

TestHttpServer::TestHttpServer(Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(at.protocol());
  impl_->acceptor.bind(at);
  impl_->acceptor.listen();
  asio::co_spawn(impl_->io, impl_->accept(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

TestHttpServer::~TestHttpServer() {
  impl_->io.stop();
  impl_->thread.join();
}

std::uint16_t TestHttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string TestHttpServer::url() const { return "http://127.0.0.1:" + std::to_string(port()); }

std::vector<ServedRequest> TestHttpServer::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seen;
}

std::size_t TestHttpServer::count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seen.size();
}

}  // namespace outbox_test
