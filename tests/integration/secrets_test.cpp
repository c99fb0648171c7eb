// No secret leaves the relay through its own messages (issue 25): libpq quotes the token it
// cannot parse in a conninfo or URI (a password with a stray '%', an unquoted blank, an
// unencoded '@' that turns the rest of the password into a host name), and the relay used to log
// that on every reconnect, serve it on /readyz, and print it from status, setup and prune. Now
// the conninfo is parsed once at start and a bad one refused with exit 2 in words of our own;
// what libpq says later is stripped of the password. The same for a malformed -X and for the
// --kafka-config file (never a FIFO; a warning when others may read it).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

class SecretsIntegration : public E2eTest {
 protected:
  SecretsIntegration() : E2eTest({"secrets", {"Secret"}, OUTBOX_TEST_LOG_DIR}) {}

  // The test server's host and port, from the fixture's conninfo.
  std::string conninfo_value(const std::string& key) const {
    const auto at = conninfo_.find(key + "=");
    if (at == std::string::npos) return "";
    const auto from = at + key.size() + 1;
    return conninfo_.substr(from, conninfo_.find(' ', from) - from);
  }

  CommandResult command(const std::string& name, const std::vector<std::string>& args) {
    const std::string n = name + "_" + std::to_string(++commands_);
    return run_to_end(relay_bin_, args, log_path(n + "_out"), log_path(n + "_err"), 60s);
  }

  int commands_ = 0;
};

// Each command, given each bad conninfo, exits 2 with one line naming the problem, and the
// password appears nowhere in what it printed.
TEST_F(SecretsIntegration, AnUnparseableConninfoIsRefusedWithoutEchoingIt) {
  const std::string host = conninfo_value("host"), port = conninfo_value("port");
  struct Bad {
    std::string conninfo;
    std::string secret;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"postgresql://postgres:hunter%zz2secret@" + host + ":" + port + "/outbox", "2secret",
       "a '%' not followed by two hex digits"},
      {"host=" + host + " port=" + port + " user=postgres password=hunter 2secret dbname=outbox",
       "2secret", "a word without '='"},
      {"postgresql://postgres:hun@ter2secret@" + host + ":" + port + "/outbox", "ter2secret",
       "an '@' in the URI's user info"},
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run", {"--brokers", brokers_, "--slot", slot_}},
      {"status", {"status", "--slot", slot_}},
      {"setup", {"setup", "--slot", slot_}},
      {"prune", {"prune", "--older-than", "7d", "--brokers", brokers_}},
      {"drop", {"drop", "--slot", slot_, "--yes"}},
      {"reconcile",
       {"reconcile", "--brokers", brokers_, "--column-time", "created_at", "--since", "1h"}},
  };
  for (const Bad& b : bad) {
    for (const auto& [name, rest] : commands) {
      SCOPED_TRACE(name + " with " + b.says);
      std::vector<std::string> args = rest;
      args.insert(name == "run" ? args.begin() : args.begin() + 1, {"--pg", b.conninfo});
      const CommandResult r = command(name, args);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_EQ(r.err, "outbox-relay: --pg: cannot use the connection string: " + b.says +
                           (b.says.starts_with("an '@'") ? " (write it as %40)" : "") +
                           (b.says.starts_with("a '%'") ? " (write a literal % as %25)" : "") +
                           (b.says.starts_with("a word") ? " (quote a value holding blanks in "
                                                           "single quotes)"
                                                         : "") +
                           " (its text is not shown: it may hold a password)\n");
      EXPECT_EQ(r.err.find(b.secret), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find(b.secret), std::string::npos) << r.out;
    }
  }
  // From the environment too (OUTBOX_RELAY_PG, as a unit's Environment= gives it).
  ::setenv("OUTBOX_RELAY_PG", bad[0].conninfo.c_str(), 1);
  const CommandResult r = command("env", {"status", "--slot", slot_});
  ::unsetenv("OUTBOX_RELAY_PG");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find(bad[0].secret), std::string::npos) << r.err;
}

// A conninfo that parses but cannot connect: the relay retries, and neither its log nor /readyz
// carries the password, raw or decoded.
TEST_F(SecretsIntegration, NoPasswordInTheLogOrReadyzWhileItCannotConnect) {
  const std::uint16_t metrics = free_port();
  const std::uint16_t closed = free_port();
  const std::string uri =
      "postgresql://postgres:Hunter%252secret@127.0.0.1:" + std::to_string(closed) +
      "/outbox?connect_timeout=2";
  relays_.push_back(std::make_unique<RelayProcess>(
      relay_bin_,
      std::vector<std::string>{"--pg", uri, "--brokers", brokers_, "--slot", slot_,
                               "--metrics-addr", "127.0.0.1:" + std::to_string(metrics)},
      log_path("relay")));
  RelayProcess& relay = *relays_.back();
  HttpResult ready;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    ready = http_get(metrics, "/readyz");
    if (ready.status == 503 && ready.body.find("connect") != std::string::npos) break;
    ASSERT_TRUE(relay.is_running()) << read_file(relay.log_path());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(ready.status, 503) << ready.body;
  for (const char* secret : {"Hunter%252secret", "Hunter%2secret", "2secret"}) {
    EXPECT_EQ(ready.body.find(secret), std::string::npos) << ready.body;
    EXPECT_EQ(read_file(relay.log_path()).find(secret), std::string::npos)
        << read_file(relay.log_path());
  }
}

// -X sasl.password:hunter2 (a colon for '='): exit 2, and the value is not in the error.
TEST_F(SecretsIntegration, AMalformedPropertyIsNotEchoed) {
  for (const char* bad : {"sasl.password:hunter2secret", "sasl.password:hunter2secret=x"}) {
    const CommandResult r =
        command("x", {"--pg", conninfo_, "--brokers", brokers_, "--slot", slot_, "-X", bad});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("-X: expected PROPERTY=VALUE"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("hunter2secret"), std::string::npos) << r.err;
  }
}

// --kafka-config: a FIFO is refused at once (it would block until a writer came), a file others
// may read is used with a warning in the log, and plugin.library.paths in it is refused unless
// --unsafe-kafka-config is typed.
TEST_F(SecretsIntegration, TheKafkaConfigFileIsChecked) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("outbox_secrets_" + suffix_);
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CommandResult r = command(
      "fifo", {"--pg", conninfo_, "--brokers", brokers_, "--slot", slot_, "--kafka-config", fifo});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "outbox-relay: --kafka-config: " + fifo + " is not a regular file\n");

  const std::string plugin = (dir / "plugin.properties").string();
  std::ofstream(plugin) << "plugin.library.paths=" << (dir / "evil.so").string() << "\n";
  ::chmod(plugin.c_str(), 0600);
  r = command("plugin", {"--pg", conninfo_, "--brokers", brokers_, "--slot", slot_,
                         "--kafka-config", plugin});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("property plugin.library.paths loads shared libraries"), std::string::npos)
      << r.err;

  create_outbox_table();
  const std::string readable = (dir / "readable.properties").string();
  std::ofstream(readable) << "linger.ms=5\n";
  ::chmod(readable.c_str(), 0644);
  RelayProcess& relay = start_relay({"--kafka-config", readable});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  EXPECT_NE(read_file(relay.log_path()).find("may be read by its group or by others"),
            std::string::npos)
      << read_file(relay.log_path());
  expect_graceful_stop(relay);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace outbox_test
