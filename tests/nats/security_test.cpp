// nats::Publisher's security against a nats-server of the test's own (random port, its own
// JetStream store in a temporary directory), configured with users: an NKey seed file logs in
// (the public key derived from the seed), a publish the user's permissions deny and a client
// that presents no credentials are refused and stop the publisher, reported through the
// refused handler; TLS with a client certificate (mutual TLS) publishes, a client without one
// is refused. The NKey is the example pair of the NATS documentation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "outbox/nats/publisher.hpp"
#include "outbox_test/asio_run.hpp"
#include "own_server.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::nats::Publisher;
using outbox::nats::PublisherConfig;
using outbox::sink::Delivery;
using outbox::sink::Header;
using outbox::sink::ProduceStatus;
using outbox::sink::Record;
using outbox_test::nats::kSeed;
using outbox_test::nats::make_test_certificates;
using outbox_test::nats::mutual_tls_config;
using outbox_test::nats::OwnServer;
using outbox_test::nats::server_binary;
using outbox_test::nats::users_config;
using outbox_test::nats::write_text;
using Clock = std::chrono::steady_clock;

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
    return outbox_test::run_until(io_, done, timeout);
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
const std::string kUsers = users_config("outbox.sec.>");

TEST_F(NatsSecurityTest, NKeySeedFileLogsInAndPublishes) {
  start(kUsers);
  PublisherConfig admin;
  admin.urls = "nats://admin:adminpw@" + server_->host_port();
  ASSERT_EQ(
      outbox::nats::ensure_stream(admin, "SEC", {"outbox.sec.>", "outbox.other.>"}, 2min, 10s), "");
  write_text(dir_ + "/relay.nk", std::string("# the relay's user seed\n") + kSeed + "\n");
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
  write_text(dir_ + "/relay.nk", std::string(kSeed) + "\n");
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
  write_text(dir_ + "/bad.nk", "not a seed\n");
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
  ASSERT_TRUE(make_test_certificates(d)) << "openssl failed";
  start(mutual_tls_config(d));
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
