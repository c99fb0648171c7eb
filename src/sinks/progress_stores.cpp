#include "progress_stores.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "kafka_progress.hpp"
#include "outbox/nats/progress_bucket.hpp"
#include "outbox/pg/progress_table.hpp"

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

// The table's calls, each a coroutine of its own run on the worker (parameters in its frame).
awaitable<pg::ProgressTable::Result> table_get(std::shared_ptr<pg::ProgressTable> table,
                                               std::string key) {
  co_return table->get(key);
}
awaitable<pg::ProgressTable::Result> table_open(std::shared_ptr<pg::ProgressTable> table) {
  co_return table->open();
}

// While only keepalives move the position, a record at most this often: each write makes WAL
// that the server's next keepalive confirms (ProgressStore::idle_interval()).
constexpr std::chrono::seconds kPgIdleInterval{1};

class PgProgressStore : public ProgressStore {
 public:
  PgProgressStore(asio::any_io_executor io, const RelayConfig& config,
                  const ProgressTableName& table, std::string sink, Written written)
      : io_(std::move(io)),
        table_(std::make_shared<pg::ProgressTable>(
            config.conninfo, table.schema.empty() ? config.mapper.schema : table.schema,
            table.table, config.connect_timeout)),
        sink_(std::move(sink)),
        written_(std::move(written)) {}

  ~PgProgressStore() override {
    *alive_ = false;  // reports still posted to the io thread are dropped
    worker_.join();   // a write under way ends within the statement timeout
  }

  awaitable<ProgressRead> read(std::string key, std::chrono::milliseconds) override {
    awaitable<pg::ProgressTable::Result> task = table_get(table_, std::move(key));
    const pg::ProgressTable::Result r =
        co_await asio::co_spawn(worker_.get_executor(), std::move(task), asio::use_awaitable);
    ProgressRead out;
    out.error = r.error;
    out.refused = r.refused;
    out.written_ms = r.written_ms;
    if (r.value) parse_progress_value(*r.value, out);
    co_return out;
  }

  awaitable<std::string> ensure(std::chrono::milliseconds) override {
    awaitable<pg::ProgressTable::Result> task = table_open(table_);
    const pg::ProgressTable::Result r =
        co_await asio::co_spawn(worker_.get_executor(), std::move(task), asio::use_awaitable);
    co_return r.error;
  }

  bool write(const std::string& key, const std::string& value, std::uint64_t seq) override {
    asio::post(worker_,
               [table = table_, key, value, seq, io = io_, alive = alive_, written = written_] {
                 std::string error = table->put(key, value).error;
                 asio::post(io, [alive, written, seq, error = std::move(error)] {
                   if (*alive) written(seq, error);
                 });
               });
    return true;
  }

  std::string where() const override { return "PostgreSQL table " + table_->name(); }

  std::chrono::milliseconds idle_interval() const override { return kPgIdleInterval; }

  // The broker cannot be read back: nothing tells which events of the gap it holds, so every one
  // goes again (docs/aws.md, "When the slot is lost").
  std::string repair_advice(const std::string& from) const override {
    return sink_ + " cannot be read back, so every event committed since the time of " + from +
           " (the record's written_at in " + table_->name() +
           ", less a margin) must be sent again: start the relay once with --accept-slot-loss "
           "(it makes a new slot and streams), then send those outbox rows again, e.g. by "
           "deleting and inserting them anew in one transaction (docs/aws.md, \"When the slot "
           "is lost\"); consumers deduplicate by the id";
  }

 private:
  asio::any_io_executor io_;
  std::shared_ptr<pg::ProgressTable> table_;
  std::string sink_;
  Written written_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // read on the io thread only
  asio::thread_pool worker_{1};  // the table's blocking calls, one at a time, in order
};

}  // namespace

std::unique_ptr<ProgressStore> pg_progress_store(asio::any_io_executor io,
                                                 const RelayConfig& config,
                                                 const ProgressTableName& table, std::string sink,
                                                 ProgressStore::Written written) {
  return std::make_unique<PgProgressStore>(std::move(io), config, table, std::move(sink),
                                           std::move(written));
}

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
