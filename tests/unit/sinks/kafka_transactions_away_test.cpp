// KafkaTransactions::prepare() while the broker is away: it waits, says so
// (Host::waiting_for_broker) and tries again with backoff, on the io thread's terms: a timer on
// the same io_context keeps firing throughout (the relay goes on answering PostgreSQL). Each try
// waits up to KafkaTransactions::kTxnTimeout (30 s) for the coordinator: label fault, not unit.
#include <gtest/gtest.h>

#include "kafka_transactions.hpp"
#include "transactions_host.hpp"

namespace outbox::sinks::test {
namespace {

using outbox_test::spawn;
using outbox_test::Ticker;

TEST_F(TransactionsTest, PrepareWaitsForABrokerThatIsAwayWithoutBlockingTheIoThread) {
  rd_kafka_mock_broker_set_down(mock_.get(), 1);
  start_relay();
  const auto started = Clock::now();
  Ticker ticker(io_, 100ms);
  auto prepared = spawn(io_, transactions_->prepare());
  ASSERT_TRUE(run_until(
      io_, [&] { return !waits_.empty() || prepared->done; }, 90s))
      << "prepare() neither ended nor said it waits within 90 s";
  ASSERT_FALSE(prepared->done) << "prepare() ended while the broker was away";
  EXPECT_NE(waits_.front().find("waiting for Kafka"), std::string::npos) << waits_.front();
  const double away_s = std::chrono::duration<double>(Clock::now() - started).count();
  RecordProperty("seconds_until_waiting_for_kafka", std::to_string(away_s));
  // One tick every 100 ms while prepare() waited; a blocked io thread would show none.
  EXPECT_GE(ticker.ticks(), static_cast<int>(away_s * 10 / 2))
      << "the io thread stood still while prepare() waited (" << ticker.ticks() << " ticks in "
      << away_s << " s)";
  EXPECT_EQ(transactions_->phase(), TxnPhase::kUninitialised) << "nothing ready while away";

  rd_kafka_mock_broker_set_up(mock_.get(), 1);
  ASSERT_TRUE(run_until(
      io_, [&] { return prepared->done; }, 90s))
      << "prepare() did not end within 90 s of the broker's return";
  if (prepared->error) std::rethrow_exception(prepared->error);
  EXPECT_EQ(transactions_->phase(), TxnPhase::kOpen);
  EXPECT_TRUE(fenced_.empty());

  // Ready: a transaction goes through.
  ASSERT_NO_FATAL_FAILURE(transaction(0x1000, 0x1010, 2));
  ASSERT_TRUE(acknowledged_through(Lsn{0x1010}, 30s));
  ASSERT_TRUE(outbox_test::run(io_, transactions_->commit(), 30s).has_value());
  EXPECT_EQ(committed_at_, std::vector<Lsn>{Lsn{0x1010}});
}

}  // namespace
}  // namespace outbox::sinks::test
