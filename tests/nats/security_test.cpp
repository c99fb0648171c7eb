// nats::Publisher's security against a nats-server of the test's own (random port, its own
// JetStream store in a temporary directory), configured with users: an NKey seed file logs in
// (the public key derived from the seed), a publish the user's permissions deny and a client
// that presents no credentials are refused and stop the publisher, reported through the
// refused handler; TLS with a client certificate (mutual TLS) publishes, a client without one
// is refused. The NKey is the example pair of the NATS documentation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "outbox/nats/publisher.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::nats::Publisher;
using outbox::nats::PublisherConfig;
using outbox::sink::Delivery;
using outbox::sink::Header;
using outbox::sink::ProduceStatus;
using outbox::sink::Record;
using Clock = std::chrono::steady_clock;

constexpr const char* kSeed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY";
constexpr const char* kPublicKey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";

std::string server_binary() {
  const char* v = std::getenv("OUTBOX_NATS_SERVER");
  return v != nullptr ? v : "/usr/sbin/nats-server";
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A nats-server of the test's own, stopped (SIGTERM, then SIGKILL) when it goes.
class OwnServer {
 public:
  // `config`: the configuration after listen and jetstream (authorization, tls).
  OwnServer(const std::string& dir, const std::string& config) : dir_(dir) {
    const std::string conf = dir_ + "/nats.conf";
    log_ = dir_ + "/nats.log";
    write_file(conf,
               "listen: 127.0.0.1:-1\njetstream { store_dir: \"" + dir_ + "/js\" }\n" + config);
    pid_ = ::fork();
    if (pid_ == 0) {
      // Dies with the test process, and keeps none of its output pipes open.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string bin = server_binary();
      ::execl(bin.c_str(), bin.c_str(), "-c", conf.c_str(), "-l", log_.c_str(),
              static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    const auto deadline = Clock::now() + 15s;
    const std::regex listening(R"(Listening for client connections on 127\.0\.0\.1:(\d+))");
    while (Clock::now() < deadline && port_.empty()) {
      std::ifstream in(log_);
      std::stringstream text;
      text << in.rdbuf();
      const std::string log = text.str();
      std::smatch m;
      if (std::regex_search(log, m, listening) &&
          log.find("Server is ready") != std::string::npos) {
        port_ = m[1];
        break;
      }
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  ~OwnServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + 10s;
    while (::waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  bool up() const { return !port_.empty(); }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string host_port() const { return "127.0.0.1:" + port_; }

 private:
  std::string dir_;
  std::string log_;
  pid_t pid_ = -1;
  std::string port_;
};

class NatsSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(server_binary().c_str(), X_OK), 0)
        << server_binary() << " not found; run scripts/install-deps.sh";
    char tmpl[] = "/tmp/outbox-nats-sec-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    publisher_.reset();
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void start(const std::string& config) {
    server_ = std::make_unique<OwnServer>(dir_, config);
    ASSERT_TRUE(server_->up()) << server_->log();
  }

  void make_publisher(const PublisherConfig& config) {
    publisher_ = std::make_unique<Publisher>(
        io_.get_executor(), config, [this](const Delivery& d) { deliveries_.push_back(d.ok); },
        [this](const std::string& m) { fatal_.push_back(m); },
        [this](const std::string& m) { refused_.push_back(m); });
  }

  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done() && Clock::now() < deadline) {
      io_.restart();
      io_.run_for(10ms);
    }
    return done();
  }

  // Publishes one record to `subject` once connected; returns the produce status.
  ProduceStatus publish(const std::string& subject) {
    EXPECT_TRUE(run_until([&] { return publisher_->connected() || publisher_->stopped(); }, 10s));
    const std::string id = "sec-" + std::to_string(++n_);
    const Header headers[] = {{"id", id}, {"type", "Created"}};
    Record r;
    r.topic = subject;
    r.value = "{}";
    r.headers = headers;
    return publisher_->produce(r, n_).status;
  }

  boost::asio::io_context io_;
  std::string dir_;
  std::unique_ptr<OwnServer> server_;
  std::unique_ptr<Publisher> publisher_;
  std::vector<bool> deliveries_;
  std::vector<std::string> fatal_;
  std::vector<std::string> refused_;
  int n_ = 0;
};

// The relay's user: an NKey that may publish to outbox.sec.> only (and receive its acks).
const std::string kUsers = std::string(R"(
authorization {
  users = [
    { user: admin, password: adminpw }
    { nkey: )") + kPublicKey +
                           R"(
      permissions: { publish: { allow: ["outbox.sec.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
)";

TEST_F(NatsSecurityTest, NKeySeedFileLogsInAndPublishes) {
  start(kUsers);
  PublisherConfig admin;
  admin.urls = "nats://admin:adminpw@" + server_->host_port();
  ASSERT_EQ(
      outbox::nats::ensure_stream(admin, "SEC", {"outbox.sec.>", "outbox.other.>"}, 2min, 10s), "");
  write_file(dir_ + "/relay.nk", std::string("# the relay's user seed\n") + kSeed + "\n");
  PublisherConfig config;
  config.urls = "nats://" + server_->host_port();
  config.nkey_seed_file = dir_ + "/relay.nk";
  make_publisher(config);
  ASSERT_EQ(publish("outbox.sec.Order"), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return deliveries_.size() == 1; }, 10s));
  EXPECT_TRUE(deliveries_[0]);
  EXPECT_TRUE(refused_.empty());
  EXPECT_FALSE(publisher_->stopped());
}

TEST_F(NatsSecurityTest, APublishThePermissionsDenyIsRefused) {
  start(kUsers);
  PublisherConfig admin;
  admin.urls = "nats://admin:adminpw@" + server_->host_port();
  ASSERT_EQ(
      outbox::nats::ensure_stream(admin, "SEC", {"outbox.sec.>", "outbox.other.>"}, 2min, 10s), "");
  write_file(dir_ + "/relay.nk", std::string(kSeed) + "\n");
  PublisherConfig config;
  config.urls = "nats://" + server_->host_port();
  config.nkey_seed_file = dir_ + "/relay.nk";
  make_publisher(config);
  ASSERT_EQ(publish("outbox.other.Order"), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return publisher_->stopped(); }, 15s));
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_NE(refused_[0].find("Permissions Violation"), std::string::npos) << refused_[0];
  ASSERT_EQ(deliveries_.size(), 1u);
  EXPECT_FALSE(deliveries_[0]);
}

TEST_F(NatsSecurityTest, NoCredentialsIsRefused) {
  start(kUsers);
  PublisherConfig config;
  config.urls = "nats://" + server_->host_port();
  config.ack_timeout = 3s;
  make_publisher(config);
  ASSERT_TRUE(run_until([&] { return publisher_->stopped(); }, 15s));
  ASSERT_FALSE(refused_.empty()) << (fatal_.empty() ? "" : fatal_[0]);
  EXPECT_NE(refused_[0].find("refused the connection"), std::string::npos) << refused_[0];
}

TEST_F(NatsSecurityTest, AFileWithoutASeedIsAConfigurationError) {
  write_file(dir_ + "/bad.nk", "not a seed\n");
  PublisherConfig config;
  config.urls = "nats://127.0.0.1:1";
  config.nkey_seed_file = dir_ + "/bad.nk";
  try {
    make_publisher(config);
    FAIL() << "no error";
  } catch (const outbox::nats::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "NATS NKey seed file " + dir_ + "/bad.nk: no user seed (a line SU...) in it");
  }
}

// Mutual TLS: certificates made by openssl for the test.
TEST_F(NatsSecurityTest, MutualTlsPublishesAndAClientWithoutCertificateIsRefused) {
  const std::string d = dir_;
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  const std::string cmd =
      "cd " + d + " && openssl req -x509 " + ec +
      " -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem && "
      "openssl req -new " +
      ec +
      " -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
      "printf 'subjectAltName=IP:127.0.0.1' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile san.ext -out server.pem && "
      "openssl req -new " +
      ec +
      " -subj /CN=relay -keyout client.key -out client.csr && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-out client.pem";
  ASSERT_EQ(std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()), 0) << "openssl failed";
  start("tls {\n  cert_file: \"" + d + "/server.pem\"\n  key_file: \"" + d +
        "/server.key\"\n  ca_file: \"" + d + "/ca.pem\"\n  verify: true\n}\n");
  PublisherConfig config;
  config.urls = "tls://" + server_->host_port();
  config.tls_ca_file = d + "/ca.pem";
  config.tls_cert_file = d + "/client.pem";
  config.tls_key_file = d + "/client.key";
  ASSERT_EQ(outbox::nats::ensure_stream(config, "TLS", {"outbox.tls.>"}, 2min, 10s), "");
  make_publisher(config);
  ASSERT_EQ(publish("outbox.tls.Order"), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return deliveries_.size() == 1; }, 10s));
  EXPECT_TRUE(deliveries_[0]);

  // Without a client certificate the server refuses the handshake.
  publisher_.reset();
  config.tls_cert_file.clear();
  config.tls_key_file.clear();
  config.ack_timeout = 3s;
  make_publisher(config);
  ASSERT_TRUE(run_until([&] { return publisher_->stopped(); }, 15s));
  EXPECT_FALSE(publisher_->connected());
  ASSERT_FALSE(refused_.empty()) << (fatal_.empty() ? "" : fatal_[0]);
  EXPECT_NE(refused_[0].find("refused the connection"), std::string::npos) << refused_[0];
}

}  // namespace
