// The relay's NATS security flags end to end: the real outbox-relay binary and PostgreSQL against
// a nats-server of the test's own (own_server.hpp: random port, JetStream in a temporary
// directory) that requires an NKey user or a client certificate. What a user checks: with the
// right --nats-nkey, or --nats tls:// with --nats-tls-ca/-cert/-key, every committed event in the
// stream once and in order, the slot confirmed through them; without them, exit code 1 with one
// error naming the refused connection (docs/jetstream.md, "Credentials or certificate refused"),
// the slot not confirmed past the events, nothing stored; the relay started again with the right
// settings delivers them. A broken mapping from the flags to the publisher's settings fails here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "nats_relay_fixture.hpp"
#include "own_server.hpp"

namespace outbox_test::fault {
namespace {

using outbox_test::nats::OwnServer;

class NatsRelaySecurity : public NatsRelay {
 protected:
  void SetUp() override {
    NatsRelay::SetUp();
    if (HasFatalFailure()) return;
    const std::string bin = outbox_test::nats::server_binary();
    ASSERT_EQ(::access(bin.c_str(), X_OK), 0) << bin << " not found; run scripts/install-deps.sh";
    char tmpl[] = "/tmp/outbox-nats-relay-sec-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    stream_.clear();  // it goes with the server
    NatsRelay::TearDown();
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A server with users: admin (password; the test's streams and reads) and the relay's NKey
  // user, which may publish to the test's subject and its progress bucket only. The relay's --nats
  // is the plain URL.
  void start_with_nkey_user() {
    ASSERT_NO_FATAL_FAILURE(start_server(
        outbox_test::nats::users_config(topic_, outbox_test::nats::progress_bucket_subjects())));
    nats_ = "nats://" + server_->host_port();
    access_.url = "nats://" + std::string(outbox_test::nats::kAdmin) + "@" + server_->host_port();
    ASSERT_NO_FATAL_FAILURE(create_stream());
    seed_file_ = dir_ + "/relay.nk";
    outbox_test::nats::write_text(
        seed_file_, std::string("# the relay's user seed\n") + outbox_test::nats::kSeed + "\n");
  }
  // A server requiring TLS with a client certificate of the test CA; --nats tls://...
  void start_with_mutual_tls() {
    ASSERT_TRUE(outbox_test::nats::make_test_certificates(dir_)) << "openssl failed";
    ASSERT_NO_FATAL_FAILURE(start_server(outbox_test::nats::mutual_tls_config(dir_)));
    nats_ = "tls://" + server_->host_port();
    access_ = {nats_, dir_ + "/ca.pem", dir_ + "/client.pem", dir_ + "/client.key"};
    ASSERT_NO_FATAL_FAILURE(create_stream());
  }
  void start_server(const std::string& config) {
    server_ = std::make_unique<OwnServer>(dir_, config);
    ASSERT_TRUE(server_->up()) << server_->log();
  }
  std::vector<std::string> tls_flags(bool client_certificate) const {
    std::vector<std::string> flags = {"--nats-tls-ca", dir_ + "/ca.pem"};
    if (client_certificate) {
      flags.insert(flags.end(), {"--nats-tls-cert", dir_ + "/client.pem", "--nats-tls-key",
                                 dir_ + "/client.key"});
    }
    return flags;
  }

  // Events committed while a relay runs with `flags`: all in the stream once, in order, the
  // slot confirmed through them; then a graceful stop.
  void expect_relayed_with(const std::vector<std::string>& flags) {
    create_outbox_table();
    RelayProcess& relay = start_relay(flags);
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    for (int t = 0; t < 10; ++t) {
      pg_->exec("BEGIN; " +
                Workload::insert_sql(qualified_table(), aggregatetype_, 5, t * 10 + 1, 10, false) +
                "; COMMIT");
    }
    ASSERT_EQ(committed_seqs().size(), 100u);
    expect_every_event_stored_once(60s);
    expect_graceful_stop(relay);
  }

  // The slot and publication made by `setup` (a refused relay may end before it makes them),
  // then events committed, then a relay with `flags`: exit 1, one error line naming the refused
  // connection and the flags to check, the slot not confirmed past the events, nothing stored.
  void expect_refused_with(const std::vector<std::string>& flags) {
    create_outbox_table();
    const CommandResult setup =
        run_to_end(relay_bin_,
                   {"setup", "--pg", conninfo_, "--table", qualified_table(), "--slot", slot_,
                    "--publication", publication_},
                   log_path("setup_out"), log_path("setup_err"), 60s);
    ASSERT_EQ(setup.exit_code, 0) << setup.err;
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 6, false));
    const Lsn after = pg_->current_wal_lsn();
    RelayProcess& relay = start_relay(flags);
    ASSERT_EQ(relay.wait_exit(60s), std::optional<int>(1)) << tail_file(relay.log_path(), 20);
    EXPECT_EQ(count_in_file(relay.log_path(), "event=fatal"), 1u)
        << tail_file(relay.log_path(), 20);
    std::istringstream lines(read_file(relay.log_path()));
    std::string fatal;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("event=fatal") != std::string::npos) fatal = line;
    }
    EXPECT_NE(fatal.find("exit_code=1"), std::string::npos) << fatal;
    EXPECT_NE(fatal.find("NATS servers " + nats_ + " refused the connection"), std::string::npos)
        << fatal;
    EXPECT_NE(fatal.find("check the relay's NATS security settings"), std::string::npos) << fatal;
    const std::optional<Lsn> confirmed = pg_->slot_confirmed_flush(slot_);
    ASSERT_TRUE(confirmed.has_value());
    EXPECT_LT(*confirmed, after) << "the slot moved past events the server never stored";
    EXPECT_EQ(stored().size(), 0u);
  }

  std::string dir_;
  std::string seed_file_;
  std::unique_ptr<OwnServer> server_;
};

// --nats-nkey FILE: the relay logs in as the NKey user (the public key derived from the seed)
// and needs no more than publish on its subject, its progress bucket's subjects and _INBOX.>.
TEST_F(NatsRelaySecurity, NKeySeedFileStoresEveryEventOnce) {
  ASSERT_NO_FATAL_FAILURE(start_with_nkey_user());
  expect_relayed_with({"--nats-nkey", seed_file_});
}

// No credentials: refused, exit 1; started again with --nats-nkey, the waiting events are stored
// once, in order.
TEST_F(NatsRelaySecurity, WithoutCredentialsRefusedThenDeliveredWithTheSeed) {
  ASSERT_NO_FATAL_FAILURE(start_with_nkey_user());
  ASSERT_NO_FATAL_FAILURE(expect_refused_with({}));
  RelayProcess& relay = start_relay({"--nats-nkey", seed_file_});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  expect_every_event_stored_once(60s);
  expect_graceful_stop(relay);
}

// --nats-nkey with a valid seed of no user of the server: refused like no credentials, exit 1,
// nothing stored, the slot not past the events.
TEST_F(NatsRelaySecurity, WrongSeedIsRefused) {
  ASSERT_NO_FATAL_FAILURE(start_with_nkey_user());
  const std::string wrong = dir_ + "/wrong.nk";
  outbox_test::nats::write_text(wrong, std::string(outbox_test::nats::kOtherSeed) + "\n");
  ASSERT_NO_FATAL_FAILURE(expect_refused_with({"--nats-nkey", wrong}));
}

// --nats tls:// with --nats-tls-ca, --nats-tls-cert and --nats-tls-key against a server that
// requires a client certificate (verify: true).
TEST_F(NatsRelaySecurity, MutualTlsStoresEveryEventOnce) {
  ASSERT_NO_FATAL_FAILURE(start_with_mutual_tls());
  expect_relayed_with(tls_flags(true));
}

// The CA but no client certificate: the server refuses the handshake, exit 1; started again with
// the certificate, the waiting events are stored once, in order.
TEST_F(NatsRelaySecurity, WithoutClientCertificateRefusedThenDeliveredWithIt) {
  ASSERT_NO_FATAL_FAILURE(start_with_mutual_tls());
  ASSERT_NO_FATAL_FAILURE(expect_refused_with(tls_flags(false)));
  RelayProcess& relay = start_relay(tls_flags(true));
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  expect_every_event_stored_once(60s);
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test::fault
