// aws::SqsPublisher against the real moto server of scripts/aws-up.sh (authentication on): a FIFO
// queue gets every record once, each group in produce order, with its ids and attributes, and a
// re-send is dropped by the queue (the relay's duplicates after a crash); throughput with several
// calls in flight (printed); a binary payload as base64 read back; a standard queue; the
// dead-letter queue by topic; a record over the queue's MaximumMessageSize refused at produce; a
// wrong secret and a missing queue refused through the refused handler, naming the credentials'
// source and not the secret.
#include "outbox/aws/sqs_publisher.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "sqs_fixture.hpp"

namespace {

namespace aws = outbox::aws;
namespace sink = outbox::sink;
using outbox_test::moto;
using outbox_test::Received;
using outbox_test::unique_name;
using namespace std::chrono_literals;

class SqsPublisherMoto : public outbox_test::SqsMoto {
 protected:
  aws::SqsPublisherConfig publisher_config(const std::string& url, std::size_t calls = 8,
                                           std::string secret_suffix = "") {
    aws::SqsPublisherConfig c;
    c.queue_url = url;
    c.sqs = config(std::move(secret_suffix));
    c.sqs.http.max_connections = calls;
    return c;
  }

  std::unique_ptr<aws::SqsPublisher> make(aws::SqsPublisherConfig c) {
    return std::make_unique<aws::SqsPublisher>(
        io_.get_executor(), std::move(c),
        [this](const sink::Delivery& d) {
          if (d.ok) {
            acked_.push_back(d.opaque);
          } else {
            failed_.push_back(d);
            failed_errors_.push_back(d.error);
          }
        },
        [this](const std::string& m) { fatal_.push_back(m); },
        [this](const std::string& m) { refused_.push_back(m); });
  }

  // Runs the io_context until `done` or the timeout.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    io_.restart();
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  // Produces every record (waiting for room as the relay does).
  void produce_all(aws::SqsPublisher& p, const std::vector<sink::Record>& records,
                   std::uint64_t first_opaque = 1) {
    ASSERT_TRUE(run_until([&] { return p.ready() || !refused_.empty(); }));
    ASSERT_TRUE(p.ready()) << (refused_.empty() ? "" : refused_.front());
    for (std::size_t i = 0; i < records.size(); ++i) {
      for (;;) {
        const sink::ProduceResult r = p.produce(records[i], first_opaque + i, false);
        if (r.status == sink::ProduceStatus::kQueued) break;
        ASSERT_EQ(r.status, sink::ProduceStatus::kQueueFull) << r.error;
        io_.restart();
        io_.run_one_for(10ms);
      }
    }
  }

  std::vector<std::uint64_t> acked_;
  std::vector<sink::Delivery> failed_;
  std::vector<std::string> failed_errors_;
  std::vector<std::string> fatal_;
  std::vector<std::string> refused_;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// The records of `events` events over `groups` aggregates: event i of aggregate "agg-<i % groups>",
// id "id-<i>", payload {"seq":i}.
struct Events {
  std::vector<std::string> ids, keys, values;
  std::vector<std::vector<sink::Header>> headers;
  std::vector<sink::Record> records;
  Events(const std::string& topic, int events, int groups) {
    ids.reserve(events);
    keys.reserve(events);
    values.reserve(events);
    headers.reserve(events);
    for (int i = 0; i < events; ++i) {
      ids.push_back("id-" + std::to_string(i));
      keys.push_back("agg-" + std::to_string(i % groups));
      values.push_back("{\"seq\":" + std::to_string(i) + "}");
    }
    for (int i = 0; i < events; ++i) {
      headers.push_back({{"id", ids[i]}, {"type", "OrderPlaced"}});
      records.push_back(sink::Record{topic, keys[i], values[i], headers.back()});
    }
  }
};

TEST_F(SqsPublisherMoto, FifoQueueGetsEveryRecordOnceInOrderPerGroup) {
  aws::SqsClient admin(io_.get_executor(), config());
  const std::string url =
      create_queue(admin, unique_name("pub") + ".fifo", {{"FifoQueue", "true"}});
  const int calls = env_int("OUTBOX_SQS_CALLS", 8);
  auto publisher = make(publisher_config(url, static_cast<std::size_t>(calls)));
  // OUTBOX_SQS_EVENTS, OUTBOX_SQS_GROUPS and OUTBOX_SQS_CALLS (calls in flight) make it a
  // throughput measure (docs/aws.md).
  const int event_count = env_int("OUTBOX_SQS_EVENTS", 120);
  const int group_count = env_int("OUTBOX_SQS_GROUPS", 40);
  Events events("outbox.event.order", event_count, group_count);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(produce_all(*publisher, events.records));
  ASSERT_TRUE(run_until(
      [&] { return acked_.size() + failed_.size() == static_cast<std::size_t>(event_count); },
      120s));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(failed_.empty()) << failed_errors_.front();
  EXPECT_EQ(publisher->queued(), 0u);
  std::printf(
      "[ figure ] %d events over %d groups in %.2f s: %.0f events/s, %zu calls (%zu "
      "connections: moto closes each), %d calls in flight at most\n",
      event_count, group_count, seconds, event_count / seconds, publisher->calls(),
      publisher->connections_opened(), calls);

  // The relay after a crash sends again what was not confirmed: the queue drops it (same
  // deduplication ids, within five minutes), and the publisher counts it delivered. (moto
  // forgets the ids of deleted messages, SQS does not: sent again before reading.)
  acked_.clear();
  ASSERT_NO_FATAL_FAILURE(produce_all(
      *publisher, std::vector<sink::Record>(events.records.begin(), events.records.begin() + 50)));
  ASSERT_TRUE(run_until([&] { return acked_.size() == 50; }));

  const std::vector<Received> got = receive(admin, url, event_count, 0ms, 60s);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(event_count));
  std::map<std::string, int> last;  // group -> last seq
  std::set<std::string> ids;
  for (const Received& r : got) {
    const int seq = std::stoi(r.body.substr(7));
    const std::string& key = events.keys[seq];
    EXPECT_EQ(r.group_id, key);
    EXPECT_EQ(r.deduplication_id, events.ids[seq]);
    EXPECT_EQ(r.attributes.at("id"), events.ids[seq]);
    EXPECT_EQ(r.attributes.at("type"), "OrderPlaced");
    EXPECT_EQ(r.attributes.at("key"), key);
    EXPECT_TRUE(ids.insert(r.attributes.at("id")).second) << "twice: " << r.attributes.at("id");
    auto it = last.find(key);
    if (it != last.end()) EXPECT_LT(it->second, seq) << "group " << key << " out of order";
    last[key] = seq;
  }

  EXPECT_TRUE(receive(admin, url, 1, 500ms, 1s).empty());  // nothing more
}

TEST_F(SqsPublisherMoto, BinaryPayloadIsBase64WithAnAttributeSayingSo) {
  aws::SqsClient admin(io_.get_executor(), config());
  const std::string url =
      create_queue(admin, unique_name("bin") + ".fifo", {{"FifoQueue", "true"}});
  auto publisher = make(publisher_config(url));
  const std::string bytes("\x00\xff\x01 binary \xc3", 12);
  const std::vector<sink::Header> headers = {{"id", "b-1"}};
  ASSERT_NO_FATAL_FAILURE(produce_all(*publisher, {sink::Record{"t", "k", bytes, headers}}));
  ASSERT_TRUE(run_until([&] { return acked_.size() == 1; })) << failed_errors_.size();
  const auto got = receive(admin, url, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, aws::base64(bytes));
  EXPECT_EQ(got[0].attributes.at("outbox.body"), "base64");
}

TEST_F(SqsPublisherMoto, StandardQueueAndDeadLetterQueueByTopic) {
  aws::SqsClient admin(io_.get_executor(), config());
  const std::string url = create_queue(admin, unique_name("std"), {});
  const std::string dlq = create_queue(admin, unique_name("dlq"), {});
  auto c = publisher_config(url);
  c.dlq_topic = "outbox.dlq";
  c.dlq_queue_url = dlq;
  auto publisher = make(c);
  const std::vector<sink::Header> h1 = {{"id", "s-1"}};
  const std::vector<sink::Header> h2 = {{"id", "s-2"}, {"outbox.error", "refused"}};
  ASSERT_NO_FATAL_FAILURE(produce_all(
      *publisher, {sink::Record{"t", "k", "one", h1}, sink::Record{"outbox.dlq", "k", "two", h2}}));
  ASSERT_TRUE(run_until([&] { return acked_.size() == 2; }));
  EXPECT_FALSE(publisher->attributes()->fifo);
  const auto main = receive(admin, url, 1, 500ms);
  ASSERT_EQ(main.size(), 1u);
  EXPECT_EQ(main[0].body, "one");
  EXPECT_EQ(main[0].group_id, "");
  const auto dead = receive(admin, dlq, 1, 500ms);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].body, "two");
  EXPECT_EQ(dead[0].attributes.at("outbox.error"), "refused");
}

TEST_F(SqsPublisherMoto, RecordOverTheQueuesMaximumSizeIsRefusedAtProduce) {
  aws::SqsClient admin(io_.get_executor(), config());
  const std::string url = create_queue(admin, unique_name("small") + ".fifo",
                                       {{"FifoQueue", "true"}, {"MaximumMessageSize", "1024"}});
  auto publisher = make(publisher_config(url));
  ASSERT_TRUE(run_until([&] { return publisher->ready(); }));
  EXPECT_EQ(publisher->attributes()->maximum_message_size, 1024u);
  const std::string big(1100, 'x');
  const std::vector<sink::Header> headers = {{"id", "big-1"}};
  const sink::ProduceResult r = publisher->produce(sink::Record{"t", "k", big, headers}, 1, false);
  EXPECT_EQ(r.status, sink::ProduceStatus::kFailed);
  EXPECT_TRUE(r.size_error);
  EXPECT_NE(r.error.find("MessageTooLong"), std::string::npos) << r.error;
  EXPECT_EQ(publisher->queued(), 0u);
}

TEST_F(SqsPublisherMoto, WrongSecretIsRefusedNamingTheSourceNotTheSecret) {
  aws::SqsClient admin(io_.get_executor(), config());
  const std::string url =
      create_queue(admin, unique_name("auth") + ".fifo", {{"FifoQueue", "true"}});
  auto publisher = make(publisher_config(url, 8, "-wrong"));
  ASSERT_TRUE(run_until([&] { return !refused_.empty(); }));
  EXPECT_TRUE(publisher->stopped());
  EXPECT_FALSE(publisher->ready());
  EXPECT_NE(refused_[0].find(std::string(outbox_test::kSource)), std::string::npos) << refused_[0];
  EXPECT_EQ(refused_[0].find(moto().secret_access_key), std::string::npos) << refused_[0];
  const std::vector<sink::Header> headers = {{"id", "x"}};
  EXPECT_EQ(publisher->produce(sink::Record{"t", "k", "v", headers}, 1, false).status,
            sink::ProduceStatus::kFailed);
}

TEST_F(SqsPublisherMoto, MissingQueueIsRefused) {
  auto publisher = make(publisher_config(moto().endpoint + "/123456789012/" + unique_name("none")));
  ASSERT_TRUE(run_until([&] { return !refused_.empty(); }));
  EXPECT_NE(refused_[0].find("cannot be used"), std::string::npos) << refused_[0];
}

}  // namespace
