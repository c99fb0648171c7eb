// nats::Publisher against the real nats-server started by scripts/nats-up.sh (OUTBOX_NATS,
// OUTBOX_NATS_PID_FILE): what lands in the stream (data, headers, Nats-Msg-Id), the order of
// acknowledgements, the refusals (no stream, over max_payload), the duplicate window, and the
// server stopped and frozen while publishing. The stream is read back with libnats directly.
#include "outbox/nats/publisher.hpp"

#include <gtest/gtest.h>
#include <nats/nats.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "outbox_test/asio_run.hpp"
#include "stream_reader.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::nats::Publisher;
using outbox::nats::PublisherConfig;
using outbox::sink::Delivery;
using outbox::sink::ErrorKind;
using outbox::sink::Header;
using outbox::sink::ProduceStatus;
using outbox::sink::Record;
using outbox_test::nats::env;
using outbox_test::nats::nats_url;
using outbox_test::nats::Stored;
using outbox_test::nats::StreamReader;
using outbox_test::nats::unique;
using Clock = std::chrono::steady_clock;

int run_script(const std::string& name) { return outbox_test::nats::run_nats_script(name); }

class NatsPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Like the other tests of real servers: a missing server is a failure, not a skip.
    ASSERT_FALSE(nats_url().empty())
        << "environment variable OUTBOX_NATS is not set; run the tests through scripts/test.sh, "
           "or scripts/nats-up.sh and `source .local/env`";
    stream_ = unique("OUTBOX_TEST");
    subject_prefix_ = "outbox.test." + stream_;
    config_.urls = nats_url();
    const std::string err =
        outbox::nats::ensure_stream(config_, stream_, {subject_prefix_ + ".>"}, 2min, 10s);
    ASSERT_EQ(err, "");
  }
  void TearDown() override {
    publisher_.reset();
    if (server_down_ && run_script("nats-up.sh") == 0) server_down_ = false;
    if (!stream_.empty() && !server_down_) StreamReader().drop(stream_);
  }

  void make_publisher() {
    publisher_ = std::make_unique<Publisher>(
        io_.get_executor(), config_, [this](const Delivery& d) { on_delivery(d); },
        [this](const std::string& m) { fatal_.push_back(m); });
  }

  void on_delivery(const Delivery& d) {
    Report r{d.opaque,
             d.ok,
             d.kind,
             std::string(d.error_name),
             d.error,
             d.offset,
             std::string(d.id_header)};
    reports_.push_back(r);
  }

  // Runs the io_context until `done` holds or `timeout` passes; returns `done()`.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    return outbox_test::run_until(io_, done, timeout);
  }

  std::string subject(const std::string& leaf) const { return subject_prefix_ + "." + leaf; }

  // Publishes record `i` (id "ev-<i>") to the subject "<prefix>.<agg>".
  ProduceStatus publish(int i, const std::string& agg = "Order") {
    const std::string id = "ev-" + std::to_string(i);
    const std::string value = "{\"n\":" + std::to_string(i) + "}";
    const std::string key = agg + "-" + std::to_string(i % 7);
    const Header headers[] = {{"id", id}, {"type", "Created"}};
    const std::string subj = subject(agg);
    Record r;
    r.topic = subj;
    r.key = key;
    r.value = value;
    r.headers = headers;
    return publisher_->produce(r, static_cast<std::uint64_t>(i)).status;
  }

  struct Report {
    std::uint64_t opaque;
    bool ok;
    ErrorKind kind;
    std::string error_name;
    std::string error;
    std::int64_t offset;
    std::string id;
  };

  boost::asio::io_context io_;
  PublisherConfig config_;
  std::string stream_;
  std::string subject_prefix_;
  std::unique_ptr<Publisher> publisher_;
  std::vector<Report> reports_;
  std::vector<std::string> fatal_;
  bool server_down_ = false;
};

TEST_F(NatsPublisherTest, RecordsLandWithTheirHeadersAndMsgId) {
  make_publisher();
  const std::string value = "{\"total\": 12}";
  const std::string subj = subject("Order");
  const Header headers[] = {
      {"id", "7f1c-uuid"},
      {"type", "OrderPaid"},
      {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
      {"tenant", std::nullopt}};
  Record r;
  r.topic = subj;
  r.key = "order-7";
  r.value = value;
  r.headers = headers;
  ASSERT_EQ(publisher_->produce(r, 42).status, ProduceStatus::kQueued);
  EXPECT_EQ(publisher_->queued(), 1u);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 1; }, 10s));
  EXPECT_TRUE(reports_[0].ok) << reports_[0].error;
  EXPECT_EQ(reports_[0].opaque, 42u);
  EXPECT_EQ(reports_[0].offset, 1);  // the stream sequence
  EXPECT_EQ(publisher_->queued(), 0u);

  auto stored = StreamReader().all(stream_);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].subject, subj);
  EXPECT_EQ(stored[0].data, value);
  EXPECT_EQ(stored[0].headers["id"], "7f1c-uuid");
  EXPECT_EQ(stored[0].headers["type"], "OrderPaid");
  EXPECT_EQ(stored[0].headers["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(stored[0].headers.count("tenant"), 0u);  // NULL: left out (NATS has no null header)
  EXPECT_EQ(stored[0].headers["key"], "order-7");
  EXPECT_EQ(stored[0].headers["Nats-Msg-Id"], "7f1c-uuid");
}

TEST_F(NatsPublisherTest, AcknowledgementsComeInPublishOrder) {
  config_.max_in_flight = 64;
  make_publisher();
  constexpr int kCount = 1000;
  int next = 0;
  ASSERT_TRUE(run_until(
      [&] {
        while (next < kCount) {
          const ProduceStatus st = publish(next, next % 2 ? "Order" : "Invoice");
          if (st == ProduceStatus::kQueueFull) break;
          EXPECT_EQ(st, ProduceStatus::kQueued);
          EXPECT_LE(publisher_->queued(), 64u);  // the window holds
          ++next;
        }
        return static_cast<int>(reports_.size()) == kCount;
      },
      60s));
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(reports_[i].ok) << reports_[i].error;
    ASSERT_EQ(reports_[i].opaque, static_cast<std::uint64_t>(i));
    ASSERT_EQ(reports_[i].offset, i + 1);
  }
  auto stored = StreamReader().all(stream_);
  ASSERT_EQ(stored.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(stored[i].headers["id"], "ev-" + std::to_string(i));
}

TEST_F(NatsPublisherTest, SubjectNoStreamCapturesIsAFinalRecordError) {
  make_publisher();
  const std::string orphan = "outbox.nostream." + stream_;
  const Header headers[] = {{"id", "orphan-1"}, {"type", "Created"}};
  Record r;
  r.topic = orphan;
  r.key = "k";
  r.value = "v";
  r.headers = headers;
  ASSERT_EQ(publisher_->produce(r, 1).status, ProduceStatus::kQueued);
  ASSERT_EQ(publish(2), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 2; }, 10s));
  EXPECT_FALSE(reports_[0].ok);
  EXPECT_EQ(reports_[0].kind, ErrorKind::kRecord);
  EXPECT_EQ(reports_[0].error_name, "NO_STREAM");
  EXPECT_NE(reports_[0].error.find("no JetStream stream captures subject " + orphan),
            std::string::npos)
      << reports_[0].error;
  EXPECT_EQ(reports_[0].id, "orphan-1");  // for the dead-letter record
  // Final for that record only: the publisher goes on.
  EXPECT_TRUE(reports_[1].ok) << reports_[1].error;
  EXPECT_FALSE(publisher_->stopped());
  EXPECT_TRUE(fatal_.empty());
}

TEST_F(NatsPublisherTest, MessageOverMaxPayloadIsASizeError) {
  make_publisher();
  ASSERT_TRUE(run_until([&] { return publisher_->connected(); }, 10s));
  const std::string big(1024 * 1024 + 1, 'x');  // nats-up.sh keeps the default 1 MiB
  const Header headers[] = {{"id", "big-1"}, {"type", "Created"}};
  const std::string subj = subject("Order");
  Record r;
  r.topic = subj;
  r.value = big;
  r.headers = headers;
  auto res = publisher_->produce(r, 1);
  EXPECT_EQ(res.status, ProduceStatus::kFailed);
  EXPECT_TRUE(res.size_error);
  EXPECT_NE(res.error.find("MAX_PAYLOAD"), std::string::npos) << res.error;
  EXPECT_FALSE(publisher_->stopped());
  EXPECT_EQ(publisher_->queued(), 0u);
  // The publisher goes on.
  ASSERT_EQ(publish(2), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 1; }, 10s));
  EXPECT_TRUE(reports_[0].ok);
  EXPECT_EQ(StreamReader().count(stream_), 1u);
}

TEST_F(NatsPublisherTest, MessageOverTheStreamsMaxMsgSizeIsASizeError) {
  const std::string small = stream_ + "_SMALL";
  const std::string subj = "outbox.small." + stream_;
  StreamReader().add_small_stream(small, subj, 100);
  make_publisher();
  ASSERT_TRUE(run_until([&] { return publisher_->connected(); }, 10s));
  const std::string value(200, 'x');
  const Header headers[] = {{"id", "small-1"}, {"type", "Created"}};
  Record r;
  r.topic = subj;
  r.value = value;
  r.headers = headers;
  ASSERT_EQ(publisher_->produce(r, 9).status, ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 1; }, 10s));
  StreamReader().drop(small);
  EXPECT_FALSE(reports_[0].ok);
  EXPECT_EQ(reports_[0].kind, ErrorKind::kSize);
  EXPECT_EQ(reports_[0].error_name, "MESSAGE_EXCEEDS_MAXIMUM") << reports_[0].error;
  EXPECT_FALSE(publisher_->stopped());
}

TEST_F(NatsPublisherTest, SameMsgIdInsideTheWindowIsStoredOnce) {
  make_publisher();
  ASSERT_EQ(publish(1), ProduceStatus::kQueued);
  ASSERT_EQ(publish(1), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 2; }, 10s));
  // A publisher made anew (as after a relay restart) sends it once more.
  publisher_.reset();
  make_publisher();
  ASSERT_EQ(publish(1), ProduceStatus::kQueued);
  ASSERT_EQ(publish(2), ProduceStatus::kQueued);
  ASSERT_TRUE(run_until([&] { return reports_.size() == 4; }, 10s));
  for (const auto& r : reports_) EXPECT_TRUE(r.ok) << r.error;  // a duplicate counts as delivered
  auto stored = StreamReader().all(stream_);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].headers["id"], "ev-1");
  EXPECT_EQ(stored[1].headers["id"], "ev-2");
}

TEST_F(NatsPublisherTest, EnsureStreamSetsTheWindowAndAddsSubjects) {
  auto [window, subjects] = StreamReader().settings(stream_);
  EXPECT_EQ(window, std::chrono::nanoseconds(2min));
  EXPECT_EQ(subjects, std::vector<std::string>{subject_prefix_ + ".>"});
  // Again on the existing stream: the window changes, a subject is added, none is lost.
  ASSERT_EQ(outbox::nats::ensure_stream(config_, stream_, {"outbox.dlq." + stream_}, 10min, 10s),
            "");
  std::tie(window, subjects) = StreamReader().settings(stream_);
  EXPECT_EQ(window, std::chrono::nanoseconds(10min));
  EXPECT_EQ(subjects, (std::vector<std::string>{subject_prefix_ + ".>", "outbox.dlq." + stream_}));
}

// ---- the server stopped or frozen while publishing -------------------------------------------

pid_t server_pid() {
  std::ifstream in(env("OUTBOX_NATS_PID_FILE"));
  pid_t pid = -1;
  in >> pid;
  return pid;
}

// Publishes ev-0..kCount-1 through an outage made by `cut` and ended by `heal`, the way the relay
// does: after the publisher stopped, a new one sends again from the first event not acknowledged.
// What was reported delivered must be in the stream at every point; at the end the stream holds
// each event once, in order.
class NatsOutageTest : public NatsPublisherTest {
 protected:
  // `stops_before_heal`: how many publishers must stop before the outage ends (2: one made
  // while the server is away must stop too, having delivered nothing).
  void publish_through(const std::function<void()>& cut, const std::function<void()>& heal,
                       int stops_before_heal) {
    constexpr int kCount = 3000;
    config_.max_in_flight = 256;
    config_.ack_timeout = 2s;
    config_.options = {{"ping_interval_ms", "1000"},
                       {"max_pings_out", "2"},
                       {"reconnect_wait_ms", "200"},
                       {"write_deadline_ms", "2000"}};
    make_publisher();
    std::set<std::uint64_t> delivered;
    int next = 0;
    int acked_prefix = 0;  // every event below it delivered
    bool cut_done = false;
    bool healed = false;
    int rewinds = 0;
    int stops = 0;
    std::size_t delivered_at_stop = 0;
    const auto deadline = Clock::now() + 120s;
    while (acked_prefix < kCount && Clock::now() < deadline) {
      for (std::size_t i = 0; i < reports_.size(); ++i) {
        if (reports_[i].ok) delivered.insert(reports_[i].opaque);
      }
      reports_.clear();
      while (delivered.count(static_cast<std::uint64_t>(acked_prefix))) ++acked_prefix;
      if (publisher_->stopped()) {
        ++stops;
        if (!healed && stops == 2) {
          EXPECT_EQ(delivered_at_stop, delivered.size()) << "delivered while the server was away";
        }
        delivered_at_stop = delivered.size();
        if (!healed && stops >= stops_before_heal) {
          // Nothing reported delivered that the stream does not hold (read after healing: the
          // server must be up to be read).
          heal();
          healed = true;
          auto stored = StreamReader().all(stream_);
          std::set<std::string> ids;
          for (const auto& s : stored) ids.insert(s.headers.at("id"));
          for (auto d : delivered) {
            ASSERT_TRUE(ids.count("ev-" + std::to_string(d)))
                << "ev-" << d << " reported delivered, not stored";
          }
        }
        publisher_.reset();
        make_publisher();
        ++rewinds;
        next = acked_prefix;
      }
      while (next < kCount && !publisher_->stopped()) {
        const ProduceStatus st = publish(next);
        if (st != ProduceStatus::kQueued) break;
        ++next;
      }
      // The outage starts with publishes in flight.
      if (!cut_done && acked_prefix >= kCount / 3 && publisher_->queued() > 0) {
        cut();
        cut_done = true;
      }
      io_.restart();
      io_.run_for(5ms);
    }
    ASSERT_EQ(acked_prefix, kCount) << "not all delivered after the outage";
    EXPECT_TRUE(cut_done);
    EXPECT_GE(rewinds, stops_before_heal) << "the publisher never noticed the outage";
    EXPECT_FALSE(fatal_.empty());
    auto stored = StreamReader().all(stream_);
    ASSERT_EQ(stored.size(), static_cast<std::size_t>(kCount)) << "duplicates or losses";
    for (int i = 0; i < kCount; ++i) {
      ASSERT_EQ(stored[i].headers["id"], "ev-" + std::to_string(i)) << "at stream position " << i;
    }
  }
};

TEST_F(NatsOutageTest, ServerStoppedWhilePublishing) {
  publish_through(
      [&] {
        server_down_ = true;
        ASSERT_EQ(run_script("nats-down.sh"), 0);
      },
      [&] {
        ASSERT_EQ(run_script("nats-up.sh"), 0);
        server_down_ = false;
      },
      2);
}

// A crash: SIGKILL leaves no time to answer what is in flight. What was acknowledged survives
// it: a stream's file store writes each message to its file before acknowledging it (flush in
// place, nats-server's default for streams); only the machine's crash needs replicas or fsync.
TEST_F(NatsOutageTest, ServerKilledWhilePublishing) {
  const pid_t pid = server_pid();
  ASSERT_GT(pid, 0) << "OUTBOX_NATS_PID_FILE not set or unreadable";
  publish_through(
      [&] {
        server_down_ = true;
        ASSERT_EQ(::kill(pid, SIGKILL), 0);
      },
      [&] {
        ASSERT_EQ(run_script("nats-up.sh"), 0);
        server_down_ = false;
      },
      2);
}

TEST_F(NatsOutageTest, ServerFrozenWhilePublishing) {
  const pid_t pid = server_pid();
  ASSERT_GT(pid, 0) << "OUTBOX_NATS_PID_FILE not set or unreadable";
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{pid};
  publish_through([&] { ASSERT_EQ(::kill(pid, SIGSTOP), 0); },
                  [&] {
                    // The frozen server holds the publisher's connection: dropping the publisher
                    // must not hang on it.
                    const auto t0 = Clock::now();
                    publisher_.reset();
                    EXPECT_LT(Clock::now() - t0, 5s);
                    ASSERT_EQ(::kill(pid, SIGCONT), 0);
                    make_publisher();  // replaced at once by the loop; keeps the pointer valid
                  },
                  1);
}

}  // namespace
