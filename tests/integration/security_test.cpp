// The relay against a secured Kafka: the test broker's SASL_SSL listener (PLAIN over TLS; SCRAM
// too, which librdkafka before 2.6.1 cannot use) and its mutual-TLS listener, with ACLs that let
// the relay's principal (User:outbox-relay) write outbox.event.* and outbox.dlq* and nothing else.
// What a user checks: events arrive, idempotently, with no secret on the command line or in any
// log line (librdkafka's debug output included); a configuration that cannot work is one clear
// error naming the broker, never a silent retry loop; a topic the ACLs deny is a poison event,
// handled by --on-error, never a hang. Records are read back on the PLAINTEXT listener, whose
// principal is a super user.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/kafka_admin.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// Lines of `text` that contain `what`.
std::size_t lines_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(what) != std::string::npos) ++n;
  }
  return n;
}

class SecurityIntegration : public E2eTest {
 protected:
  SecurityIntegration() : E2eTest({"sec", {"order"}, OUTBOX_TEST_LOG_DIR}) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(E2eTest::SetUp());
    try {
      plaintext_brokers_ = brokers_;
      sasl_brokers_ = require_env("OUTBOX_KAFKA_SASL_BROKERS");
      mtls_brokers_ = require_env("OUTBOX_KAFKA_MTLS_BROKERS");
      ca_ = require_env("OUTBOX_KAFKA_CA");
      client_cert_ = require_env("OUTBOX_KAFKA_CLIENT_CERT");
      client_key_ = require_env("OUTBOX_KAFKA_CLIENT_KEY");
      user_ = require_env("OUTBOX_KAFKA_SASL_USER");
      password_ = require_env("OUTBOX_KAFKA_SASL_PASSWORD");
    } catch (const std::exception& e) {
      GTEST_FAIL() << e.what() << " (scripts/kafka-up.sh writes it to .local/env)";
    }
    create_outbox_table();
  }

  // A client.properties file only its owner can read, in the test's log directory.
  std::string write_kafka_config(const std::string& what, const std::string& text) {
    const std::string path = log_path(what + "_client.properties");
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
    return path;
  }

  std::string sasl_plain_config(const std::string& password) const {
    return "# SASL_SSL with PLAIN, as an operator writes it\n"
           "security.protocol=SASL_SSL\n"
           "sasl.mechanism=PLAIN\n"
           "sasl.username=" +
           user_ + "\nsasl.password=" + password + "\nssl.ca.location=" + ca_ + "\n";
  }

  // Inserts `n` events of aggregate type `type` in one transaction; returns the WAL position
  // after the commit.
  Lsn insert_events(const std::string& type, int first_seq, int n) {
    std::string sql = "BEGIN;";
    for (int seq = first_seq; seq < first_seq + n; ++seq) {
      sql += "INSERT INTO " + qualified_table() +
             " (aggregatetype, aggregateid, type, payload) VALUES ('" + type + "', 'agg-" +
             std::to_string(seq % 5) + "', 'Created', '{\"seq\": " + std::to_string(seq) + "}');";
    }
    pg_->exec(sql + "COMMIT;");
    return pg_->current_wal_lsn();
  }

  // Relays `kEvents` events and checks them in Kafka, in order, and the slot confirmed past them.
  void expect_relayed(RelayProcess& relay) {
    constexpr int kEvents = 60;
    Lsn end{};
    for (int t = 0; t < 6; ++t) end = insert_events(aggregatetypes_[0], t * 10 + 1, 10);
    KafkaReader reader(plaintext_brokers_, topics_);
    DistinctIds all(kEvents);
    ASSERT_TRUE(reader.read_until(std::ref(all), 60s))
        << all.count() << " of " << kEvents << " events in Kafka within 60 s\n"
        << tail_file(relay.log_path(), 30);
    expect_confirmed_reaches(end, 30s);
    EXPECT_TRUE(reader.read_to_end()) << "the topics could not be read to their end";
    EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(kEvents)) << "each event once";
    const Problems problems = check_committed_in_order(reader, committed_rows());
    EXPECT_EQ(problems.count(), 0u) << problems.describe();
  }

  // The relay's command line as the kernel shows it to every user of the host (ps).
  static std::string command_line_of(const RelayProcess& relay) {
    std::string cmdline = read_file("/proc/" + std::to_string(relay.pid()) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    return cmdline;
  }

  // The relay exits with `code` within `timeout`; returns its whole log.
  std::string expect_exit(RelayProcess& relay, int code, std::chrono::milliseconds timeout) {
    const auto started = Clock::now();
    const std::optional<int> exit_code = relay.wait_exit(timeout);
    EXPECT_EQ(exit_code, std::optional<int>(code))
        << "relay still running or other exit after " << timeout.count() << " ms\n"
        << tail_file(relay.log_path(), 30);
    std::cout
        << "relay exited with " << exit_code.value_or(-1) << " after "
        << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()
        << " ms\n";
    return read_file(relay.log_path());
  }

  std::string plaintext_brokers_;
  std::string sasl_brokers_;
  std::string mtls_brokers_;
  std::string ca_;
  std::string client_cert_;
  std::string client_key_;
  std::string user_;
  std::string password_;
};

// PLAIN over TLS with every secret in a file named by OUTBOX_RELAY_KAFKA_CONFIG: nothing secret
// on the command line, and none in the log although librdkafka logs everything it does
// (-X debug=all, --log-level debug), the SASL exchange included.
TEST_F(SecurityIntegration, ProducesThroughSaslSslWithPlainAndNoSecretInArgvOrLog) {
  const std::string config = write_kafka_config("plain", sasl_plain_config(password_));
  ASSERT_EQ(::setenv("OUTBOX_RELAY_KAFKA_CONFIG", config.c_str(), 1), 0);
  brokers_ = sasl_brokers_;
  RelayProcess* started = nullptr;
  {
    ScopeGuard unset([] { ::unsetenv("OUTBOX_RELAY_KAFKA_CONFIG"); });
    started = &start_relay({"-X", "debug=all", "--log-level", "debug"});
  }
  RelayProcess& relay = *started;
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  EXPECT_EQ(command_line_of(relay).find(password_), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(expect_relayed(relay));
  expect_graceful_stop(relay);

  const std::string log = read_file(relay.log_path());
  // The debug output was there to leak the password: the SASL PLAIN login over TLS to this
  // broker, and the idempotent producer's id.
  EXPECT_GT(lines_with(log, "sasl_ssl://" + sasl_brokers_), 0u);
  EXPECT_GT(lines_with(log, "Sending SASL PLAIN"), 0u) << "no SASL debug output";
  EXPECT_GT(lines_with(log, "sasl.password = [redacted]"), 0u) << "no configuration dump";
  EXPECT_GT(lines_with(log, "ProducerId"), 0u) << "no idempotent producer id in the debug output";
  EXPECT_EQ(log.find(password_), std::string::npos) << "the password is in the relay's log";
}

// --delivery exactly-once through SASL_SSL: the principal needs its transactional.id and the
// checkpoint topic (the test broker's ACLs grant outbox-relay.* for both, and nothing else).
TEST_F(SecurityIntegration, ProducesExactlyOnceThroughSaslSsl) {
  const std::string config = write_kafka_config("eos", sasl_plain_config(password_));
  brokers_ = sasl_brokers_;
  RelayProcess& relay = start_relay({"--kafka-config", config, "--delivery", "exactly-once"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  ASSERT_NO_FATAL_FAILURE(expect_relayed(relay));
  EXPECT_GE(lines_with(read_file(relay.log_path()), "event=checkpoint_read"), 1u);
  expect_graceful_stop(relay);
}

// Mutual TLS: the client certificate's CN is the principal (User:outbox-relay); no password at
// all. The file comes with --kafka-config.
TEST_F(SecurityIntegration, ProducesThroughMutualTls) {
  const std::string config =
      write_kafka_config("mtls", "security.protocol=SSL\nssl.ca.location=" + ca_ +
                                     "\nssl.certificate.location=" + client_cert_ +
                                     "\nssl.key.location=" + client_key_ + "\n");
  brokers_ = mtls_brokers_;
  RelayProcess& relay = start_relay({"--kafka-config", config});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  ASSERT_NO_FATAL_FAILURE(expect_relayed(relay));
  expect_graceful_stop(relay);
}

// librdkafka before 2.6.1 cannot log in with SCRAM to Kafka 4 (checked on this broker with
// librdkafka 2.0.2 and kcat: "Authentication failed during authentication due to invalid
// credentials with SASL mechanism SCRAM-SHA-512" with the right password, which a Java client
// logs in with). The relay says so at once, in one line with the fix, instead of retrying.
TEST_F(SecurityIntegration, ScramOnAnOldLibrdkafkaIsOneClearErrorAtStart) {
  std::string text = sasl_plain_config(password_);
  text.replace(text.find("sasl.mechanism=PLAIN"), 20, "sasl.mechanism=SCRAM-SHA-512");
  const std::string config = write_kafka_config("scram", text);
  brokers_ = sasl_brokers_;
  RelayProcess& relay = start_relay({"--kafka-config", config});
  if (librdkafka_version() >= 0x020601ff) {
    // A librdkafka that can: SCRAM works like PLAIN.
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    ASSERT_NO_FATAL_FAILURE(expect_relayed(relay));
    return;
  }
  const std::string log = expect_exit(relay, 2, 20s);
  EXPECT_EQ(lines_with(log, "SCRAM"), 1u) << log;
  EXPECT_GT(
      lines_with(log, "sasl.mechanism=SCRAM-SHA-512 cannot log in with the linked librdkafka " +
                          librdkafka_version_text()),
      0u)
      << log;
  EXPECT_GT(lines_with(log, "sasl.mechanism=PLAIN over security.protocol=SASL_SSL, or mutual TLS"),
            0u)
      << log;
  EXPECT_GT(lines_with(log, "librdkafka 2.6.1 or later"), 0u) << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "refused before touching PostgreSQL";
}

// A wrong password: the broker refuses the login. The relay exits 1 (a supervisor restarts it,
// reading its configuration again) with one error naming the broker, instead of librdkafka's
// endless reconnects while the slot stays held and nothing is delivered. Neither password is in
// the log, librdkafka's debug output included.
TEST_F(SecurityIntegration, WrongPasswordIsAClearErrorNamingTheBroker) {
  const std::string wrong = "wrong-" + suffix_;
  const std::string config = write_kafka_config("wrong", sasl_plain_config(wrong));
  brokers_ = sasl_brokers_;
  RelayProcess& relay =
      start_relay({"--kafka-config", config, "-X", "debug=all", "--log-level", "debug"});
  const std::string log = expect_exit(relay, 1, 60s);
  const std::string broker = "sasl_ssl://" + sasl_brokers_;
  EXPECT_EQ(lines_with(log, "event=fatal"), 1u) << tail_file(relay.log_path(), 20);
  EXPECT_EQ(lines_with(log, "Kafka broker authentication refused (_AUTHENTICATION): " + broker), 1u)
      << tail_file(relay.log_path(), 20);
  EXPECT_EQ(log.find(wrong), std::string::npos) << "the wrong password is in the log";
  EXPECT_EQ(log.find(password_), std::string::npos) << "the password is in the log";
}

// The broker's certificate is not trusted (no ssl.ca.location: the system's CAs do not know the
// test CA). Same as a wrong password: exit 1, one error naming the broker and the cause.
TEST_F(SecurityIntegration, UntrustedCertificateIsAClearErrorNamingTheBroker) {
  std::string text = sasl_plain_config(password_);
  text.erase(text.find("ssl.ca.location="));
  const std::string config = write_kafka_config("untrusted", text);
  brokers_ = sasl_brokers_;
  RelayProcess& relay = start_relay({"--kafka-config", config});
  const std::string log = expect_exit(relay, 1, 60s);
  EXPECT_EQ(lines_with(log, "event=fatal"), 1u) << tail_file(relay.log_path(), 20);
  const std::string fatal = "Kafka broker TLS certificate refused (_SSL): sasl_ssl://" +
                            sasl_brokers_ + "/bootstrap: SSL handshake failed";
  EXPECT_EQ(lines_with(log, fatal), 1u) << tail_file(relay.log_path(), 20);
  EXPECT_GT(lines_with(log, "certificate verify failed"), 0u) << tail_file(relay.log_path(), 20);
}

// A topic the relay's principal may not write (the ACLs allow outbox.event.* and outbox.dlq*):
// --on-error fail stops with the poison exit code and an error naming the topic and the broker's
// refusal; the slot stays before the event.
TEST_F(SecurityIntegration, DeniedTopicStopsTheRelayNamingTheTopic) {
  brokers_ = sasl_brokers_;
  const std::string config = write_kafka_config("plain", sasl_plain_config(password_));
  RelayProcess& relay =
      start_relay({"--kafka-config", config, "--topic", "denied.${aggregatetype}"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const Lsn before = *pg_->slot_confirmed_flush(slot_);
  const Lsn after = insert_events(aggregatetypes_[0], 1, 1);
  const std::string log = expect_exit(relay, 3, 60s);
  const std::string topic = "denied." + aggregatetypes_[0];
  EXPECT_EQ(lines_with(log, "event=fatal"), 1u);
  EXPECT_EQ(lines_with(log, "for topic " + topic), 1u) << tail_file(relay.log_path(), 20);
  EXPECT_GT(lines_with(log, "TOPIC_AUTHORIZATION_FAILED"), 0u) << tail_file(relay.log_path(), 20);
  const std::optional<Lsn> confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed);
  EXPECT_LT(*confirmed, after) << "the slot moved past the undelivered event";
  EXPECT_GE(*confirmed, before);
}

// --on-error dlq: events for the denied topic go to the (allowed) dead-letter topic with the
// broker's refusal; the others reach their topic; the relay goes on and confirms past them all.
TEST_F(SecurityIntegration, DeniedTopicIsDeadLetteredWhenTheDlqIsAllowed) {
  brokers_ = sasl_brokers_;
  const std::string config = write_kafka_config("plain", sasl_plain_config(password_));
  const std::string allowed = "outbox.event.ok" + suffix_;
  const std::string denied = "denied.no" + suffix_;
  const std::string dlq = "outbox.dlq." + suffix_;
  RelayProcess& relay = start_relay({"--kafka-config", config, "--topic", "${aggregatetype}",
                                     "--on-error", "dlq", "--dlq-topic", dlq});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  insert_events(allowed, 1, 3);
  insert_events(denied, 4, 2);
  const Lsn end = insert_events(allowed, 6, 3);

  KafkaReader reader(plaintext_brokers_, {allowed, dlq});
  ASSERT_TRUE(reader.read_until([](const auto& records) { return records.size() >= 8; }, 60s))
      << reader.records().size() << " of 8 records within 60 s\n"
      << tail_file(relay.log_path(), 30);
  expect_confirmed_reaches(end, 30s);
  EXPECT_TRUE(reader.read_to_end()) << "the topics could not be read to their end";
  std::size_t in_topic = 0;
  std::size_t dead = 0;
  for (const Record& r : reader.records()) {
    if (r.topic == allowed) {
      ++in_topic;
      continue;
    }
    ++dead;
    EXPECT_EQ(r.headers.at("outbox.original.topic"), denied) << describe(r);
    EXPECT_NE(r.headers.at("outbox.error").find("TOPIC_AUTHORIZATION_FAILED"), std::string::npos)
        << describe(r);
  }
  EXPECT_EQ(in_topic, 6u);
  EXPECT_EQ(dead, 2u);
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// reconcile, a short-lived Kafka client of its own, ends at once too when the broker refuses its
// login, naming the broker, instead of waiting out --timeout and blaming the network.
TEST_F(SecurityIntegration, ReconcileWithAWrongPasswordNamesTheBroker) {
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  insert_events(aggregatetypes_[0], 1, 1);
  const std::string config = write_kafka_config("wrong", sasl_plain_config("wrong-" + suffix_));
  const auto started = Clock::now();
  const CommandResult r =
      run_to_end(relay_bin_,
                 {"reconcile", "--pg", conninfo_, "--brokers", sasl_brokers_, "--kafka-config",
                  config, "--table", qualified_table(), "--column-time", "created_at", "--since",
                  "1h", "--timeout", "60s"},
                 log_path("reconcile_out"), log_path("reconcile_err"), 90s);
  const auto took = Clock::now() - started;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(took, 30s) << "waited for --timeout instead of stopping at the refusal";
  EXPECT_EQ(lines_with(r.err,
                       "outbox-relay reconcile: Kafka broker authentication refused "
                       "(_AUTHENTICATION): sasl_ssl://" +
                           sasl_brokers_),
            1u)
      << r.err;
  EXPECT_EQ(r.err.find("wrong-" + suffix_), std::string::npos);
}

// The PostgreSQL password out of --pg: libpq reads PGPASSWORD, or the file PGPASSFILE names.
// scripts/pg-up.sh makes role outbox_password_test log in with a password only
// (scram-sha-256); every other role of the test cluster is trusted.
TEST_F(SecurityIntegration, PostgresPasswordFromPgpasswordOrPgpassfile) {
  constexpr const char* kRole = "outbox_password_test";
  const std::string password = "pg-" + suffix_;
  pg_->exec(std::string("DO $$ BEGIN CREATE ROLE ") + kRole +
            " LOGIN REPLICATION SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
  pg_->exec(std::string("ALTER ROLE ") + kRole + " PASSWORD '" + password + "'");
  const std::size_t user = conninfo_.find("user=postgres");
  ASSERT_NE(user, std::string::npos) << conninfo_;
  // The relays connect as the role; TearDown's cleanup as postgres again.
  ScopeGuard restore([this, superuser = conninfo_] { conninfo_ = superuser; });
  conninfo_.replace(user, 13, std::string("user=") + kRole);
  // Without a password the role cannot log in: the rest of the test needs libpq's sources.
  EXPECT_THROW(PgClient{conninfo_}, std::exception)
      << "pg_hba.conf lets " << kRole << " in without a password (scripts/pg-up.sh)";

  // PGPASSFILE: host:port:database:user:password, readable by its owner only (libpq ignores a
  // file others can read).
  const std::string pgpass = log_path("pgpass");
  std::filesystem::create_directories(std::filesystem::path(pgpass).parent_path());
  std::ofstream(pgpass) << "*:*:*:" << kRole << ":" << password << "\n";
  ::chmod(pgpass.c_str(), 0600);
  for (const auto& [variable, value] :
       {std::pair<std::string, std::string>{"PGPASSWORD", password}, {"PGPASSFILE", pgpass}}) {
    SCOPED_TRACE(variable);
    ASSERT_EQ(::setenv(variable.c_str(), value.c_str(), 1), 0);
    RelayProcess* started = nullptr;
    {
      ScopeGuard unset([&] { ::unsetenv(variable.c_str()); });
      started = &start_relay({"--metrics-addr", "off"});
    }
    RelayProcess& relay = *started;
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    EXPECT_EQ(command_line_of(relay).find(password), std::string::npos);
    const Lsn end = insert_events(aggregatetypes_[0], 1, 1);
    expect_confirmed_reaches(end, 30s);
    expect_graceful_stop(relay);
    EXPECT_EQ(read_file(relay.log_path()).find(password), std::string::npos)
        << "the password is in the relay's log";
  }
}

}  // namespace
}  // namespace outbox_test
