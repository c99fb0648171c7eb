// Promises of the README's operating guide that only a running relay can break: the metrics
// listener's address (the default one taken: the relay runs without it; an explicit one taken:
// exit 1), its 5 s deadline on a client that sends nothing, and metrics that no other
// end-to-end test reads (Kafka transactions and their commit time; ignored logical messages).
//
// Runs the real outbox-relay binary against the real PostgreSQL and Kafka that scripts/test.sh
// starts. Every test has its own table, slot, publication and topics (unique suffix).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"
#include "outbox_test/http.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint16_t kDefaultMetricsPort = 9187;  // the default --metrics-addr 127.0.0.1:9187

// A listening TCP socket on 127.0.0.1:port, closed with the object: the port is taken. Listening,
// not only bound: Linux lets a second SO_REUSEADDR socket bind a port nobody listens on.
class HeldPort {
 public:
  explicit HeldPort(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 1) != 0) {
      error_ = std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~HeldPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

// A TCP connection to 127.0.0.1:port that sends nothing.
int connect_silently(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class Promises : public E2eTest {
 protected:
  Promises() : E2eTest({"prom", {"Promise"}, OUTBOX_TEST_LOG_DIR}) {}

  // One event committed and read back from Kafka: the relay relays.
  void expect_relays_one_event() {
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
              "', 'a-1', 'Created', '{\"n\": 1}')");
    KafkaReader reader(brokers_, {topics_[0]});
    DistinctIds one(1);
    EXPECT_TRUE(reader.read_until(std::ref(one), 60s)) << "the event did not reach Kafka";
  }

  // The outbox table and a relay with its metrics listener on a free port (`port`), streaming
  // and answering /healthz. Use with ASSERT_NO_FATAL_FAILURE.
  void start_relay_with_endpoint(std::uint16_t& port, RelayProcess*& relay) {
    create_outbox_table();
    port = free_port();
    metrics_addr_ = "127.0.0.1:" + std::to_string(port);
    relay = &start_relay();
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
    ASSERT_TRUE(wait_until([&] { return http_get(port, "/healthz").status == 200; }, 30s));
  }
};

// The default address taken (a standby beside the active relay on one host): one
// event=metrics_unavailable warning, and the relay streams without the endpoint.
TEST_F(Promises, DefaultMetricsPortTakenRunsWithout) {
  create_outbox_table();
  // Holds the default port; on a shared machine another relay may hold it for a while first.
  std::unique_ptr<HeldPort> taken;
  const bool held = wait_until(
      [&] {
        taken = std::make_unique<HeldPort>(kDefaultMetricsPort);
        return taken->held();
      },
      120s, 500ms);
  ASSERT_TRUE(held) << "127.0.0.1:" << kDefaultMetricsPort
                    << " stayed in use by another process for 120 s: " << taken->error();
  metrics_addr_.clear();  // no --metrics-addr: the default
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("event=metrics_unavailable addr=127.0.0.1:9187"), std::string::npos)
      << "no event=metrics_unavailable for the default address in\n"
      << tail_file(relay.log_path(), 20);
  EXPECT_EQ(log.find("event=metrics_listening"), std::string::npos) << log;
  ASSERT_NO_FATAL_FAILURE(expect_relays_one_event());
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// An address given with --metrics-addr that cannot be bound is an error: exit 1 at start, one
// line naming the address.
TEST_F(Promises, ExplicitMetricsAddressTakenExits1) {
  create_outbox_table();
  const std::uint16_t port = free_port();
  HeldPort taken(port);
  ASSERT_TRUE(taken.held()) << taken.error();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  metrics_addr_ = addr;
  RelayProcess& relay = start_relay();
  const auto code = relay.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay runs although --metrics-addr " << addr
                                << " cannot be bound";
  EXPECT_EQ(*code, 1) << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("--metrics-addr " + addr + ": cannot listen"), std::string::npos)
      << "no error naming " << addr << " in\n"
      << log;
  EXPECT_FALSE(pg_->slot_exists(slot_) && pg_->slot_active(slot_)) << "the relay streamed";
}

// A client that connects and sends nothing is dropped after 5 s; meanwhile the endpoint answers
// others (it runs on the relay's event loop and must not wait on one client).
TEST_F(Promises, SilentHttpClientDroppedAfter5s) {
  std::uint16_t port = 0;
  RelayProcess* started = nullptr;
  ASSERT_NO_FATAL_FAILURE(start_relay_with_endpoint(port, started));
  RelayProcess& relay = *started;

  const int fd = connect_silently(port);
  ASSERT_GE(fd, 0) << "cannot connect to " << metrics_addr_ << ": " << std::strerror(errno);
  const auto connected = Clock::now();
  // Others are served while the silent client holds its connection.
  EXPECT_EQ(http_get(port, "/healthz").status, 200);
  EXPECT_EQ(http_get(port, "/readyz").status, 200);

  // The server closes the connection: poll reports it readable (EOF) or hung up.
  bool closed = false;
  std::int64_t closed_after_ms = -1;
  while (Clock::now() - connected < 20s) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, 200);
    if (n > 0) {
      char byte;
      const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
          (p.revents & (POLLHUP | POLLERR)) != 0) {
        closed = true;
        closed_after_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - connected).count();
        break;
      }
      ADD_FAILURE() << "the server sent data to a client that asked nothing";
      break;
    }
  }
  ::close(fd);
  ASSERT_TRUE(closed) << "a client that sent nothing was still connected after 20 s";
  RecordProperty("silent_client_dropped_after_ms", std::to_string(closed_after_ms));
  EXPECT_GE(closed_after_ms, 4500) << "dropped before its 5 s";
  EXPECT_LE(closed_after_ms, 8000) << "dropped long after 5 s";
  EXPECT_TRUE(relay.is_running());
  EXPECT_EQ(http_get(port, "/healthz").status, 200);
  expect_graceful_stop(relay);
}

// Descriptors the process holds now (/proc/PID/fd), -1 when unreadable.
long open_fds(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// Issue 25: clients holding idle sockets, many more than the listener's cap of 32, cannot starve
// the liveness probe: a new connection at the cap closes the oldest one that has sent no complete
// request, so /healthz (and /readyz) answer at once, and the relay holds no more descriptors for
// the idle sockets than the cap.
TEST_F(Promises, IdleSocketsCannotStarveTheProbe) {
  std::uint16_t port = 0;
  RelayProcess* started = nullptr;
  ASSERT_NO_FATAL_FAILURE(start_relay_with_endpoint(port, started));
  RelayProcess& relay = *started;
  const long fds_before = open_fds(relay.pid());
  ASSERT_GT(fds_before, 0);

  constexpr int kIdle = 200;  // far more than the cap of 32
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = connect_silently(port);
    ASSERT_GE(fd, 0) << "cannot connect to " << metrics_addr_ << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  for (int round = 0; round < 5; ++round) {
    const auto asked = Clock::now();
    const HttpResult live = http_get(port, "/healthz");
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked).count();
    EXPECT_EQ(live.status, 200) << "/healthz unanswered while " << kIdle
                                << " idle sockets are held";
    EXPECT_LT(took, 2000) << "/healthz took " << took << " ms";
    RecordProperty("healthz_ms_" + std::to_string(round), std::to_string(took));
  }
  EXPECT_EQ(http_get(port, "/readyz").status, 200);
  // The relay has closed all but the newest idle sockets (at most the cap), not kept them all.
  // Its descriptors come back within the cap (plus slack for its Kafka and PostgreSQL sockets).
  long fds_held = -1;
  EXPECT_TRUE(wait_until(
      [&] {
        fds_held = open_fds(relay.pid());
        return fds_held >= 0 && fds_held <= fds_before + 32 + 8;
      },
      10s))
      << "the relay holds " << fds_held << " descriptors with " << kIdle << " idle sockets open, "
      << fds_before << " before";
  RecordProperty("fds_before", std::to_string(fds_before));
  RecordProperty("fds_with_idle_sockets", std::to_string(fds_held));
  int closed_by_relay = 0;
  for (int fd : idle) {
    char byte;
    const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ++closed_by_relay;
    ::close(fd);
  }
  EXPECT_GE(closed_by_relay, kIdle - 32) << "the relay kept more idle sockets than its cap";
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// --delivery exactly-once: every Kafka commit counted and timed (the histogram's count equals the
// counter), none aborted on a run without faults, and every event published and read back by a
// read_committed consumer.
TEST_F(Promises, KafkaTransactionMetricsWithTheirValues) {
  create_outbox_table();
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay = start_relay({"--delivery", "exactly-once"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  constexpr int kTransactions = 5;
  constexpr int kPerTransaction = 10;
  for (int t = 0; t < kTransactions; ++t) {
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload) SELECT '" + aggregatetypes_[0] +
              "', 'a-' || (g % 3), 'Created', jsonb_build_object('seq', g) FROM generate_series(" +
              std::to_string(t * kPerTransaction + 1) + ", " +
              std::to_string((t + 1) * kPerTransaction) + ") AS g");
  }
  const Lsn after = pg_->current_wal_lsn();
  KafkaReader reader(brokers_, {topics_[0]});
  DistinctIds all(kTransactions * kPerTransaction);
  ASSERT_TRUE(reader.read_until(std::ref(all), 60s)) << all.count() << " events read committed";
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s));
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  EXPECT_EQ(reader.records().size(), static_cast<std::size_t>(kTransactions * kPerTransaction));

  std::map<std::string, std::string> samples;
  auto value = [&](const std::string& series) { return sample_value(samples, series); };
  // The figures settle once the last commit is counted: the events published and the commits
  // timed agree.
  const bool settled = wait_until(
      [&] {
        samples = parse_samples(http_get(port, "/metrics").body);
        return value("outbox_relay_events_published_total{topic=\"" + topics_[0] + "\"}") ==
                   kTransactions * kPerTransaction &&
               value("outbox_relay_kafka_transactions_committed_total").value_or(0) >= 1 &&
               value("outbox_relay_kafka_transactions_committed_total") ==
                   value("outbox_relay_kafka_commit_seconds_count");
      },
      30s, 200ms);
  EXPECT_TRUE(settled) << http_get(port, "/metrics").body;
  const double commits = value("outbox_relay_kafka_transactions_committed_total").value_or(-1);
  RecordProperty("kafka_transactions_committed", std::to_string(commits));
  // At least one commit, at most one per PostgreSQL transaction plus the checkpoints of idle
  // periods: a commit per event would be a regression of the batching.
  EXPECT_GE(commits, 1);
  EXPECT_LE(commits, kTransactions * kPerTransaction / 2.0);
  EXPECT_EQ(value("outbox_relay_kafka_commit_seconds_count"), commits);
  EXPECT_EQ(value("outbox_relay_kafka_commit_seconds_bucket{le=\"+Inf\"}"), commits);
  EXPECT_GT(value("outbox_relay_kafka_commit_seconds_sum").value_or(-1), 0);
  EXPECT_EQ(value("outbox_relay_kafka_transactions_aborted_total"), 0.0);
  EXPECT_EQ(value("outbox_relay_resent_transactions_skipped_total"), 0.0);
  expect_graceful_stop(relay);
}

// --messages: logical decoding messages with another prefix (other software's) are not relayed,
// counted in ignored_messages_total one by one, and logged once per prefix.
TEST_F(Promises, IgnoredMessagesCountedWithTheirValue) {
  create_outbox_table();
  const std::string prefix = "outbox-" + suffix_;
  const std::string other = "other-" + suffix_;
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  // The precondition of --messages, as docs/security.md gives it to run by hand: PUBLIC may not
  // emit (else the relay refuses with exit 5). Its own step, so the test passes alone and in any
  // order, not only after a messages test revoked it in the same database.
  pg_->exec(
      "DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid::regprocedure FROM "
      "pg_catalog.pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = "
      "'pg_logical_emit_message' LOOP EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', "
      "f); END LOOP; END $$");
  RelayProcess& relay = start_relay({"--messages", prefix});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  // Three messages of another prefix: two in one transaction, one alone (non-transactional).
  pg_->exec("BEGIN; SELECT pg_logical_emit_message(true, '" + other +
            "', 'a'); SELECT pg_logical_emit_message(true, '" + other + "', 'b'); COMMIT");
  pg_->exec("SELECT pg_logical_emit_message(false, '" + other + "', 'c')");
  // Then an outbox event: once it is in Kafka, every message before it was read.
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload) VALUES ('" + aggregatetypes_[0] +
            "', 'a-1', 'Created', '{\"n\": 1}')");
  const Lsn after = pg_->current_wal_lsn();
  KafkaReader reader(brokers_, {topics_[0]});
  DistinctIds one(1);
  ASSERT_TRUE(reader.read_until(std::ref(one), 60s));
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s));
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  EXPECT_EQ(reader.records().size(), 1u) << "a message of another prefix was relayed";

  const auto samples = parse_samples(http_get(port, "/metrics").body);
  EXPECT_EQ(sample_value(samples, "outbox_relay_ignored_messages_total"), 3.0);
  const std::string log = read_file(relay.log_path());
  std::size_t lines = 0;
  for (auto at = log.find(other); at != std::string::npos; at = log.find(other, at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << "the other prefix is not logged once:\n" << log;
  expect_graceful_stop(relay);
}

}  // namespace
}  // namespace outbox_test
