// The producer's transaction calls: librdkafka's blocking ones run on the worker thread.
#include "producer_impl.hpp"

namespace outbox::kafka {
namespace {

// One librdkafka transaction error, by what the caller does next. The error is destroyed.
TxnResult txn_result(rd_kafka_error_t* error) {
  if (error == nullptr) return {};
  TxnResult r;
  r.error = std::string(rd_kafka_error_name(error)) + ": " + rd_kafka_error_string(error);
  if (rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__FENCED ||
      rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
      rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH) {
    r.outcome = TxnOutcome::kFenced;
  } else if (rd_kafka_error_is_fatal(error)) {
    r.outcome = TxnOutcome::kFatal;
  } else if (rd_kafka_error_txn_requires_abort(error)) {
    r.outcome = TxnOutcome::kAbortable;
  } else if (rd_kafka_error_is_retriable(error)) {
    r.outcome = TxnOutcome::kRetriable;
  } else {
    r.outcome = TxnOutcome::kAbortable;
  }
  rd_kafka_error_destroy(error);
  return r;
}

}  // namespace

// GCC 12 destroys a lambda's init-captures twice when the lambda is built inside a
// `co_return co_await` expression: each call builds its callable first, as a local.

boost::asio::awaitable<TxnResult> Producer::Impl::transaction_call(
    rd_kafka_error_t* (*call)(rd_kafka_t*, int), std::chrono::milliseconds timeout) {
  auto blocking = [handle = rk.get(), call, timeout] {
    return txn_result(call(handle, timeout_ms(timeout)));
  };
  TxnResult r = co_await off_thread(std::move(blocking));
  co_return r;
}

boost::asio::awaitable<TxnResult> Producer::init_transactions(std::chrono::milliseconds timeout) {
  return impl_->transaction_call(&rd_kafka_init_transactions, timeout);
}

TxnResult Producer::begin_transaction() {
  return txn_result(rd_kafka_begin_transaction(impl_->rk.get()));
}

boost::asio::awaitable<TxnResult> Producer::commit_transaction(std::chrono::milliseconds timeout) {
  return impl_->transaction_call(&rd_kafka_commit_transaction, timeout);
}

boost::asio::awaitable<TxnResult> Producer::abort_transaction(std::chrono::milliseconds timeout) {
  return impl_->transaction_call(&rd_kafka_abort_transaction, timeout);
}

bool Producer::transaction_call_running() const { return impl_->txn_call_running; }
bool Producer::fenced() const {
  char buf[256];
  const rd_kafka_resp_err_t err = rd_kafka_fatal_error(impl_->rk.get(), buf, sizeof buf);
  return err == RD_KAFKA_RESP_ERR__FENCED || err == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
         err == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
}

}  // namespace outbox::kafka
