// Kafka producer on Asio: librdkafka (idempotent, acks=all) keeps its own threads; its delivery
// reports reach the io_context thread through the main queue's io-event file descriptor, and are
// drained there with rd_kafka_poll(rk, 0) until empty. No timer polling.
// Not thread-safe: construct, produce and destroy on the io_context's thread (or hand it to a
// ProducerReaper there, which destroys it on a thread of its own). The delivery handler runs on
// that thread too; the transaction calls wait on a worker thread of the producer's own.
// librdkafka handles never leave this module.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/sink/record.hpp"

namespace outbox::kafka {

// The record vocabulary is the sink's (outbox/sink/record.hpp); these names stay for the callers.
using sink::Delivery;
using sink::ErrorKind;
using sink::Header;
using sink::ProduceResult;
using sink::ProduceStatus;
using sink::Record;
using sink::rejects_batch;

struct ProducerConfig {
  std::string brokers;
  // librdkafka properties applied after the defaults (from -X); a bad one throws ConfigError.
  std::vector<std::pair<std::string, std::string>> properties;
  // Non-empty: a transactional producer with this transactional.id (see Producer's transaction
  // calls). Set after `properties`.
  std::string transactional_id;
};

// The outcome of a transaction call, by what the caller must do next.
enum class TxnOutcome {
  kOk,
  kRetriable,  // call again (e.g. a timeout while the coordinator moves)
  kAbortable,  // abort the transaction, then start over from what was committed
  kFenced,     // a newer producer with the same transactional.id took over: stop
  kFatal,      // the producer cannot go on: a new producer must start over
};

struct TxnResult {
  TxnOutcome outcome = TxnOutcome::kOk;
  std::string error;  // librdkafka's error name and text, when not kOk
  bool ok() const { return outcome == TxnOutcome::kOk; }
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Producer {
 public:
  using DeliveryHandler = std::function<void(const Delivery&)>;
  // A fatal producer error (e.g. the idempotent producer lost its guarantees).
  using FatalHandler = std::function<void(const std::string&)>;
  // A broker refused the client's credentials: a SASL login failed, or a TLS handshake failed on
  // a certificate (the broker's untrusted, or the client's refused). librdkafka would retry for
  // ever; the text names the broker and the error, never a secret. Called on the io_context's
  // thread, possibly more than once.
  using RefusedHandler = std::function<void(const std::string&)>;

  // Throws ConfigError for a bad property (message names the property, and its value unless it
  // is a secret) and for a SASL mechanism the linked librdkafka cannot log in with (SCRAM before
  // librdkafka 2.6.1). Without `on_refused`, refusals are logged as warnings and retried.
  Producer(boost::asio::any_io_executor executor, const ProducerConfig& config,
           DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused = {});
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Queues a record; `opaque` comes back in its Delivery. Never blocks. kQueueFull: try again
  // after a delivery report has freed room. kFailed: no Delivery will come for it.
  ProduceResult produce(const Record& record, std::uint64_t opaque);

  // Serves delivery reports now (also happens by itself when librdkafka signals the fd).
  void drain();

  // Messages queued or in flight inside librdkafka.
  std::size_t queued() const;

  // Fails every record queued or in flight now, without blocking: their reports come as
  // _PURGE_QUEUE or _PURGE_INFLIGHT (ErrorKind::kTransient), and none of them is sent after this
  // call. For a rewind after a delivery that timed out: librdkafka's gapless guarantee does not
  // cover message.timeout.ms, and records queued behind the one that timed out would otherwise
  // go out when the broker comes back, ahead of it. A request already sent may still be stored.
  void purge();

  // Whether the producer raised a fatal error and accepts nothing more: a batch refused for good
  // with enable.gapless.guarantee (its records failed; no later record of its partition was
  // written), or the idempotent producer losing its sequence (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER
  // after a broker lost its producer state). Records not acknowledged were not all written.
  bool stopped() const;
  // Whether it stopped because a newer producer with the same transactional.id fenced it.
  bool fenced() const;

  // Transactions (ProducerConfig::transactional_id set). init, commit and abort wait for the
  // transaction coordinator (up to `timeout`): they run on a worker thread of this producer and
  // complete on the io_context, so the caller's thread goes on serving everything else
  // meanwhile (the replication connection's status updates above all). Delivery reports or
  // errors librdkafka serves on the worker are handed to the io_context's thread: the handlers
  // always run there. One call at a time; do not produce to this producer while one runs. Call
  // commit only with nothing queued (queued() == 0, every delivery report served).
  // begin_transaction() does not block. A kRetriable result may be retried with the same call.
  boost::asio::awaitable<TxnResult> init_transactions(std::chrono::milliseconds timeout);
  TxnResult begin_transaction();
  boost::asio::awaitable<TxnResult> commit_transaction(std::chrono::milliseconds timeout);
  boost::asio::awaitable<TxnResult> abort_transaction(std::chrono::milliseconds timeout);
  // Whether a transaction call is running on the worker thread.
  bool transaction_call_running() const;

  // Creates `topic` with cleanup.policy=compact (one partition, the broker's replication factor)
  // unless it exists. Waits up to `timeout` on the worker thread. Returns an error message,
  // empty on success. A topic the cluster lists already is not created (the relay's principal
  // needs no CREATE permission for a topic made beforehand).
  boost::asio::awaitable<std::string> create_compacted_topic(std::string topic,
                                                             std::chrono::milliseconds timeout);

 private:
  friend class ProducerReaper;
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: the fd wait's handler holds a weak reference
};

// Destroys producers away from the io_context's thread. Destroying a producer ends librdkafka's
// client (rd_kafka_destroy), which waits for its threads and for a transaction call still
// running: against a broker that does not answer, seconds, while the io_context would serve
// nothing else (PostgreSQL's keepalives, /healthz). One thread, made on first use.
class ProducerReaper {
 public:
  ProducerReaper();
  // Waits until every producer handed over is destroyed.
  ~ProducerReaper();
  ProducerReaper(const ProducerReaper&) = delete;
  ProducerReaper& operator=(const ProducerReaper&) = delete;

  // On the io_context's thread: from now on `producer` serves nothing there and calls none of
  // its handlers; its records' reports are dropped. It is destroyed on the reaper's thread.
  void retire(std::unique_ptr<Producer> producer);
  // Producers handed over and not destroyed yet.
  std::size_t pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::kafka
