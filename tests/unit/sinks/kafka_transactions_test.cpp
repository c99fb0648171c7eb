// KafkaTransactions, the exactly-once cycle, with a test Host and a real Pipeline on librdkafka's
// mock cluster hosted in this process: prepare() initialises both producers, reads the checkpoint
// and opens a transaction; commit() writes the checkpoint and lets the slot move only once Kafka
// committed; a refused commit or a failed record aborts and rewinds; a successor fences it.
#include "kafka_transactions.hpp"

#include <gtest/gtest.h>

#include "successor.hpp"
#include "transactions_host.hpp"

namespace outbox::sinks::test {
namespace {

using outbox_test::run;
using outbox_test::spawn;
using outbox_test::Ticker;

class KafkaTransactionsTest : public TransactionsTest {
 protected:
  // prepare() to its end; the test fails when it did not end.
  void prepare() {
    ASSERT_TRUE(run(io_, transactions_->prepare(), 30s).has_value()) << "prepare() did not end";
  }
  void commit() {
    ASSERT_TRUE(run(io_, transactions_->commit(), 30s).has_value()) << "commit() did not end";
  }
};

TEST_F(KafkaTransactionsTest, PrepareInitialisesReadsNoCheckpointAndOpensATransaction) {
  start_relay();
  EXPECT_EQ(transactions_->phase(), TxnPhase::kUninitialised);
  ASSERT_NO_FATAL_FAILURE(prepare());
  EXPECT_EQ(transactions_->phase(), TxnPhase::kOpen);
  EXPECT_TRUE(waits_.empty()) << waits_.front();
  EXPECT_EQ(pipeline_->kafka_committed(), Lsn{}) << "no checkpoint: nothing is known committed";
  EXPECT_EQ(pipeline_->confirmable(), Lsn{});
  EXPECT_TRUE(checkpoints().empty());
  EXPECT_FALSE(transactions_->commit_due(true)) << "nothing handled past the last commit";
}

// The slot may be confirmed through a Kafka transaction's checkpoint only once the transaction
// is committed: while the commit's answer is held (the io thread serving other work meanwhile),
// the confirmable position stays where it was.
TEST_F(KafkaTransactionsTest, CommitWritesTheCheckpointAndMovesTheConfirmablePositionAfterIt) {
  start_relay();
  ASSERT_NO_FATAL_FAILURE(prepare());
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 3));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}));
  EXPECT_EQ(pipeline_->confirmable(), Lsn{}) << "acknowledged, but not committed in Kafka";
  ASSERT_TRUE(transactions_->commit_due(true));

  // The coordinator answers the commit after 1 s.
  rd_kafka_mock_broker_push_request_error_rtts(mock_.get(), 1, outbox_test::kEndTxnApiKey, 1,
                                               RD_KAFKA_RESP_ERR_NO_ERROR, 1000);
  std::vector<Lsn> seen_while_committing;
  Ticker ticker(io_, 50ms, [&] {
    if (committed_at_.empty()) seen_while_committing.push_back(pipeline_->confirmable());
  });
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_GE(ticker.ticks(), 10) << "the io thread stood still while the commit waited";
  for (const Lsn& l : seen_while_committing) {
    ASSERT_EQ(l, Lsn{}) << "the confirmable position moved before the Kafka commit";
  }
  ASSERT_EQ(committed_at_, std::vector<Lsn>{Lsn{0x1010}})
      << "Host::committed() once, with the position through the transaction's end";
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1010});
  EXPECT_EQ(metrics_.kafka_transactions_committed, 1u);
  EXPECT_EQ(transactions_->phase(), TxnPhase::kOpen) << "the next transaction is open";
  const std::vector<std::string> values = checkpoints();
  ASSERT_FALSE(values.empty());
  EXPECT_EQ(values.back(), "0/1010 timeline=1")
      << "the checkpoint is the end of the last PostgreSQL transaction in it";
}

// A relay started again reads the checkpoint its predecessor committed: the slot may be confirmed
// through it at once, and the stream skips what the server sends again before it.
TEST_F(KafkaTransactionsTest, ACheckpointWrittenBeforeIsSkippedPast) {
  start_relay();
  ASSERT_NO_FATAL_FAILURE(prepare());
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}));
  ASSERT_NO_FATAL_FAILURE(commit());
  ASSERT_EQ(committed_at_.size(), 1u);
  stop_relay();

  start_relay();
  produced_ = 0;
  ASSERT_NO_FATAL_FAILURE(prepare());
  EXPECT_EQ(pipeline_->kafka_committed(), Lsn{0x1010});
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x1010}) << "what the checkpoint covers is in Kafka";
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  EXPECT_EQ(produced_, 0u) << "a transaction before the checkpoint was produced again";
  ASSERT_NO_FATAL_FAILURE(transaction(0x2000, 0x2010, 2));
  EXPECT_EQ(produced_, 2u) << "the next transaction's events";
  ASSERT_TRUE(acknowledged_through(Lsn{0x2010}));
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_EQ(pipeline_->confirmable(), Lsn{0x2010});
  EXPECT_EQ(checkpoints().back(), "0/2010 timeline=1");
}

// The coordinator refuses the commit: the transaction is aborted, nothing of it is confirmed, the
// relay rewinds to the last commit and sends it again in a new transaction.
TEST_F(KafkaTransactionsTest, ACommitTheCoordinatorRefusesAbortsAndRewinds) {
  start_relay();
  ASSERT_NO_FATAL_FAILURE(prepare());
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}));
  rd_kafka_mock_broker_push_request_error_rtts(mock_.get(), 1, outbox_test::kEndTxnApiKey, 1,
                                               RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, 0);
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_EQ(aborted_, 1) << "Host::aborted() once";
  EXPECT_TRUE(committed_at_.empty());
  EXPECT_TRUE(pipeline_->rewinding());
  EXPECT_EQ(pipeline_->confirmable(), Lsn{}) << "an aborted transaction is never confirmed";
  EXPECT_EQ(metrics_.kafka_transactions_aborted, 1u);
  EXPECT_EQ(transactions_->phase(), TxnPhase::kReady);
  EXPECT_TRUE(fenced_.empty());

  rewind();
  ASSERT_NO_FATAL_FAILURE(prepare());
  ASSERT_EQ(transactions_->phase(), TxnPhase::kOpen);
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}));
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_EQ(committed_at_, std::vector<Lsn>{Lsn{0x1010}});
  EXPECT_EQ(checkpoints().back(), "0/1010 timeline=1");
}

// A record the broker refuses makes the Kafka transaction abortable: the commit aborts instead.
TEST_F(KafkaTransactionsTest, AProduceFailureAbortsAndRewinds) {
  start_relay();
  ASSERT_NO_FATAL_FAILURE(prepare());
  rd_kafka_mock_push_request_errors(mock_.get(), outbox_test::kProduceApiKey, 1,
                                    RD_KAFKA_RESP_ERR_INVALID_RECORD);
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(transactions_->commit_due(true));
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_EQ(aborted_, 1);
  EXPECT_TRUE(committed_at_.empty());
  EXPECT_TRUE(pipeline_->rewinding());
  EXPECT_EQ(pipeline_->confirmable(), Lsn{});
  EXPECT_EQ(transactions_->phase(), TxnPhase::kReady);
  EXPECT_TRUE(fenced_.empty());
}

// A successor (a relay that took the slot over) initialises the transactional.id: this relay's
// commit is refused as fenced, the cycle ends there (Host::fenced) and nothing is confirmed.
// librdkafka 2.0's mock cluster gives each InitProducerId a producer id of its own and fences
// nobody, so its coordinator is told to answer the next commit as a real one then does.
TEST_F(KafkaTransactionsTest, ASuccessorOfTheTransactionalIdFencesIt) {
  start_relay();
  ASSERT_NO_FATAL_FAILURE(prepare());
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}));
  std::unique_ptr<kafka::Producer> successor;
  ASSERT_NO_FATAL_FAILURE(initialise_successor(io_, producer_, kTransactionalId, successor));
  rd_kafka_mock_broker_push_request_error_rtts(mock_.get(), 1, outbox_test::kEndTxnApiKey, 1,
                                               RD_KAFKA_RESP_ERR_PRODUCER_FENCED, 0);
  ASSERT_NO_FATAL_FAILURE(commit());
  EXPECT_FALSE(fenced_.empty()) << "Host::fail() was not called for the fence";
  EXPECT_EQ(transactions_->phase(), TxnPhase::kFenced);
  EXPECT_TRUE(committed_at_.empty());
  EXPECT_EQ(aborted_, 0);
  EXPECT_EQ(pipeline_->confirmable(), Lsn{}) << "a fenced relay confirms nothing more";
}

}  // namespace
}  // namespace outbox::sinks::test
