// The relay publishing to Amazon SQS (--sqs), end to end: the real outbox-relay binary, the
// lane's PostgreSQL, and moto's server of scripts/aws-up.sh with its authentication on (one for
// every lane; each test makes queues of its own names). The fixture is the fault tests'
// (tests/fault: table with a seq column, the paced workload, the delivery checks) with
// E2eNames::sqs. The queue is read back once, at the end (ReceiveMessage, then deleted): moto
// forgets the deduplication id of a deleted message, SQS keeps it five minutes, so reading as the
// relay sends would let moto keep re-sent copies that SQS drops.
// What a user checks: every committed event in the FIFO queue once, nothing uncommitted, each
// aggregate's events in commit order, the message as docs/aws.md maps it; poison under fail and
// dlq; a refused secret named by its source, never shown. Through the fault-injecting proxy of
// tests/support (AwsFaultProxy, --aws-endpoint): SQS frozen (nothing confirmed past what was
// committed before, everything after the thaw, /healthz answering throughout), and a throttled
// entry with later entries of its group waiting (never passed), throttled and failing calls.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fault_fixture.hpp"
#include "moto.hpp"
#include "outbox_test/aws_fault_proxy.hpp"
#include "outbox_test/http.hpp"
#include "sqs_fixture.hpp"

namespace outbox_test::fault {
namespace {

using namespace std::chrono_literals;

// The received messages as the Kafka checks read records: the topic and key attributes, the body
// as value, the attributes as headers, the receive order as offset (a FIFO queue gives each group
// in its order).
std::vector<Record> as_records(const std::vector<Received>& received) {
  std::vector<Record> out;
  out.reserve(received.size());
  std::int64_t offset = 0;
  for (const Received& m : received) {
    Record r;
    if (auto t = m.attributes.find("topic"); t != m.attributes.end()) r.topic = t->second;
    r.partition = 0;
    r.offset = offset++;
    if (auto k = m.attributes.find("key"); k != m.attributes.end()) r.key = k->second;
    r.value = m.body;
    r.headers = m.attributes;
    out.push_back(std::move(r));
  }
  return out;
}

// A TCP port bound on 127.0.0.1 and not listening: a connection to it is refused (an endpoint
// that is down), and nothing else takes the port until release().
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not the relay's
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
      throw std::runtime_error("cannot bind a port on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { release(); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  std::uint16_t port() const { return port_; }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

class SqsRelay : public FaultTest {
 protected:
  SqsRelay() { names_.sqs = true; }

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    // The relay's credentials, as the SDKs read them: the environment (inherited).
    const Moto& m = moto();
    ::setenv("AWS_ACCESS_KEY_ID", m.access_key_id.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", m.secret_access_key.c_str(), 1);
    ::setenv("AWS_REGION", m.region.c_str(), 1);
    ::unsetenv("AWS_SESSION_TOKEN");
    ::unsetenv("AWS_ENDPOINT_URL");
    ::unsetenv("AWS_ENDPOINT_URL_SQS");
    queue_name_ = "relay-" + suffix_;
    sqs_queue_url_ = make_queue(queue_name_ + ".fifo", {{"FifoQueue", "true"}});
  }

  std::string make_queue(const std::string& name, const std::map<std::string, std::string>& a) {
    aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
    return admin_.create_queue(client, name, a);
  }

  // Every message of `url`, read once (and deleted): at least `count`, then nothing more for 1 s.
  std::vector<Received> read_all(const std::string& url, std::size_t count) {
    aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
    return admin_.receive(client, url, count, 1s, 60s);
  }

  // Every committed event in the queue once (`once`; else at least once), in per-aggregate order,
  // nothing uncommitted; the slot confirmed through the load first (so that SQS acknowledged
  // everything sent).
  void expect_every_event_stored_once(std::chrono::seconds timeout, bool once = true) {
    const Lsn lsn_after_load = pg_->current_wal_lsn();
    const auto rows = committed_seqs();
    ASSERT_TRUE(expect_confirmed_reaches(lsn_after_load, timeout));
    const std::vector<Received> got = read_all(sqs_queue_url_, rows.size());
    const DeliveryCheck check = check_deliveries(as_records(got), rows);
    EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
    EXPECT_EQ(check.missing, 0u);
    EXPECT_EQ(check.ghosts, 0u);
    if (once) {
      EXPECT_EQ(check.duplicates, 0u) << "re-sent within five minutes: the FIFO queue drops them";
    }
    figure("events", static_cast<std::int64_t>(rows.size()));
    figure("stored", static_cast<std::int64_t>(got.size()));
  }

  SqsAdmin admin_;
  std::string queue_name_;
};

// Records as a consumer reads them: the body = the payload as PostgreSQL prints it, attributes
// id, type, key and topic, MessageGroupId = the aggregate id, MessageDeduplicationId = the event
// id; per-aggregate order; a rolled-back transaction absent; the slot confirmed once SQS took
// them all.
TEST_F(SqsRelay, EndToEnd) {
  create_outbox_table();
  const std::string other_type = "Other" + suffix_;
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  for (int t = 0; t < 8; ++t) {
    pg_->exec("BEGIN; " +
              Workload::insert_sql(qualified_table(), aggregatetype_, 7, t * 10 + 1, 5, false) +
              "; " + Workload::insert_sql(qualified_table(), other_type, 7, t * 10 + 6, 5, false) +
              "; COMMIT");
    if (t == 3) {
      pg_->exec("BEGIN; " +
                Workload::insert_sql(qualified_table(), aggregatetype_, 7, 1000, 5, true) +
                "; ROLLBACK");
    }
  }
  const Lsn after = pg_->current_wal_lsn();
  const auto rows = committed_rows();
  ASSERT_EQ(rows.size(), 80u);
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(relay.log_path(), 20);
  const std::vector<Received> got = read_all(sqs_queue_url_, rows.size());
  ASSERT_EQ(got.size(), rows.size());
  std::map<std::string, std::int64_t> last_seq;  // per aggregate
  for (const Received& m : got) {
    const auto id = m.attributes.find("id");
    ASSERT_NE(id, m.attributes.end()) << m.body;
    const auto row = rows.find(id->second);
    ASSERT_NE(row, rows.end()) << "not a committed event: " << id->second;
    EXPECT_EQ(m.attributes.at("topic"), "outbox.event." + row->second.aggregatetype);
    EXPECT_EQ(m.body, row->second.payload);
    EXPECT_EQ(m.attributes.at("type"), row->second.type);
    EXPECT_EQ(m.attributes.at("key"), row->second.aggregateid);
    EXPECT_EQ(m.group_id, row->second.aggregateid);
    EXPECT_EQ(m.deduplication_id, id->second);
    EXPECT_EQ(m.attributes.count("outbox.body"), 0u);
    const std::string agg = row->second.aggregatetype + "/" + row->second.aggregateid;
    if (auto it = last_seq.find(agg); it != last_seq.end()) {
      EXPECT_LT(it->second, row->second.seq) << "order of " << agg;
    }
    last_seq[agg] = row->second.seq;
  }
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("event=sqs_queue"), std::string::npos);
  expect_graceful_stop(relay);
}

// kill -9 of the relay, again and again under load: every committed event in the queue once (the
// re-sent ones carry the same MessageDeduplicationId, which the FIFO queue drops within five
// minutes), each aggregate's in commit order, nothing uncommitted.
TEST_F(SqsRelay, SigkillLoopUnderLoadStoresEveryEventOnce) {
  create_outbox_table();
  RelayProcess* relay = &start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  Workload& load = start_workload(plan_mixed(scaled(240, 60), 20, 0.05, 32), 8s, 60);
  int kills = 0;
  while (!load.done() && kills < 3) {
    std::this_thread::sleep_for(2000ms);  // load shape: a kill every 2 s of load
    relay->kill9();
    ++kills;
    relay = &start_relay();
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(*relay));
  }
  load.join();
  figure("kills", kills);
  ASSERT_GE(kills, 2);
  expect_every_event_stored_once(120s);
  expect_graceful_stop(*relay);
}

// A record over the queue's MaximumMessageSize under --on-error fail: exit 3 naming it, the slot
// not confirmed past it, the events before it in the queue.
TEST_F(SqsRelay, PoisonFailStopsBeforeIt) {
  create_outbox_table();
  sqs_queue_url_ = make_queue(queue_name_ + "-small.fifo",
                              {{"FifoQueue", "true"}, {"MaximumMessageSize", "1024"}});
  RelayProcess& relay = start_relay({"--on-error", "fail"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 3, false));
  const Lsn before = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(before, 30s));
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
            "', 'agg-1', 'Big', jsonb_build_object('pad', repeat('x', 2000)), 4)");
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(3));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("MessageTooLong"), std::string::npos) << tail_file(relay.log_path(), 20);
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_LT(*confirmed, pg_->current_wal_lsn());
  EXPECT_EQ(read_all(sqs_queue_url_, 3).size(), 3u);
}

// A queue of SQS's largest MaximumMessageSize, 1 MiB (1048576: moto 5.2.5 takes it, as AWS since
// 2025): events of 400 KiB, past the old 256 KiB, are stored whole (calls of at most 1 MiB: two
// of them each); an event over 1 MiB is poison under --on-error fail (exit 3), the slot before it.
TEST_F(SqsRelay, AOneMiBQueueTakesEventsPast256KiB) {
  create_outbox_table();
  sqs_queue_url_ = make_queue(queue_name_ + "-mib.fifo",
                              {{"FifoQueue", "true"}, {"MaximumMessageSize", "1048576"}});
  RelayProcess& relay = start_relay({"--on-error", "fail"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  std::string insert = "BEGIN;";
  for (int i = 0; i < 3; ++i) {
    insert += " INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
              "', 'agg-" + std::to_string(i) + "', 'Large', jsonb_build_object('seq', " +
              std::to_string(i + 1) + ", 'pad', repeat('x', 400000)), " + std::to_string(i + 1) +
              ");";
  }
  pg_->exec(insert + " COMMIT");
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 1, 4, 1, false));
  const Lsn before = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(before, 60s)) << tail_file(relay.log_path(), 20);
  EXPECT_NE(read_file(relay.log_path()).find("maximum_message_size=1048576"), std::string::npos);
  const auto rows = committed_rows();
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
            "', 'agg-0', 'Huge', jsonb_build_object('seq', 5, 'pad', repeat('x', 1048576)), 5)");
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(3));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("MessageTooLong"), std::string::npos) << tail_file(relay.log_path(), 20);
  EXPECT_NE(log.find("the queue takes at most 1048576"), std::string::npos)
      << tail_file(relay.log_path(), 20);
  const auto confirmed = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(confirmed.has_value());
  EXPECT_LT(*confirmed, pg_->current_wal_lsn());
  const std::vector<Received> got = read_all(sqs_queue_url_, 4);
  ASSERT_EQ(got.size(), 4u);
  std::size_t large = 0, largest = 0;
  for (const Received& m : got) {
    const auto row = rows.find(m.attributes.at("id"));
    ASSERT_NE(row, rows.end());
    EXPECT_EQ(m.body, row->second.payload);
    if (m.body.size() > 400'000) ++large;
    largest = std::max(largest, m.body.size());
  }
  EXPECT_EQ(large, 3u);
  figure("largest_body_bytes", static_cast<std::int64_t>(largest));
}

// The same under --on-error dlq: the event goes to the dead-letter queue (--sqs-dlq; its body
// left out, too large: outbox.body=null), its aggregate's later events follow it, the others go
// on.
TEST_F(SqsRelay, PoisonDlqGoesToTheDeadLetterQueue) {
  create_outbox_table();
  sqs_queue_url_ = make_queue(queue_name_ + "-small.fifo",
                              {{"FifoQueue", "true"}, {"MaximumMessageSize", "1024"}});
  const std::string dlq = make_queue(queue_name_ + "-dlq.fifo", {{"FifoQueue", "true"}});
  RelayProcess& relay = start_relay({"--on-error", "dlq", "--sqs-dlq", dlq});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec("INSERT INTO " + qualified_table() +
            " (aggregatetype, aggregateid, type, payload, seq) VALUES ('" + aggregatetype_ +
            "', 'agg-1', 'Big', jsonb_build_object('pad', repeat('x', 2000)), 1)");
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 2, 6, false));
  const Lsn after = pg_->current_wal_lsn();
  EXPECT_TRUE(expect_confirmed_reaches(after, 60s)) << tail_file(relay.log_path(), 20);
  // agg-1: the big one and its later events (seq 4, 7) parked; agg-0 and agg-2 go on.
  const std::vector<Received> dead = read_all(dlq, 3);
  const std::vector<Received> main = read_all(sqs_queue_url_, 4);
  ASSERT_EQ(dead.size(), 3u);
  EXPECT_EQ(dead[0].attributes.at("type"), "Big");
  EXPECT_EQ(dead[0].attributes.at("outbox.original.topic"), topic_);
  EXPECT_EQ(dead[0].attributes.at("outbox.body"), "null");
  EXPECT_NE(dead[0].attributes.at("outbox.error").find("MessageTooLong"), std::string::npos);
  EXPECT_EQ(dead[0].group_id, "agg-1");
  for (const Received& d : dead) EXPECT_EQ(d.attributes.at("key"), "agg-1");
  EXPECT_EQ(main.size(), 4u);
  for (const Received& m : main) EXPECT_NE(m.attributes.at("key"), "agg-1");
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// A wrong secret: SQS refuses the signature; the relay exits 1 naming where the credentials came
// from (the environment) and the access key's last four characters, never the secret.
TEST_F(SqsRelay, RefusedSecretExitsOneNamingTheSource) {
  create_outbox_table();
  const std::string wrong = "wrong-" + suffix_ + "-secret";
  ::setenv("AWS_SECRET_ACCESS_KEY", wrong.c_str(), 1);
  RelayProcess& relay = start_relay();
  ::setenv("AWS_SECRET_ACCESS_KEY", moto().secret_access_key.c_str(), 1);
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(1));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(
      log.find("refused the credentials (access key id ..." +
               moto().access_key_id.substr(moto().access_key_id.size() - 4) + " from environment"),
      std::string::npos)
      << tail_file(relay.log_path(), 20);
  EXPECT_NE(log.find("sqs:SendMessage"), std::string::npos) << tail_file(relay.log_path(), 20);
  EXPECT_EQ(log.find(wrong), std::string::npos) << "the secret is in the log";
}

// No credentials anywhere (no variables, no shared files, no web identity or container
// endpoint, the instance metadata service off): exit 1 saying which sources were asked.
TEST_F(SqsRelay, NoCredentialsExitsOneNamingTheSourcesAsked) {
  create_outbox_table();
  const std::string id = moto().access_key_id;
  const std::string nowhere = log_path("no_such_file");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", nowhere.c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", nowhere.c_str(), 1);
  ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  RelayProcess& relay = start_relay();
  ::setenv("AWS_ACCESS_KEY_ID", id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", moto().secret_access_key.c_str(), 1);
  for (const char* v :
       {"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_EC2_METADATA_DISABLED"}) {
    ::unsetenv(v);
  }
  EXPECT_EQ(relay.wait_exit(60s), std::optional<int>(1));
  const std::string log = read_file(relay.log_path());
  EXPECT_NE(log.find("AWS_ACCESS_KEY_ID"), std::string::npos) << tail_file(relay.log_path(), 20);
  EXPECT_NE(log.find("sqs:SendMessage"), std::string::npos) << tail_file(relay.log_path(), 20);
}

// A standard queue: every committed event arrives, without group or deduplication ids; no order
// is promised (docs/aws.md), and the relay warns so at start.
TEST_F(SqsRelay, StandardQueueGetsEveryEvent) {
  create_outbox_table();
  sqs_queue_url_ = make_queue(queue_name_ + "-std", {});
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 30, false));
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(after, 60s));
  const auto rows = committed_seqs();
  const std::vector<Received> got = read_all(sqs_queue_url_, rows.size());
  std::set<std::string> ids;
  for (const Received& m : got) {
    ids.insert(m.attributes.at("id"));
    EXPECT_EQ(m.group_id, "");
  }
  EXPECT_EQ(ids.size(), rows.size());
  for (const auto& [id, row] : rows) EXPECT_TRUE(ids.contains(id)) << id;
  EXPECT_NE(read_file(relay.log_path()).find("event=sqs_standard_queue"), std::string::npos);
  expect_graceful_stop(relay);
}

// SQS unreachable at start (its endpoint refuses connections): the relay waits for it without a
// deadline, as for a Kafka or NATS server it cannot reach, logging each GetQueueAttributes attempt
// (event=sqs_unavailable attempt=N); nothing is sent or confirmed meanwhile and /healthz answers
// throughout. Once the endpoint answers (the fault proxy takes the port), the events committed
// meanwhile reach the queue.
TEST_F(SqsRelay, UnreachableAtStartIsWaitedForAttemptByAttempt) {
  create_outbox_table();
  RefusingPort endpoint;
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& relay =
      start_relay({"--aws-endpoint", "http://127.0.0.1:" + std::to_string(endpoint.port())});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 12, false));
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_TRUE(wait_until(
      [&] { return count_in_file(relay.log_path(), "event=sqs_unavailable") >= 3; }, 20s, 50ms))
      << tail_file(relay.log_path(), 20);
  const std::string log = read_file(relay.log_path());
  for (int n = 1; n <= 3; ++n) {
    EXPECT_NE(log.find("event=sqs_unavailable queue=\"" + sqs_queue_url_ +
                       "\" attempt=" + std::to_string(n) + " "),
              std::string::npos)
        << tail_file(relay.log_path(), 20);
  }
  HealthzWatch healthz(port);
  figure("readyz_status_while_unreachable", http_get(port, "/readyz").status);
  const auto held = pg_->slot_confirmed_flush(slot_);
  ASSERT_TRUE(held.has_value());
  EXPECT_LT(*held, after) << "confirmed past events SQS never saw";
  ASSERT_TRUE(relay.is_running());

  endpoint.release();
  AwsFaultProxy proxy(AwsFaultProxyOptions{
      moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}, endpoint.port()});
  ASSERT_TRUE(expect_confirmed_reaches(after, 30s)) << tail_file(relay.log_path(), 20);
  healthz.stop();
  EXPECT_GT(healthz.polls(), 0);
  EXPECT_EQ(healthz.unanswered(), 0);
  EXPECT_LT(healthz.slowest_ms(), 1000) << "the relay's io thread was blocked";
  EXPECT_NE(read_file(relay.log_path()).find("event=sqs_queue queue=\"" + sqs_queue_url_),
            std::string::npos);
  EXPECT_EQ(read_all(sqs_queue_url_, 12).size(), 12u);
  figure("attempts_while_unreachable",
         static_cast<std::int64_t>(count_in_file(relay.log_path(), "event=sqs_unavailable")));
  expect_graceful_stop(relay);
}

// setup --sqs checks the queue in the account before the database is touched and creates
// nothing there: a queue that does not exist (or a --sqs-dlq that does not) is exit 1 naming it,
// with the command that would create it, no queue made and no slot left behind; a FIFO queue
// passes (content-based deduplication on is harmless, said so); a standard queue passes with a
// warning (at-least-once, no order).
TEST_F(SqsRelay, SetupChecksTheQueueAndCreatesNothing) {
  create_outbox_table();
  auto setup = [&](const std::string& queue, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"setup",           "--pg",   conninfo_, "--table",
                                     qualified_table(), "--slot", slot_,     "--publication",
                                     publication_,      "--sqs",  queue};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_to_end(relay_bin_, args, log_path("setup_out"), log_path("setup_err"), 60s);
  };
  // moto's queue URLs are ENDPOINT/ACCOUNT/NAME: a missing queue's in the same account.
  const std::string account_url = sqs_queue_url_.substr(0, sqs_queue_url_.find_last_of('/') + 1);
  const std::string missing_name = "missing-" + suffix_ + ".fifo";
  const std::string missing = account_url + missing_name;
  aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
  auto queue_exists = [&](const std::string& name) {
    auto answer = admin_.call(client, "GetQueueUrl", "{\"QueueName\":\"" + name + "\"}");
    return !answer.error.has_value();
  };

  const CommandResult absent = setup(missing);
  EXPECT_EQ(absent.exit_code, 1) << absent.out << absent.err;
  EXPECT_NE(absent.err.find("outbox-relay setup: SQS queue " + missing + " does not exist"),
            std::string::npos)
      << absent.err;
  EXPECT_NE(absent.err.find("aws sqs create-queue --queue-name " + missing_name +
                            " --attributes FifoQueue=true --region " + moto().region +
                            " --endpoint-url "),
            std::string::npos)
      << absent.err;
  EXPECT_FALSE(queue_exists(missing_name)) << "setup created the queue";
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "a queue that does not exist left a slot behind";

  const CommandResult no_dlq = setup(sqs_queue_url_, {"--sqs-dlq", missing});
  EXPECT_EQ(no_dlq.exit_code, 1) << no_dlq.err;
  EXPECT_NE(no_dlq.err.find("SQS dead-letter queue " + missing + " does not exist"),
            std::string::npos)
      << no_dlq.err;
  EXPECT_FALSE(queue_exists(missing_name)) << "setup created the dead-letter queue";
  EXPECT_FALSE(pg_->slot_exists(slot_));

  const CommandResult fifo = setup(sqs_queue_url_);
  ASSERT_EQ(fifo.exit_code, 0) << fifo.err;
  const std::string head = "queue " + sqs_queue_url_ + ": ";
  EXPECT_NE(fifo.out.find(head + "exists, FIFO: each aggregate's events in commit order"),
            std::string::npos)
      << fifo.out;
  EXPECT_NE(fifo.out.find(head + "content-based deduplication off"), std::string::npos) << fifo.out;
  // 1 MiB: moto's default for a new queue (AWS's too, since 2025).
  EXPECT_NE(fifo.out.find(head + "MaximumMessageSize 1048576 bytes"), std::string::npos)
      << fifo.out;
  EXPECT_EQ(fifo.err.find("warning"), std::string::npos) << fifo.err;
  EXPECT_TRUE(pg_->slot_exists(slot_)) << "setup went on to the database";

  const std::string dedup =
      make_queue(queue_name_ + "-cbd.fifo", {{"FifoQueue", "true"},
                                             {"ContentBasedDeduplication", "true"},
                                             {"MaximumMessageSize", "2048"}});
  const CommandResult harmless = setup(dedup, {"--sqs-dlq", sqs_queue_url_});
  ASSERT_EQ(harmless.exit_code, 0) << harmless.err;
  EXPECT_NE(harmless.out.find("queue " + dedup + ": content-based deduplication on: harmless"),
            std::string::npos)
      << harmless.out;
  EXPECT_NE(harmless.out.find("queue " + dedup + ": MaximumMessageSize 2048 bytes"),
            std::string::npos)
      << harmless.out;
  EXPECT_NE(harmless.out.find("dead-letter queue " + sqs_queue_url_ + ": exists, FIFO"),
            std::string::npos)
      << harmless.out;

  const std::string standard = make_queue(queue_name_ + "-std", {});
  const CommandResult warned = setup(standard);
  ASSERT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_NE(warned.out.find("queue " + standard + ": exists, standard: at-least-once, no order"),
            std::string::npos)
      << warned.out;
  EXPECT_NE(warned.err.find("outbox-relay setup: warning: queue " + standard +
                            " is a standard queue: every event is stored at least once, in no "
                            "order"),
            std::string::npos)
      << warned.err;
}

// ---- through the fault-injecting proxy ------------------------------------------------------

class SqsRelayProxy : public SqsRelay {
 protected:
  void SetUp() override {
    SqsRelay::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<AwsFaultProxy>(AwsFaultProxyOptions{
        moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}, 0});
  }
  void TearDown() override {
    if (proxy_) proxy_->clear();  // thawed: the relays stop
    SqsRelay::TearDown();
    proxy_.reset();
  }
  // The relay talks to SQS through the proxy.
  RelayProcess& start_relay_via_proxy(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--aws-endpoint", proxy_->endpoint()});
    return start_relay(std::move(extra));
  }

  std::unique_ptr<AwsFaultProxy> proxy_;
};

// SQS frozen under load (the proxy holds every request unanswered) for longer than --sqs-timeout,
// then thawed: while frozen the slot is not confirmed past what was committed before the freeze,
// the relay rewinds (its deadline) and /healthz answers throughout; after it, every event is in
// the queue once, in per-aggregate order.
// Its pass does not hang on the machine's speed (at load 34, with a fixed 2 s timeout and a fixed
// 6 s freeze, it failed twice: moto was starved): the freeze lasts until the relay has rewound,
// so it is longer than the timeout by construction, and the timeout is 20 times the slowest of
// a few round trips to moto measured just before (at least 2 s, at most 20 s), so that the calls
// after the thaw are not taken for a freeze again and again on a slow machine.
TEST_F(SqsRelayProxy, FrozenThenThawedConfirmsNothingUnacknowledged) {
  create_outbox_table();
  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  std::chrono::milliseconds slowest{0};
  {
    aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto answer =
          admin_.call(client, "GetQueueAttributes",
                      "{\"QueueUrl\":\"" + sqs_queue_url_ + "\",\"AttributeNames\":[\"All\"]}");
      ASSERT_FALSE(answer.error.has_value()) << answer.error->message;
      slowest = std::max(slowest, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - t0));
    }
  }
  const auto timeout = std::clamp<std::chrono::milliseconds>(20 * slowest, 2s, 20s);
  figure("moto_slowest_round_trip_ms", slowest.count());
  figure("sqs_timeout_ms", timeout.count());
  RelayProcess& relay = start_relay_via_proxy(
      {"--status-interval", "200ms", "--sqs-timeout", std::to_string(timeout.count()) + "ms"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  Workload& load = start_workload(plan_mixed(scaled(200, 60), 10, 0.05, 41), 8s, 60);
  ASSERT_TRUE(load.wait_committed(scaled(40, 15), 60s));
  HealthzWatch healthz(port);
  const std::size_t rewinds_before = count_in_file(relay.log_path(), "event=producer_rewind");
  const std::size_t commits_at_freeze = load.commits().size();
  proxy_->freeze();
  // Frozen until the relay's deadline passed and it rewound, a transaction committed after the
  // freeze began (from the second on: the first may have been on its way), and /healthz was
  // asked more than 10 times. Nothing of those transactions can be confirmed meanwhile.
  const SlotWatch watch = watch_slot(
      load, commits_at_freeze,
      [&] {
        return load.commits().size() > commits_at_freeze + 1 &&
               count_in_file(relay.log_path(), "event=producer_rewind") > rewinds_before &&
               healthz.polls() > 10;
      },
      timeout + 120s, 100ms);
  ASSERT_TRUE(watch.ended) << "no rewind within 120 s past --sqs-timeout of the freeze\n"
                           << tail_file(relay.log_path(), 30);
  ASSERT_NO_FATAL_FAILURE(expect_slot_held(watch, "while SQS was frozen"));
  EXPECT_GT(proxy_->counters().held, 0) << "nothing was held: the freeze froze nothing";
  EXPECT_TRUE(relay.is_running());
  proxy_->thaw();
  healthz.stop();
  figure("healthz_polls", healthz.polls());
  figure("healthz_slowest_ms", healthz.slowest_ms());
  EXPECT_GT(healthz.polls(), 10);
  EXPECT_EQ(healthz.unanswered(), 0);
  EXPECT_LT(healthz.slowest_ms(), 1000) << "the relay's io thread was blocked";
  load.join();
  expect_every_event_stored_once(120s);
  EXPECT_GE(count_in_file(relay.log_path(), "event=producer_rewind"), 1u)
      << tail_file(relay.log_path(), 30);
  expect_graceful_stop(relay);
}

// The case SQS's per-entry answers make possible: an entry throttled while later entries of its
// group are ready. The proxy fails the first entry of aggregate agg-1 three times (removed from
// the request, so SQS never stores it, and answered Failed, not the sender's fault); the entries
// after it wait in the relay and go only once it passed, while the other aggregates flow. The
// queue holds every event once in commit order, and the relay never rewound (retried alone).
TEST_F(SqsRelayProxy, ThrottledEntryIsNeverPassedByALaterOneOfItsGroup) {
  create_outbox_table();
  RelayProcess& relay = start_relay_via_proxy();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  proxy_->fail_entries(EntryFault::group("agg-1", 3));
  // Seqs 1..30 over agg-0, agg-1, agg-2 (seq % 3), in one transaction: agg-1's first is seq 1.
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1, 30, false));
  const auto rows = committed_rows();
  std::string first_of_agg1;
  for (const auto& [id, row] : rows) {
    if (row.aggregateid == "agg-1" && row.seq == 1) first_of_agg1 = id;
  }
  ASSERT_FALSE(first_of_agg1.empty());
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s));
  const ProxyCounters c = proxy_->counters();
  ASSERT_EQ(c.entries_failed, 3);
  // Each failure was agg-1's first event, retried alone: none of its later ones was ever sent
  // while it was failing (else one would have been failed or stored ahead of it).
  for (const BatchEntry& e : c.failed) EXPECT_EQ(e.deduplication_id, first_of_agg1);
  EXPECT_EQ(count_in_file(relay.log_path(), "event=producer_rewind"), 0u);
  EXPECT_GE(count_in_file(relay.log_path(), "event=sqs_retry"), 1u);
  expect_graceful_stop(relay);
}

// Whole calls throttled (ThrottlingException, SQS's RequestThrottled) and failing (500, 503,
// and a 503 after SQS served the call: its answer lost) are sent again after a backoff: every
// event once, in per-aggregate order, no rewind.
TEST_F(SqsRelayProxy, ThrottledAndFailingCallsAreRetried) {
  create_outbox_table();
  RelayProcess& relay = start_relay_via_proxy();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  proxy_->fail_calls(CallFault::throttling("SendMessageBatch", 2));
  proxy_->fail_calls(CallFault::sqs_request_throttled("SendMessageBatch", 1));
  proxy_->fail_calls(CallFault::server_error(500, "SendMessageBatch", 1));
  CallFault lost = CallFault::server_error(503, "SendMessageBatch", 1);
  lost.after_forward = true;
  proxy_->fail_calls(lost);
  for (int t = 0; t < 6; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, t * 8 + 1, 8, false));
  }
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s));
  EXPECT_EQ(proxy_->counters().faulted_calls, 5);
  EXPECT_EQ(count_in_file(relay.log_path(), "event=producer_rewind"), 0u);
  expect_graceful_stop(relay);
}

// A whole SendMessageBatch call refused for good (400 InvalidParameterValue, not retryable): which
// entry made it fail is not known, so the relay stops the publisher, rewinds, and sends each of
// that call's events alone; they pass (the fault is used up), every event once in commit order,
// and the relay goes on: an innocent neighbour is never poison.
TEST_F(SqsRelayProxy, RefusedCallIsSentAgainEntryByEntry) {
  create_outbox_table();
  RelayProcess& relay = start_relay_via_proxy();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  CallFault refused;
  refused.action = "SendMessageBatch";
  refused.status = 400;
  refused.code = "InvalidParameterValue";
  refused.message = "refused whole (injected by the test proxy)";
  proxy_->fail_calls(refused);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 4, 1, 12, false));
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s));
  EXPECT_EQ(proxy_->counters().faulted_calls, 1);
  EXPECT_GE(count_in_file(relay.log_path(), "event=producer_rewind"), 1u)
      << tail_file(relay.log_path(), 30);
  EXPECT_TRUE(relay.is_running());
  expect_graceful_stop(relay);
}

// ---- the progress record in PostgreSQL (SQS cannot be read back) ----------------------------

// The record's position in the default table, for this test's slot (none: no record).
std::optional<Lsn> recorded(PgClient& pg, const std::string& slot) {
  const auto v = pg.scalar(
      "SELECT CASE WHEN to_regclass('public.outbox_relay_progress') IS NULL THEN NULL ELSE "
      "(SELECT position FROM public.outbox_relay_progress WHERE key = (SELECT "
      "system_identifier::text FROM pg_control_system()) || '/' || $1) END",
      {slot});
  if (!v) return std::nullopt;
  return parse_lsn(v->substr(0, v->find(' ')));
}

// A first start (no record anywhere) makes the slot and streams; the record is written to
// public.outbox_relay_progress as SQS takes the events, the slot never ahead of it; a normal
// restart compares the slot with it (event=progress_verified) and streams the events committed
// while it was down, without complaint: every event once, in per-aggregate order.
TEST_F(SqsRelay, ProgressRecordInPostgresFirstStartThenRestartStreams) {
  create_outbox_table();
  status_interval_ = "3s";  // the idle pace below
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  const Lsn after = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(after, 30s));
  std::optional<Lsn> record = recorded(*pg_, slot_);
  ASSERT_TRUE(record.has_value()) << "no progress record in public.outbox_relay_progress";
  EXPECT_GE(*record, *pg_->slot_confirmed_flush(slot_)) << "the slot is ahead of its record";
  // Idle: only keepalives move the position, and each write makes WAL that the next keepalive
  // confirms. The record follows at the idle pace (a status update, every 3 s here, finds it due),
  // not every 100 ms, where each write would cause the next (7 writes in these 3 s, measured with
  // the pacing taken out): sampled for 3 s.
  std::set<std::string> writes;
  const auto idle_end = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < idle_end) {
    if (auto w = pg_->scalar(
            "SELECT written_at::text FROM public.outbox_relay_progress WHERE key = (SELECT "
            "system_identifier::text FROM pg_control_system()) || '/' || $1",
            {slot_})) {
      writes.insert(*w);
    }
    std::this_thread::sleep_for(20ms);  // sampling a window, not waiting for a condition
  }
  figure("idle_record_writes_in_3s", static_cast<std::int64_t>(writes.size()));
  EXPECT_LE(writes.size(), 3u) << "the record is written faster than the idle pace";
  expect_graceful_stop(relay);
  status_interval_ = "1s";
  record = recorded(*pg_, slot_);
  ASSERT_TRUE(record.has_value());
  EXPECT_GE(*record, after);
  EXPECT_LE(*pg_->slot_confirmed_flush(slot_), *record) << "the stop confirmed past the record";

  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 10, false));
  RelayProcess& restarted = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(restarted.log_path()).find("event=progress_verified") != std::string::npos;
      },
      30s, 50ms))
      << tail_file(restarted.log_path(), 20);
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s));
  EXPECT_TRUE(restarted.is_running());
  const std::string log = read_file(restarted.log_path());
  EXPECT_EQ(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_EQ(log.find("slot_loss"), std::string::npos) << log;
  expect_graceful_stop(restarted);
}

// The slot dropped while the relay (--sqs) was down: before, a new slot started past the events
// committed meanwhile and they were lost silently. Now the record in PostgreSQL stops the
// restart (exit 4) naming the range and the recovery, making no slot; status names the loss;
// prune deletes no row once a slot is made anew. The recovery docs/aws.md gives ("When the slot
// is lost"): --accept-slot-loss, then the rows since the record's time deleted and inserted anew
// in one transaction: every event in the queue once (the FIFO queue drops the re-sent ids it
// holds), each aggregate's in order.
TEST_F(SqsRelay, SlotLossWhileDownExitsFourNamingTheRange) {
  create_outbox_table();
  pg_->exec("ALTER TABLE " + qualified_table() +
            " ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()");
  RelayProcess& relay = start_relay();
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 1, 10, false));
  const Lsn delivered = pg_->current_wal_lsn();
  ASSERT_TRUE(expect_confirmed_reaches(delivered, 30s));
  expect_graceful_stop(relay);
  // The stop may confirm past the last event: the gap starts at the first insert after it.
  const Lsn gap_from = pg_->current_wal_lsn();
  pg_->drop_slot_if_exists(slot_);
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11, 10, false));

  RelayProcess& restarted = start_relay();
  const auto code = restarted.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the relay did not stop\n"
                                << tail_file(restarted.log_path(), 20);
  EXPECT_EQ(*code, 4) << tail_file(restarted.log_path(), 20);
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("replication slot " + slot_ +
                     " does not exist, but its progress record (PostgreSQL table "
                     "public.outbox_relay_progress, key "),
            std::string::npos)
      << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m,
                                std::regex("shows that the relay delivered through "
                                           "([0-9A-F]+/[0-9A-F]+)")))
      << log;
  EXPECT_GE(parse_lsn(m[1].str()), delivered) << "the position named is before the delivered";
  EXPECT_LE(parse_lsn(m[1].str()), gap_from) << "the position named is past the gap's start";
  EXPECT_NE(
      log.find("SQS cannot be read back, so every event committed since the time of " + m[1].str()),
      std::string::npos)
      << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";

  const auto run = [&](const std::string& name, std::vector<std::string> args) {
    args.insert(args.end(), {"--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                             "--progress-table", "outbox_relay_progress"});
    return run_to_end(relay_bin_, args, log_path(name + "_out"), log_path(name + "_err"), 60s);
  };
  const CommandResult st = run("status", {"status"});
  EXPECT_EQ(st.exit_code, 1) << st.out << st.err;
  EXPECT_NE(st.out.find("slot missing, and the relay's progress record (PostgreSQL table "
                        "public.outbox_relay_progress, key "),
            std::string::npos)
      << st.out;
  pg_->query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot_});
  const CommandResult pr = run("prune", {"prune", "--older-than", "1ms"});
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_NE(pr.err.find("past the relay's progress record"), std::string::npos) << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "20");
  pg_->drop_slot_if_exists(slot_);

  RelayProcess& accepted = start_relay({"--accept-slot-loss"});
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(accepted));
  EXPECT_NE(read_file(accepted.log_path()).find("event=slot_loss_accepted"), std::string::npos)
      << tail_file(accepted.log_path(), 20);
  pg_->exec("WITH gap AS (DELETE FROM " + qualified_table() +
            " WHERE created_at >= (SELECT written_at - interval '1 minute' FROM "
            "public.outbox_relay_progress WHERE key = (SELECT system_identifier::text FROM "
            "pg_control_system()) || '/' || '" +
            slot_ + "') RETURNING *) INSERT INTO " + qualified_table() +
            " SELECT * FROM gap ORDER BY created_at, seq");
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s));
  expect_graceful_stop(accepted);
}

// --gap-repair-column with SQS, which cannot be read back: the slot dropped while the relay was
// down and 20 events committed meanwhile. prune deletes no row during the gap (the record in
// PostgreSQL is behind it). The restart makes the slot first, then sends every row of the window
// (from the record's time less --gap-repair-margin to now) again with the relay's publisher, in
// commit order, before streaming: every event in the queue at least once, each aggregate's in
// commit order (the gap's ahead of those committed after the restart), nothing missing. The
// repair is said (event=slot_gap_found, event=slot_gap_repaired with reconcile's summary:
// compared=0, resent=30, the 10 delivered before the loss among them) and counted.
TEST_F(SqsRelay, SlotLossWhileDownIsRepairedBySendingTheWindowAgain) {
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  ASSERT_NO_FATAL_FAILURE(deliver_then_drop_slot(flags, 5, 10));
  // The gap: 20 events in 4 transactions, each touching the 5 aggregates.
  for (int t = 0; t < 4; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 11 + t * 5, 5, false));
  }
  const CommandResult pr =
      run_to_end(relay_bin_,
                 {"prune", "--pg", conninfo_, "--slot", slot_, "--table", qualified_table(),
                  "--progress-table", "outbox_relay_progress", "--older-than", "1ms"},
                 log_path("prune_out"), log_path("prune_err"), 60s);
  EXPECT_EQ(pr.exit_code, 1) << pr.out << pr.err;
  EXPECT_EQ(*pg_->scalar("SELECT count(*) FROM " + qualified_table()), "30");

  const std::uint16_t port = free_port();
  metrics_addr_ = "127.0.0.1:" + std::to_string(port);
  RelayProcess& restarted = start_relay(flags);
  ASSERT_NO_FATAL_FAILURE(wait_until_streaming(restarted));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 5, 31, 5, false));
  ASSERT_NO_FATAL_FAILURE(expect_every_event_stored_once(60s, false));
  const std::string log = read_file(restarted.log_path());
  EXPECT_NE(log.find("event=created_slot"), std::string::npos) << log;
  EXPECT_NE(log.find("event=slot_gap_found"), std::string::npos) << log;
  EXPECT_NE(log.find("to SQS again (it cannot be read back: at-least-once)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("event=slot_gap_repaired"), std::string::npos) << log;
  EXPECT_NE(log.find(" rows_scanned=30 destination=SQS compared=0 unmappable=0 resent=30 failed=0"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("slot_loss"), std::string::npos) << log;
  const auto samples = parse_samples(http_get(port, "/metrics").body);
  const auto repaired = samples.find("outbox_relay_slot_gaps_repaired_total");
  ASSERT_NE(repaired, samples.end());
  EXPECT_EQ(repaired->second, "1");
  EXPECT_TRUE(restarted.is_running());
  expect_graceful_stop(restarted);
}

// The rows delivered before the loss deleted (prune --without-progress-record, the application):
// rows of the gap may be gone too, so --gap-repair-column with SQS stops the start (exit 4)
// naming the range, before it makes a slot or sends anything.
TEST_F(SqsRelay, GapRepairStopsWhenTheRowsBeforeTheRecordWerePruned) {
  const std::vector<std::string> flags{"--gap-repair-column", "created_at"};
  ASSERT_NO_FATAL_FAILURE(deliver_then_drop_slot(flags, 2, 4));
  pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 2, 5, 4, false));
  pg_->exec("DELETE FROM " + qualified_table() + " WHERE seq <= 4");
  std::string log;
  ASSERT_NO_FATAL_FAILURE(expect_exit(start_relay(flags), 4, log));
  EXPECT_NE(log.find("cannot be repaired from the outbox"), std::string::npos) << log;
  EXPECT_NE(log.find("the gap after "), std::string::npos) << log;
  EXPECT_EQ(log.find("event=slot_gap_found"), std::string::npos) << log;
  EXPECT_FALSE(pg_->slot_exists(slot_)) << "the relay made a new slot";
}

// reconcile --sqs QUEUE_URL --repair: SQS cannot be read back, so nothing is compared: every row
// of the window is sent again with the relay's publisher, in commit order, as the relay maps it;
// the summary says so (compared=0, resent=12). Without --repair it is refused (exit 2).
TEST_F(SqsRelay, ReconcileResendsTheWholeWindow) {
  create_outbox_table_with_time();
  for (int t = 0; t < 4; ++t) {
    pg_->exec(Workload::insert_sql(qualified_table(), aggregatetype_, 3, 1 + t * 3, 3, false));
  }
  std::vector<std::string> args{"reconcile",
                                "--pg",
                                conninfo_,
                                "--sqs",
                                sqs_queue_url_,
                                "--table",
                                qualified_table(),
                                "--column-time",
                                "created_at",
                                "--since",
                                "1h"};
  const CommandResult refused = run_to_end(relay_bin_, args, log_path("reconcile_refused_out"),
                                           log_path("reconcile_refused_err"), 60s);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("--sqs: needs --repair"), std::string::npos) << refused.err;
  args.push_back("--repair");
  const CommandResult rc =
      run_to_end(relay_bin_, args, log_path("reconcile_out"), log_path("reconcile_err"), 60s);
  EXPECT_EQ(rc.exit_code, 0) << rc.out << rc.err;
  EXPECT_NE(rc.out.find(" rows_scanned=12 destination=SQS compared=0 unmappable=0 resent=12 "
                        "failed=0\n"),
            std::string::npos)
      << rc.out;
  EXPECT_NE(rc.err.find("SQS cannot be read back: nothing is compared"), std::string::npos)
      << rc.err;
  const auto rows = committed_seqs();
  const DeliveryCheck check = check_deliveries(as_records(read_all(sqs_queue_url_, 12)), rows);
  EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.ghosts, 0u);
  EXPECT_EQ(check.duplicates, 0u);
}

}  // namespace
}  // namespace outbox_test::fault
