// aws::HttpClient against a small keep-alive HTTP/1.1 server in the test process (moto's server
// closes every connection, so keep-alive is checked here): connections reused and bounded, a
// kept-alive connection the server closed meanwhile retried once on a new one, and the client's
// own throughput on loopback; TLS against a server with a self-signed certificate (trusted and
// named, untrusted, trusted but for another name).
#include "outbox/aws/http_client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <mutex>
#include <thread>

#include "moto.hpp"

namespace {

namespace aws = outbox::aws;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

// Answers every request 200 with its body echoed, keeping the connection; with `close_after`,
// closes a connection silently (no Connection: close) after that many answers.
class EchoServer {
 public:
  explicit EchoServer(int close_after = 0)
      : close_after_(close_after), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~EchoServer() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ec);
    accept_thread_.join();
    std::lock_guard lock(mutex_);
    for (auto& t : threads_) t.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int accepted() const { return accepted_; }

 private:
  void accept_loop() {
    while (true) {
      tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stop_ || ec) return;
      ++accepted_;
      std::lock_guard lock(mutex_);
      threads_.emplace_back([this, s = std::move(socket)]() mutable { serve(std::move(s)); });
    }
  }
  void serve(tcp::socket socket) {
    boost::beast::flat_buffer buffer;
    for (int served = 0;;) {
      http::request<http::string_body> request;
      boost::system::error_code ec;
      http::read(socket, buffer, request, ec);
      if (ec) return;
      http::response<http::string_body> response(http::status::ok, 11);
      response.set(http::field::content_type, "text/plain");
      response.keep_alive(true);
      response.body() = request.body();
      response.prepare_payload();
      http::write(socket, response, ec);
      if (ec) return;
      if (close_after_ > 0 && ++served == close_after_) {
        socket.shutdown(tcp::socket::shutdown_both, ec);
        socket.close(ec);
        return;
      }
    }
  }

  int close_after_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mutex_;
  std::list<std::thread> threads_;
  std::thread accept_thread_;
};

aws::HttpRequest post(std::string body) {
  aws::HttpRequest r;
  r.body = std::move(body);
  r.headers = {{"Content-Type", "text/plain"}};
  return r;
}

TEST(HttpClient, KeptAliveConnectionsAreReusedAndBounded) {
  EchoServer server;
  asio::io_context io;
  constexpr int kRequests = 2000;
  int answered = 0;
  int right = 0;
  std::chrono::duration<double> seconds{};
  {
    aws::HttpClientConfig config;
    config.max_connections = 4;
    config.max_queued = kRequests;
    aws::HttpClient client(io.get_executor(),
                           aws::parse_endpoint("http://127.0.0.1:" + std::to_string(server.port())),
                           config);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRequests; ++i) {
      std::string body = "request " + std::to_string(i);
      client.async_request(post(body), [&, body](aws::HttpResponse r) {
        ++answered;
        if (r.error.empty() && r.status == 200 && r.body == body) ++right;
      });
    }
    EXPECT_EQ(client.pending(), static_cast<std::size_t>(kRequests));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (answered < kRequests && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(std::chrono::milliseconds(50));
    }
    seconds = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(client.connections_opened(), 4u);
    EXPECT_EQ(client.pending(), 0u);
  }
  EXPECT_EQ(answered, kRequests);
  EXPECT_EQ(right, kRequests);
  EXPECT_EQ(server.accepted(), 4);
  std::printf("HttpClient on loopback, 4 keep-alive connections: %d requests in %.2f s: %.0f/s\n",
              kRequests, seconds.count(), kRequests / seconds.count());
}

TEST(HttpClient, AConnectionTheServerClosedMeanwhileIsRetriedOnANewOne) {
  EchoServer server(1);
  asio::io_context io;
  aws::HttpClientConfig config;
  config.max_connections = 1;
  aws::HttpClient client(io.get_executor(),
                         aws::parse_endpoint("http://127.0.0.1:" + std::to_string(server.port())),
                         config);
  for (int i = 0; i < 3; ++i) {
    auto r = outbox_test::await_result<aws::HttpResponse>(
        io, [&](std::function<void(aws::HttpResponse)> done) {
          client.async_request(post("n" + std::to_string(i)), std::move(done));
        });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->error, "");
    EXPECT_EQ(r->body, "n" + std::to_string(i));
    // Let the server's close arrive before the next request.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(client.connections_opened(), 3u);
}

TEST(HttpClient, EndpointUrls) {
  const auto a = aws::parse_endpoint("https://sqs.eu-west-1.amazonaws.com");
  EXPECT_TRUE(a.tls);
  EXPECT_EQ(a.port, 443);
  EXPECT_EQ(a.host_header, "sqs.eu-west-1.amazonaws.com");
  const auto b = aws::parse_endpoint("http://127.0.0.1:24566/");
  EXPECT_FALSE(b.tls);
  EXPECT_EQ(b.port, 24566);
  EXPECT_EQ(b.host_header, "127.0.0.1:24566");
  EXPECT_EQ(b.url(), "http://127.0.0.1:24566");
  EXPECT_THROW(aws::parse_endpoint("ftp://x"), std::invalid_argument);
  EXPECT_THROW(aws::parse_endpoint("https://x/path"), std::invalid_argument);
  EXPECT_THROW(aws::parse_endpoint("https://x:0"), std::invalid_argument);
  EXPECT_THROW(aws::parse_endpoint("https://user@x"), std::invalid_argument);
  EXPECT_THROW(aws::parse_endpoint("http://"), std::invalid_argument);
}

TEST(HttpClient, ATlsEndpointThatSpeaksNoTlsIsATransportError) {
  // https:// to a plain HTTP server: the handshake fails, reported as such (no status).
  EchoServer server;
  asio::io_context io;
  aws::HttpClient client(io.get_executor(),
                         aws::parse_endpoint("https://127.0.0.1:" + std::to_string(server.port())),
                         {});
  auto r = outbox_test::await_result<aws::HttpResponse>(
      io, [&](std::function<void(aws::HttpResponse)> done) {
        client.async_request(post("x"), std::move(done));
      });
  ASSERT_TRUE(r);
  EXPECT_NE(r->error.find("TLS handshake with https://127.0.0.1:"), std::string::npos) << r->error;
}

// A self-signed certificate for DNS:localhost only, made with the openssl tool.
struct SelfSigned {
  std::filesystem::path dir;
  std::string cert;
  std::string key;
  SelfSigned() {
    char pattern[] = "/tmp/outbox-aws-tls-XXXXXX";
    dir = ::mkdtemp(pattern);
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    const std::string command =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost -keyout " +
        key + " -out " + cert + " >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("openssl req failed");
  }
  ~SelfSigned() { std::filesystem::remove_all(dir); }
};

// EchoServer's answers over TLS with that certificate; a handshake the client refuses ends the
// connection.
class TlsEchoServer {
 public:
  explicit TlsEchoServer(const SelfSigned& identity)
      : context_(asio::ssl::context::tls_server),
        acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    context_.use_certificate_chain_file(identity.cert);
    context_.use_private_key_file(identity.key, asio::ssl::context::pem);
    thread_ = std::thread([this] {
      while (true) {
        tcp::socket socket(io_);
        boost::system::error_code ec;
        acceptor_.accept(socket, ec);
        if (stop_ || ec) return;
        asio::ssl::stream<tcp::socket> stream(std::move(socket), context_);
        stream.handshake(asio::ssl::stream_base::server, ec);
        if (ec) continue;
        boost::beast::flat_buffer buffer;
        http::request<http::string_body> request;
        http::read(stream, buffer, request, ec);
        if (ec) continue;
        http::response<http::string_body> response(http::status::ok, 11);
        response.keep_alive(false);
        response.body() = request.body();
        response.prepare_payload();
        http::write(stream, response, ec);
        stream.shutdown(ec);
      }
    });
  }
  ~TlsEchoServer() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  asio::io_context io_;
  asio::ssl::context context_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

aws::HttpResponse tls_request(const std::string& url, const std::string& ca_file) {
  asio::io_context io;
  aws::HttpClientConfig config;
  config.ca_file = ca_file;
  config.connect_timeout = std::chrono::milliseconds(3000);
  aws::HttpClient client(io.get_executor(), aws::parse_endpoint(url), config);
  auto r = outbox_test::await_result<aws::HttpResponse>(
      io, [&](std::function<void(aws::HttpResponse)> done) {
        client.async_request(post("over tls"), std::move(done));
      });
  if (!r) throw std::runtime_error("no answer from " + url);
  return std::move(*r);
}

TEST(HttpClient, TlsVerifiesTheCertificateAndTheHostName) {
  const SelfSigned identity;
  TlsEchoServer server(identity);
  const std::string port = std::to_string(server.port());

  // Trusted and named: the answer comes.
  const auto good = tls_request("https://localhost:" + port, identity.cert);
  EXPECT_EQ(good.error, "");
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.body, "over tls");

  // The system's store does not know a self-signed certificate.
  const auto untrusted = tls_request("https://localhost:" + port, "");
  EXPECT_NE(untrusted.error.find("TLS handshake with https://localhost:"), std::string::npos)
      << untrusted.error;
  EXPECT_NE(untrusted.error.find("self-signed certificate"), std::string::npos) << untrusted.error;
  EXPECT_EQ(untrusted.status, 0);

  // Trusted, but issued for localhost, not 127.0.0.1.
  const auto misnamed = tls_request("https://127.0.0.1:" + port, identity.cert);
  EXPECT_NE(misnamed.error.find("TLS handshake with https://127.0.0.1:"), std::string::npos)
      << misnamed.error;
  EXPECT_EQ(misnamed.status, 0);
  EXPECT_NE(misnamed.error.find("IP address mismatch"), std::string::npos) << misnamed.error;
}

}  // namespace
