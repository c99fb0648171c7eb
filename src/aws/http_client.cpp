// The HTTP client's coroutines: one "worker" per request slot takes a kept-alive connection (or
// makes one), serves queued requests until the queue is empty, then puts the connection back.
#include "outbox/aws/http_client.hpp"

// clang-format off
#include <utility>
// clang-format on
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <charconv>
#include <deque>
#include <optional>
#include <stdexcept>
#include <unordered_set>

namespace outbox::aws {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

struct Connection {
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*tls); }
  void close() {
    beast::error_code ignored;
    lowest().socket().close(ignored);
  }
};

struct Pending {
  HttpRequest request;
  HttpClient::Handler handler;
};

}  // namespace

std::string Endpoint::url() const { return (tls ? "https://" : "http://") + host_header; }

Endpoint parse_endpoint(std::string_view url) {
  Endpoint endpoint;
  std::string_view rest;
  if (url.starts_with("https://")) {
    endpoint.tls = true;
    rest = url.substr(8);
  } else if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else {
    throw std::invalid_argument("endpoint URL \"" + std::string(url) +
                                "\": expected http:// or https://");
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.empty()) throw std::invalid_argument("endpoint URL: no host");
  if (rest.find_first_of("/?#@[] ") != std::string_view::npos) {
    throw std::invalid_argument("endpoint URL \"" + std::string(url) +
                                "\": only scheme://host[:port] (no path, query, user or IPv6)");
  }
  std::uint16_t default_port = endpoint.tls ? 443 : 80;
  const auto colon = rest.find(':');
  endpoint.host = std::string(rest.substr(0, colon));
  endpoint.port = default_port;
  if (colon != std::string_view::npos) {
    const std::string_view port = rest.substr(colon + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      throw std::invalid_argument("endpoint URL \"" + std::string(url) + "\": bad port");
    }
    endpoint.port = static_cast<std::uint16_t>(value);
  }
  if (endpoint.host.empty()) throw std::invalid_argument("endpoint URL: no host");
  endpoint.host_header = endpoint.host;
  if (endpoint.port != default_port) endpoint.host_header += ":" + std::to_string(endpoint.port);
  return endpoint;
}

std::string_view HttpResponse::header(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return {};
}

struct HttpClient::Impl : std::enable_shared_from_this<Impl> {
  asio::any_io_executor executor;
  Endpoint endpoint;
  HttpClientConfig config;
  std::optional<asio::ssl::context> tls_context;
  tcp::resolver resolver;
  std::deque<Pending> queue;
  std::vector<std::unique_ptr<Connection>> idle;
  std::size_t workers = 0;
  std::size_t in_exchange = 0;
  std::size_t opened = 0;
  bool closed = false;
  // Every open connection, idle or busy: the destructor closes them, so that a busy worker's
  // operation ends at once.
  std::unordered_set<Connection*> live;

  void drop(std::unique_ptr<Connection>& conn) {
    if (!conn) return;
    live.erase(conn.get());
    conn->close();
    conn.reset();
  }

  Impl(asio::any_io_executor ex, Endpoint ep, HttpClientConfig cfg)
      : executor(std::move(ex)),
        endpoint(std::move(ep)),
        config(std::move(cfg)),
        resolver(executor) {
    if (endpoint.tls) {
      tls_context.emplace(asio::ssl::context::tls_client);
      tls_context->set_options(asio::ssl::context::default_workarounds |
                               asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                               asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
      beast::error_code ec;
      if (config.ca_file.empty()) {
        tls_context->set_default_verify_paths(ec);
      } else {
        tls_context->load_verify_file(config.ca_file, ec);
      }
      if (ec) {
        throw std::runtime_error(
            "https " + endpoint.host_header + ": cannot load the CA " +
            (config.ca_file.empty() ? std::string("store") : "file \"" + config.ca_file + "\"") +
            ": " + ec.message());
      }
      tls_context->set_verify_mode(asio::ssl::verify_peer);
    }
  }

  std::string where() const { return endpoint.url(); }

  // Connects `conn` (resolve, TCP, TLS handshake); an error message, empty on success.
  asio::awaitable<std::string> connect(Connection& conn) {
    beast::error_code ec;
    // Named, not temporaries: GCC 12 destroys temporaries of a co_await expression twice.
    const std::string port = std::to_string(endpoint.port);
    auto results = co_await resolver.async_resolve(endpoint.host, port,
                                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return "resolving " + endpoint.host + ": " + ec.message();
    if (endpoint.tls) {
      conn.tls.emplace(executor, *tls_context);
      // The certificate must name the host (OpenSSL's own check, so that a mismatch is reported
      // as one); SNI for a name, not for an address (RFC 6066).
      SSL* ssl = conn.tls->native_handle();
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      boost::system::error_code not_ip;
      asio::ip::make_address(endpoint.host, not_ip);
      const bool named = not_ip
                             ? X509_VERIFY_PARAM_set1_host(param, endpoint.host.c_str(), 0) == 1 &&
                                   SSL_set_tlsext_host_name(ssl, endpoint.host.c_str()) == 1
                             : X509_VERIFY_PARAM_set1_ip_asc(param, endpoint.host.c_str()) == 1;
      if (!named) co_return "TLS: cannot set the server name " + endpoint.host;
    } else {
      conn.plain.emplace(executor);
    }
    ++opened;
    conn.lowest().expires_after(config.connect_timeout);
    co_await conn.lowest().async_connect(results, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return "connecting to " + where() + ": " +
          (ec == beast::error::timeout ? std::string("timed out") : ec.message());
    }
    if (conn.tls) {
      co_await conn.tls->async_handshake(asio::ssl::stream_base::client,
                                         asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        std::string text = ec == beast::error::timeout ? std::string("timed out") : ec.message();
        const long verify = SSL_get_verify_result(conn.tls->native_handle());
        if (verify != X509_V_OK) {
          text += " (certificate: " + std::string(X509_verify_cert_error_string(verify)) + ")";
        }
        co_return "TLS handshake with " + where() + ": " + text;
      }
    }
    co_return std::string();
  }

  template <class Stream>
  asio::awaitable<void> write_read(Stream& stream, Connection& conn,
                                   http::request<http::string_body>& request,
                                   http::response_parser<http::string_body>& parser,
                                   beast::error_code& ec) {
    conn.lowest().expires_after(config.request_timeout);
    co_await http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    co_await http::async_read(stream, conn.buffer, parser,
                              asio::redirect_error(asio::use_awaitable, ec));
  }

  // One request on `conn` (made when null; reset when it cannot be kept).
  asio::awaitable<HttpResponse> exchange(std::unique_ptr<Connection>& conn, const HttpRequest& in) {
    http::request<http::string_body> request;
    const auto verb = http::string_to_verb(in.method);
    if (verb == http::verb::unknown) {
      HttpResponse bad;
      bad.error = "unknown HTTP method " + in.method;
      co_return bad;
    }
    request.method(verb);
    request.target(in.target);
    request.version(11);
    bool has_host = false;
    for (const auto& h : in.headers) {
      if (iequals(h.name, "host")) has_host = true;
      request.insert(h.name, h.value);
    }
    if (!has_host) request.set(http::field::host, endpoint.host_header);
    request.keep_alive(true);
    request.body() = in.body;
    request.prepare_payload();

    for (int attempt = 0;; ++attempt) {
      const bool reused = conn != nullptr;
      if (!conn) {
        conn = std::make_unique<Connection>();
        live.insert(conn.get());
        std::string error = co_await connect(*conn);
        if (closed) co_return HttpResponse{};
        if (!error.empty()) {
          drop(conn);
          HttpResponse failed;
          failed.error = std::move(error);
          co_return failed;
        }
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(config.max_response_bytes);
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      if (conn->tls) {
        co_await write_read(*conn->tls, *conn, request, parser, ec);
      } else {
        co_await write_read(*conn->plain, *conn, request, parser, ec);
      }
      if (closed) co_return HttpResponse{};
      if (!ec) {
        auto message = parser.release();
        HttpResponse response;
        response.status = static_cast<int>(message.result_int());
        for (const auto& field : message) {
          response.headers.push_back(
              {std::string(field.name_string()), std::string(field.value())});
        }
        response.body = std::move(message.body());
        if (!message.keep_alive()) drop(conn);
        co_return response;
      }
      drop(conn);
      // A kept-alive connection the server closed meanwhile: nothing came back, so the request
      // was not served; once more on a new connection.
      const bool stale = reused && attempt == 0 && !parser.got_some() &&
                         (ec == http::error::end_of_stream || ec == asio::error::eof ||
                          ec == asio::error::connection_reset || ec == asio::error::broken_pipe);
      if (stale) continue;
      HttpResponse failed;
      failed.error =
          where() + ": " +
          (ec == beast::error::timeout
               ? "no response within " + std::to_string(config.request_timeout.count()) + " ms"
               : ec.message());
      co_return failed;
    }
  }

  void start_worker() {
    ++workers;
    std::unique_ptr<Connection> conn;
    if (!idle.empty()) {
      conn = std::move(idle.back());
      idle.pop_back();
    }
    auto self = shared_from_this();
    asio::co_spawn(executor, work(std::move(self), std::move(conn)), asio::detached);
  }

  static asio::awaitable<void> work(std::shared_ptr<Impl> self, std::unique_ptr<Connection> conn) {
    // Every failure becomes a response; nothing here throws but allocation, which ends the
    // process (std::terminate through the noexcept call below) rather than losing a handler.
    while (!self->closed && !self->queue.empty()) {
      Pending item = std::move(self->queue.front());
      self->queue.pop_front();
      ++self->in_exchange;
      HttpResponse response = co_await self->exchange(conn, item.request);
      --self->in_exchange;
      if (self->closed) break;
      deliver(item.handler, std::move(response));
    }
    --self->workers;
    if (!self->closed && conn) {
      self->idle.push_back(std::move(conn));
    } else {
      self->drop(conn);
    }
  }

  static void deliver(const Handler& handler, HttpResponse response) noexcept {
    handler(std::move(response));
  }
};

HttpClient::HttpClient(asio::any_io_executor executor, Endpoint endpoint, HttpClientConfig config)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(endpoint), std::move(config))) {
  if (impl_->config.max_connections == 0) impl_->config.max_connections = 1;
}

HttpClient::~HttpClient() {
  impl_->closed = true;
  impl_->queue.clear();
  // Busy workers' operations end with operation_aborted; they see `closed` and call nothing.
  for (Connection* conn : impl_->live) conn->close();
  impl_->live.clear();
  impl_->idle.clear();
  impl_->resolver.cancel();
}

void HttpClient::async_request(HttpRequest request, Handler handler) {
  Impl& impl = *impl_;
  if (impl.queue.size() >= impl.config.max_queued) {
    HttpResponse full;
    full.error = impl.where() + ": " + std::to_string(impl.queue.size()) +
                 " requests already wait for a connection";
    // Not called once the client is gone, as the others.
    asio::post(impl.executor, [weak = std::weak_ptr<Impl>(impl_), handler = std::move(handler),
                               full = std::move(full)]() mutable {
      const auto alive = weak.lock();
      if (alive && !alive->closed) handler(std::move(full));
    });
    return;
  }
  impl.queue.push_back({std::move(request), std::move(handler)});
  if (impl.workers < impl.config.max_connections) impl.start_worker();
}

const Endpoint& HttpClient::endpoint() const { return impl_->endpoint; }

std::size_t HttpClient::pending() const { return impl_->queue.size() + impl_->in_exchange; }

std::size_t HttpClient::connections_opened() const { return impl_->opened; }

}  // namespace outbox::aws
