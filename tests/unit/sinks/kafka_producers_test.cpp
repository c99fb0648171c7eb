// KafkaProducers, the Kafka sink, against librdkafka's mock cluster hosted in this process:
// records produced are reported through the handlers, a refused batch stops the producer and a
// record sent alone still goes, queued() counts what is in flight, renew() starts over without
// the old producers' reports, and with exactly-once two transactional producers take turns.
#include "kafka_producers.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "outbox_test/asio_run.hpp"
#include "outbox_test/mock_kafka.hpp"
#include "successor.hpp"

namespace outbox::sinks {
namespace {

using relay::RecordSink;

using namespace std::chrono_literals;
using outbox_test::MockKafka;
using outbox_test::run;
using outbox_test::run_until;

constexpr const char* kTopic = "events";
constexpr const char* kTransactionalId = "outbox-relay.unit";

// What a delivery report said, kept past the handler call.
struct Report {
  std::uint64_t opaque;
  bool ok;
  sink::ErrorKind kind;
  std::string error_name;
  std::int64_t offset;
};

class KafkaProducersTest : public ::testing::Test {
 protected:
  KafkaProducersTest() : mock_(3) {
    mock_.create_topic(kTopic, 1);
    // The partition and both transactional.ids each on a broker of their own, so that a fault
    // injected into one broker reaches one of them only.
    rd_kafka_mock_partition_set_leader(mock_.get(), kTopic, 0, 3);
    rd_kafka_mock_coordinator_set(mock_.get(), "transaction", kTransactionalId, 1);
    rd_kafka_mock_coordinator_set(
        mock_.get(), "transaction",
        (std::string(kTransactionalId) + KafkaProducers::kSpareSuffix).c_str(), 2);
    producer_.brokers = mock_.bootstraps();
  }

  KafkaProducers& producers() {
    if (!producers_) {
      producers_ = std::make_unique<KafkaProducers>(
          io_.get_executor(), producer_, delivery_, kTransactionalId,
          RecordSink::Handlers{
              [this](const sink::Delivery& d) {
                reports_.push_back({d.opaque, d.ok, d.kind, std::string(d.error_name), d.offset});
              },
              [this](const std::string& m) { fatal_.push_back(m); },
              [this](const std::string& m) { refused_.push_back(m); }});
    }
    return *producers_;
  }

  sink::ProduceResult produce(std::uint64_t opaque, bool alone = false) {
    const std::string id = "id-" + std::to_string(opaque);
    const std::string value = "{\"n\": " + std::to_string(opaque) + "}";
    const sink::Header headers[] = {{"id", id}};
    return producers().produce(sink::Record{kTopic, std::string_view("agg-1"), value, headers},
                               opaque, alone);
  }

  // Until `n` reports were handed over. A deadline, not a measure: the sanitizer build runs at
  // nice 10 beside the test lanes, where a starved test took 10 s to see its first report (and
  // a CPU-only pipeline test 26 s).
  bool reported(std::size_t n, std::chrono::milliseconds deadline = 60s) {
    return run_until(
        io_, [&] { return reports_.size() >= n; }, deadline);
  }

  MockKafka mock_;
  boost::asio::io_context io_;
  kafka::ProducerConfig producer_;
  relay::DeliveryMode delivery_ = relay::DeliveryMode::kAtLeastOnce;
  std::vector<Report> reports_;
  std::vector<std::string> fatal_;
  std::vector<std::string> refused_;
  std::unique_ptr<KafkaProducers> producers_;  // last: its producers use io_ and the mock
};

TEST_F(KafkaProducersTest, RecordsOfTheCurrentProducerAreDeliveredAndReportedInOrder) {
  constexpr std::uint64_t kRecords = 20;
  for (std::uint64_t i = 1; i <= kRecords; ++i)
    ASSERT_EQ(produce(i).status, sink::ProduceStatus::kQueued);
  EXPECT_EQ(producers().queued(), kRecords) << "queued() counts every record not yet reported";
  ASSERT_TRUE(reported(kRecords)) << reports_.size() << " of " << kRecords << " reports";
  EXPECT_EQ(producers().queued(), 0u);
  for (std::size_t i = 0; i < reports_.size(); ++i) {
    EXPECT_TRUE(reports_[i].ok) << reports_[i].error_name;
    EXPECT_EQ(reports_[i].opaque, i + 1) << "the opaque given to produce() comes back, in order";
    EXPECT_EQ(reports_[i].offset, static_cast<std::int64_t>(i)) << "stored in order";
  }
  EXPECT_FALSE(producers().stopped());
  EXPECT_TRUE(fatal_.empty());
  EXPECT_TRUE(refused_.empty());
}

// enable.gapless.guarantee: the broker refuses a batch for good; the producer fails its records,
// stops (the relay rewinds) and takes nothing more, while a record sent alone goes through the
// send-alone producer and is reported on its own.
TEST_F(KafkaProducersTest, ARefusedBatchStopsTheProducerAndARecordSentAloneStillGoes) {
  ASSERT_EQ(produce(1).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(reported(1));
  ASSERT_TRUE(reports_[0].ok);

  rd_kafka_mock_push_request_errors(mock_.get(), outbox_test::kProduceApiKey, 1,
                                    RD_KAFKA_RESP_ERR_INVALID_RECORD);
  for (std::uint64_t i = 2; i <= 4; ++i) ASSERT_EQ(produce(i).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(run_until(io_, [&] { return reports_.size() >= 4 && !fatal_.empty(); }))
      << reports_.size() << " reports, " << fatal_.size() << " fatal errors";
  EXPECT_TRUE(producers().stopped());
  for (std::size_t i = 1; i < reports_.size(); ++i) {
    EXPECT_FALSE(reports_[i].ok) << "record " << reports_[i].opaque << " after the refusal";
  }
  EXPECT_EQ(reports_[1].error_name, "INVALID_RECORD");
  EXPECT_TRUE(sink::rejects_batch(reports_[1].kind));
  EXPECT_EQ(produce(5).status, sink::ProduceStatus::kFailed) << "a stopped producer takes nothing";

  ASSERT_EQ(produce(6, /*alone=*/true).status, sink::ProduceStatus::kQueued);
  EXPECT_EQ(producers().queued(), 1u) << "the record sent alone is in flight";
  ASSERT_TRUE(reported(5));
  EXPECT_EQ(reports_.back().opaque, 6u);
  EXPECT_TRUE(reports_.back().ok) << reports_.back().error_name;
  EXPECT_EQ(producers().queued(), 0u);
  EXPECT_TRUE(producers().stopped()) << "only renew() replaces the stopped producer";
  EXPECT_TRUE(refused_.empty());
}

// halt(): a rewind began while the producer goes on (a delivery timed out). Every record it held
// is reported failed as transient (the broker's state: sent again batched, never poison), and
// none of them reaches the broker afterwards, when it answers again.
TEST_F(KafkaProducersTest, HaltFailsWhatItHoldsAsTransientAndSendsNoneOfItLater) {
  ASSERT_EQ(produce(1).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(reported(1));
  ASSERT_TRUE(reports_[0].ok);
  // The partition's leader answers after 3 s: records 2 to 4 are in flight or queued.
  rd_kafka_mock_broker_set_rtt(mock_.get(), 3, 3000);
  reports_.clear();
  for (std::uint64_t i = 2; i <= 4; ++i) ASSERT_EQ(produce(i).status, sink::ProduceStatus::kQueued);
  producers().halt();
  ASSERT_TRUE(reported(3)) << reports_.size() << " of 3 reports";
  for (const Report& r : reports_) {
    EXPECT_FALSE(r.ok) << "record " << r.opaque;
    EXPECT_EQ(r.kind, sink::ErrorKind::kTransient) << "record " << r.opaque << ": " << r.error_name;
  }
  EXPECT_EQ(producers().queued(), 0u);
  EXPECT_FALSE(producers().stopped()) << "halt() is not a stop: renew() follows in the relay";
  rd_kafka_mock_broker_set_rtt(mock_.get(), 3, 0);

  // What the partition holds once the broker answers at once again: record 1, and record 5
  // produced after halt(), nothing of 2 to 4 (their reports said failed; none came later).
  producers().renew();
  reports_.clear();
  ASSERT_EQ(produce(5).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(reported(1));
  outbox_test::run_for(io_, 500ms);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_TRUE(reports_[0].ok) << reports_[0].error_name;
  EXPECT_EQ(reports_[0].offset, 1) << "a halted record was stored before record 5";
}

// A rewind: new producers, which deliver again; reports still due from the old ones never come.
TEST_F(KafkaProducersTest, RenewGivesNewProducersAndDropsTheOldOnesReports) {
  rd_kafka_mock_push_request_errors(mock_.get(), outbox_test::kProduceApiKey, 1,
                                    RD_KAFKA_RESP_ERR_INVALID_RECORD);
  ASSERT_EQ(produce(1).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(run_until(io_, [&] { return !fatal_.empty(); }));
  ASSERT_TRUE(producers().stopped());
  producers().renew();
  EXPECT_FALSE(producers().stopped());

  // Records in flight (the partition's leader answers after 5 s) when the producers are renewed.
  rd_kafka_mock_broker_set_rtt(mock_.get(), 3, 5000);
  reports_.clear();
  for (std::uint64_t i = 2; i <= 4; ++i) ASSERT_EQ(produce(i).status, sink::ProduceStatus::kQueued);
  EXPECT_EQ(producers().queued(), 3u);
  producers().renew();
  EXPECT_EQ(producers().queued(), 0u) << "the new producers hold nothing";
  rd_kafka_mock_broker_set_rtt(mock_.get(), 3, 0);

  ASSERT_EQ(produce(5).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(reported(1));
  ASSERT_EQ(reports_.size(), 1u) << "a report of a record produced before renew() came";
  EXPECT_EQ(reports_[0].opaque, 5u);
  EXPECT_TRUE(reports_[0].ok) << reports_[0].error_name;
}

// Exactly-once: the current and the spare transactional producer take turns, one Kafka
// transaction each; their transactional.ids differ (the spare's ends in kSpareSuffix), so a
// fence of one (a successor of its transactional.id) leaves the other as it was.
TEST_F(KafkaProducersTest, ExactlyOnceProducersTakeTurnsWithDistinctTransactionalIds) {
  delivery_ = relay::DeliveryMode::kExactlyOnce;
  kafka::Producer* first = &producers().current();
  kafka::Producer* second = &producers().spare();
  ASSERT_NE(first, second);
  for (kafka::Producer* p : {first, second}) {
    const auto r = run(io_, p->init_transactions(60s));
    ASSERT_TRUE(r.has_value() && r->ok()) << (r ? r->error : "init_transactions did not end");
  }

  // One transaction on each, in turn.
  for (std::uint64_t turn = 1; turn <= 2; ++turn) {
    ASSERT_TRUE(producers().current().begin_transaction().ok());
    ASSERT_EQ(produce(turn, /*alone=*/true).status, sink::ProduceStatus::kQueued)
        << "exactly-once sends every record in the transaction";
    ASSERT_TRUE(reported(turn));
    EXPECT_TRUE(reports_.back().ok) << reports_.back().error_name;
    const auto r = run(io_, producers().current().commit_transaction(60s));
    ASSERT_TRUE(r.has_value() && r->ok()) << (r ? r->error : "commit did not end");
    producers().take_turns();
    EXPECT_EQ(&producers().current(), turn == 1 ? second : first);
    EXPECT_EQ(&producers().spare(), turn == 1 ? first : second);
  }
  EXPECT_FALSE(producers().fenced());

  // A successor initialises the transactional.id (not the spare's): its coordinator, broker 1,
  // answers the old producer's next transaction request as a real one does, PRODUCER_FENCED
  // (librdkafka 2.0's mock gives each InitProducerId a producer id of its own and fences nobody).
  std::unique_ptr<kafka::Producer> successor;
  ASSERT_NO_FATAL_FAILURE(test::initialise_successor(io_, producer_, kTransactionalId, successor));
  rd_kafka_mock_broker_push_request_error_rtts(mock_.get(), 1,
                                               outbox_test::kAddPartitionsToTxnApiKey, 1,
                                               RD_KAFKA_RESP_ERR_PRODUCER_FENCED, 0);
  ASSERT_EQ(&producers().current(), first);
  ASSERT_TRUE(producers().current().begin_transaction().ok());
  ASSERT_EQ(produce(3).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(run_until(io_, [&] { return !fatal_.empty(); }))
      << "the fenced producer raised no fatal error";
  EXPECT_TRUE(producers().fenced());
  EXPECT_TRUE(producers().stopped());
  EXPECT_FALSE(producers().spare().stopped()) << "the spare's transactional.id was not fenced";
}

}  // namespace
}  // namespace outbox::sinks
