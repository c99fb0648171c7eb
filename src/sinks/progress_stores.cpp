#include "progress_stores.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "kafka_progress.hpp"
#include "outbox/nats/progress_bucket.hpp"

namespace outbox::sinks {
namespace asio = boost::asio;
using asio::awaitable;
using relay::DeliveryMode;
using relay::ProgressRead;
using relay::ProgressStore;
using relay::RelayConfig;

namespace {

class KafkaProgressStore : public ProgressStore {
 public:
  KafkaProgressStore(KafkaProducers& producers, const RelayConfig& config,
                     kafka::ProducerConfig producer, Written written)
      : producers_(producers),
        config_(config),
        producer_(std::move(producer)),
        written_(std::move(written)) {}

  awaitable<ProgressRead> read(std::string key, std::chrono::milliseconds timeout) override {
    // Named, then moved: GCC 12 destroys temporaries of a coroutine call in a co_await twice.
    kafka::ConsumerConfig consumer{producer_.brokers, producer_.properties};
    // At-least-once records are not transactional: read_committed would stop at the last stable
    // offset, behind a transaction another relay (exactly-once, sharing the topic) left open
    // when it was killed, and return an older record than the one the slot was confirmed
    // through (a false "slot ahead", exit 4; FaultTest.CrashLoop on PostgreSQL 18 once).
    // Exactly-once's record is its committed checkpoint: read_committed.
    consumer.read_committed = config_.delivery == DeliveryMode::kExactlyOnce;
    std::string topic = config_.checkpoint_topic;
    ProgressRead r = co_await read_progress(worker_, std::move(consumer), std::move(topic),
                                            std::move(key), timeout);
    co_return r;
  }

  awaitable<std::string> ensure(std::chrono::milliseconds timeout) override {
    std::string topic = config_.checkpoint_topic;
    std::string error =
        co_await producers_.progress().create_compacted_topic(std::move(topic), timeout);
    co_return error;
  }

  bool write(const std::string& key, const std::string& value, std::uint64_t seq) override {
    const kafka::ProduceResult r = producers_.progress().produce(
        kafka::Record{config_.checkpoint_topic, key, value, {}, 0}, kProgressTag | seq);
    return r.status == kafka::ProduceStatus::kQueued;
  }

  bool take(const sink::Delivery& d) override {
    if ((d.opaque & kProgressTag) == 0) return false;
    written_(d.opaque & ~kProgressTag, d.ok ? std::string() : d.error);
    return true;
  }

  std::string where() const override { return "topic " + config_.checkpoint_topic; }

 private:
  KafkaProducers& producers_;
  const RelayConfig& config_;
  kafka::ProducerConfig producer_;
  Written written_;
  asio::thread_pool worker_{1};  // the consumer's blocking reads
};

// The bucket's calls, each a coroutine of its own run on the worker (parameters in its frame).
awaitable<nats::ProgressBucket::Result> bucket_get(std::shared_ptr<nats::ProgressBucket> bucket,
                                                   std::string key) {
  co_return bucket->get(key);
}
awaitable<nats::ProgressBucket::Result> bucket_open(std::shared_ptr<nats::ProgressBucket> bucket) {
  co_return bucket->open();
}

class NatsProgressStore : public ProgressStore {
 public:
  NatsProgressStore(asio::any_io_executor io, const RelayConfig& config,
                    const nats::PublisherConfig& nats, const std::string& bucket, Written written)
      : io_(std::move(io)),
        bucket_name_(bucket),
        bucket_(std::make_shared<nats::ProgressBucket>(nats, bucket, config.connect_timeout)),
        written_(std::move(written)) {}

  ~NatsProgressStore() override {
    *alive_ = false;  // reports still posted to the io thread are dropped
    worker_.join();   // a write under way ends within the connect timeout
  }

  awaitable<ProgressRead> read(std::string key, std::chrono::milliseconds) override {
    awaitable<nats::ProgressBucket::Result> task = bucket_get(bucket_, std::move(key));
    const nats::ProgressBucket::Result r =
        co_await asio::co_spawn(worker_.get_executor(), std::move(task), asio::use_awaitable);
    ProgressRead out;
    out.error = r.error;
    out.refused = r.refused;
    if (r.value) parse_progress_value(*r.value, out);
    co_return out;
  }

  awaitable<std::string> ensure(std::chrono::milliseconds) override {
    awaitable<nats::ProgressBucket::Result> task = bucket_open(bucket_);
    const nats::ProgressBucket::Result r =
        co_await asio::co_spawn(worker_.get_executor(), std::move(task), asio::use_awaitable);
    co_return r.error;
  }

  bool write(const std::string& key, const std::string& value, std::uint64_t seq) override {
    asio::post(worker_,
               [bucket = bucket_, key, value, seq, io = io_, alive = alive_, written = written_] {
                 std::string error = bucket->put(key, value).error;
                 asio::post(io, [alive, written, seq, error = std::move(error)] {
                   if (*alive) written(seq, error);
                 });
               });
    return true;
  }

  std::string where() const override { return "JetStream key-value bucket " + bucket_name_; }

 private:
  asio::any_io_executor io_;
  std::string bucket_name_;
  std::shared_ptr<nats::ProgressBucket> bucket_;
  Written written_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // read on the io thread only
  asio::thread_pool worker_{1};  // the bucket's blocking calls, one at a time, in order
};

}  // namespace

std::unique_ptr<ProgressStore> kafka_progress_store(KafkaProducers& producers,
                                                    const RelayConfig& config,
                                                    kafka::ProducerConfig producer,
                                                    ProgressStore::Written written) {
  return std::make_unique<KafkaProgressStore>(producers, config, std::move(producer),
                                              std::move(written));
}

std::unique_ptr<ProgressStore> nats_progress_store(asio::any_io_executor io,
                                                   const RelayConfig& config,
                                                   const nats::PublisherConfig& nats,
                                                   const std::string& bucket,
                                                   ProgressStore::Written written) {
  return std::make_unique<NatsProgressStore>(std::move(io), config, nats, bucket,
                                             std::move(written));
}

}  // namespace outbox::sinks
