// A test fixture that lends KafkaTransactions what the relay lends it (relay::Transactions::Host),
// around a real Pipeline and real KafkaProducers on librdkafka's mock cluster hosted in the test
// process: records go from the Pipeline through the producers as in the relay (Pipeline::Sink),
// their reports come back to the Pipeline or to the cycle (the checkpoint record's), and the
// Host's calls are recorded for the tests to check. Everything runs on the test's thread.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kafka_producers.hpp"
#include "kafka_transactions.hpp"
#include "outbox/kafka/consumer.hpp"
#include "outbox_test/asio_run.hpp"
#include "outbox_test/mock_kafka.hpp"
#include "wal_frames.hpp"

namespace outbox::sinks::test {

using namespace std::chrono_literals;
using outbox_test::run_until;
using relay::DeliveryMode;
using relay::Fatal;
using relay::Metrics;
using relay::Pipeline;
using relay::RecordSink;
using relay::RelayConfig;
using relay::TxnPhase;
namespace wal = relay::wal;

class TransactionsTest : public ::testing::Test,
                         public relay::Transactions::Host,
                         public Pipeline::Sink {
 protected:
  using Lsn = pgoutput::Lsn;
  using Clock = KafkaTransactions::Clock;
  static constexpr std::uint32_t kRelid = 16385;
  static constexpr const char* kTopic = "outbox.event.order";  // the default topic template's
  static constexpr const char* kCheckpoints = "outbox-relay.checkpoints.unit";
  static constexpr const char* kTransactionalId = "outbox-relay.unit";
  static constexpr const char* kCheckpointKey = "7000000000000000001/unit";

  TransactionsTest() : mock_(1), wake_(io_) {
    mock_.create_topic(kTopic, 1);
    // The mock cluster has no CreateTopics: the checkpoint topic is made beforehand, as an
    // operator whose relay may not create topics would.
    mock_.create_topic(kCheckpoints, 1);
    config_.slot = "unit";
    config_.delivery = DeliveryMode::kExactlyOnce;
    config_.checkpoint_topic = kCheckpoints;
    producer_.brokers = mock_.bootstraps();
  }

  ~TransactionsTest() override { stop_relay(); }

  // A relay process's parts, as the relay makes them; a Pipeline that resumes (the stream's
  // history continues) and whose publication check passed long ahead.
  void start_relay() {
    producers_ = std::make_unique<KafkaProducers>(
        io_.get_executor(), producer_, config_.delivery, kTransactionalId,
        RecordSink::Handlers{[this](const sink::Delivery& d) { on_delivery(d); },
                             [this](const std::string& m) { on_fatal(m); },
                             [](const std::string&) {}});
    pipeline_ = std::make_unique<Pipeline>(
        config_, *this, metrics_,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()));
    EXPECT_EQ(pipeline_->on_frame(wal::relation(kRelid, {{"id", 25},
                                                         {"aggregatetype", 25},
                                                         {"aggregateid", 25},
                                                         {"type", 25},
                                                         {"payload", 25}})),
              Pipeline::Step::kDone);
    pipeline_->publication_verified(Lsn{~0ULL >> 1});
    pipeline_->resume(true);
    transactions_ = std::make_unique<KafkaTransactions>(
        config_, producer_, *pipeline_, *producers_, metrics_,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()),
        kTransactionalId, *this);
  }

  // The process ends (its producers first, as the relay's reset()).
  void stop_relay() {
    if (producers_) producers_->reset();
    transactions_.reset();
    pipeline_.reset();
    producers_.reset();
    failed_ = false;
  }

  // The relay's rewind after an abort: new producers, initialised again; the Pipeline goes
  // back to the last commit.
  void rewind() {
    producers_->renew();
    transactions_->producers_renewed();
    pipeline_->rewound();
  }

  // One PostgreSQL transaction of `events` inserts, committed at `commit_lsn`, ending at
  // `end_lsn`, handed to the Pipeline as the stream brings it.
  void transaction(std::uint64_t commit_lsn, std::uint64_t end_lsn, int events) {
    ASSERT_EQ(pipeline_->on_frame(wal::begin(commit_lsn)), Pipeline::Step::kDone);
    for (int i = 0; i < events; ++i) {
      const std::string id = "e-" + std::to_string(commit_lsn) + "-" + std::to_string(i);
      ASSERT_EQ(pipeline_->on_frame(wal::insert(
                    kRelid, {id, std::string("order"), std::string("agg-" + std::to_string(i)),
                             std::string("Created"), std::string("{\"i\": 1}")})),
                Pipeline::Step::kDone);
    }
    ASSERT_EQ(pipeline_->on_frame(wal::commit(commit_lsn, end_lsn)), Pipeline::Step::kDone);
  }

  // Runs the io_context until Kafka acknowledged everything up to `lsn`.
  // (A deadline, not a measure: see kafka_producers_test.cpp's reported().)
  bool acknowledged_through(Lsn lsn, std::chrono::milliseconds deadline = 60s) {
    return run_until(
        io_, [&] { return pipeline_->acknowledged() >= lsn; }, deadline);
  }

  // Every value the checkpoint topic holds under the relay's key, in order (read as a user
  // would, with a consumer of its own).
  std::vector<std::string> checkpoints() {
    kafka::Consumer consumer(kafka::ConsumerConfig{mock_.bootstraps(), {}});
    const kafka::TopicPlan plan = consumer.plan(kCheckpoints, std::nullopt, 60s);
    std::vector<std::string> values;
    consumer.read(
        plan.partitions,
        [&](const kafka::ConsumedRecord& r) {
          if (r.key && *r.key == kCheckpointKey && r.value) values.emplace_back(*r.value);
        },
        60s);
    return values;
  }

  // ---- Pipeline::Sink: as the relay's --------------------------------------------------------
  kafka::ProduceResult produce(const kafka::Record& record, std::uint64_t opaque,
                               Pipeline::Route route) override {
    transactions_->before_record();
    ++produced_;
    return producers_->produce(record, opaque, route == Pipeline::Route::kAlone);
  }
  bool stopped() const override { return producers_->stopped(); }

  void on_delivery(const sink::Delivery& d) {
    if (!transactions_->take(d)) pipeline_->on_delivery(d);
    wake_.cancel();
  }

  void on_fatal(const std::string& message) {
    if (transactions_->fenced()) {
      transactions_->on_fenced(message);
    } else {
      pipeline_->abort_kafka_transaction("Kafka producer fatal error: " + message);
    }
    wake_.cancel();
  }

  // ---- relay::Transactions::Host ------------------------------------------------------------
  bool leaving() const override { return failed_ || pipeline_->rewinding(); }
  bool stopping() const override { return false; }
  Clock::time_point stop_deadline() const override { return Clock::time_point::max(); }
  bool failed() const override { return failed_; }
  // The relay this fixture plays holds no replication connection: a fence stops it.
  bool holds_slot() const override { return false; }
  void fail(Fatal fatal) override {
    fenced_.push_back(fatal.message);
    failed_ = true;
    wake_.cancel();
  }
  boost::asio::awaitable<void> wait_for_change(Clock::time_point until) override {
    wake_.expires_at(until);
    boost::system::error_code ec;
    co_await wake_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  }
  std::chrono::milliseconds backoff(int) override { return 100ms; }
  std::string checkpoint_key() const override { return kCheckpointKey; }
  std::uint32_t timeline() const override { return 1; }
  std::optional<Lsn> switch_point(std::uint32_t) const override { return std::nullopt; }
  bool decoding_on_standby() const override { return false; }
  void ghosts(Lsn from, Lsn, std::uint32_t) override {
    ADD_FAILURE() << "ghosts reported from " << from.to_string() << " on a single timeline";
  }
  void waiting_for_broker(const std::string& reason) override { waits_.push_back(reason); }
  void committed() override { committed_at_.push_back(pipeline_->confirmable()); }
  void aborted() override { ++aborted_; }

  outbox_test::MockKafka mock_;
  boost::asio::io_context io_;
  boost::asio::steady_timer wake_;
  RelayConfig config_;
  kafka::ProducerConfig producer_;
  Metrics metrics_;
  bool failed_ = false;
  std::size_t produced_ = 0;
  std::vector<std::string> waits_;
  std::vector<std::string> fenced_;  // Host::fail()'s messages (a fence)
  std::vector<Lsn> committed_at_;    // the confirmable position at each Host::committed()
  int aborted_ = 0;
  std::unique_ptr<KafkaProducers> producers_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<KafkaTransactions> transactions_;
};

}  // namespace outbox::sinks::test
