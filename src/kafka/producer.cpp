#include "outbox/kafka/producer.hpp"

#include <sys/eventfd.h>

#include "producer_impl.hpp"

namespace outbox::kafka {

Producer::Producer(boost::asio::any_io_executor executor, const ProducerConfig& config,
                   DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused)
    : impl_(std::make_shared<Impl>(executor, std::move(on_delivery), std::move(on_fatal),
                                   std::move(on_refused))) {
  ConfHandle conf(rd_kafka_conf_new());
  auto set = [&](const std::string& k, const std::string& v) { set_property(conf.get(), k, v); };
  // Defaults: no loss and no reordering (idempotence implies acks=all, bounded in-flight, retries
  // without end), Java-compatible partitioning, and no delivery deadline: a long broker outage is
  // waited out instead of failing records, which would break per-key order.
  set("bootstrap.servers", config.brokers);
  set("enable.idempotence", "true");
  set("acks", "all");
  set("partitioner", "murmur2_random");
  set("message.timeout.ms", "0");
  set("linger.ms", "5");
  set("batch.num.messages", "10000");
  set("queue.buffering.max.messages", "1000000");
  set("queue.buffering.max.kbytes", "1048576");
  set("compression.codec", "lz4");
  set("log.connection.close", "false");
  for (const auto& [k, v] : config.properties) set(k, v);
  if (!config.transactional_id.empty()) set("transactional.id", config.transactional_id);
  refuse_unsupported_sasl(conf.get());

  // The stall guard counts partitions in a partitioner that hands over to the configured one.
  if (rd_kafka_topic_conf_t* tconf = rd_kafka_conf_get_default_topic_conf(conf.get())) {
    std::array<char, 64> name{};
    std::size_t size = name.size();
    if (rd_kafka_topic_conf_get(tconf, "partitioner", name.data(), &size) == RD_KAFKA_CONF_OK) {
      impl_->partitioner = builtin_partitioner(name.data());
      impl_->registry.partitioner = impl_->partitioner;
    }
  }
  rd_kafka_conf_set_opaque(conf.get(), impl_.get());
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &Impl::dr_cb);
  rd_kafka_conf_set_error_cb(conf.get(), &Impl::error_cb);
  rd_kafka_conf_set_log_cb(conf.get(), &Impl::log_cb);

  // rd_kafka_new takes ownership of conf only on success.
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) throw ConfigError(std::string("Kafka producer: ") + errstr);
  conf.release();
  impl_->rk.reset(rk);

  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  impl_->event_fd.assign(fd);
  impl_->main_queue.reset(rd_kafka_queue_get_main(rk));
  static constexpr std::uint64_t kOne = 1;
  rd_kafka_queue_io_event_enable(impl_->main_queue.get(), fd, &kOne, sizeof kOne);
  impl_->arm();
}

Producer::~Producer() {
  if (!impl_) return;  // retired (ProducerReaper)
  impl_->detach();
  impl_->finish();
}

ProduceResult Producer::produce(const Record& record, std::uint64_t opaque) {
  TopicEntry* entry = impl_->topic(record.topic);
  if (entry == nullptr) {
    return {ProduceStatus::kFailed,
            std::string("cannot create topic handle: ") + rd_kafka_err2str(rd_kafka_last_error())};
  }
  rd_kafka_headers_t* headers = rd_kafka_headers_new(record.headers.size());
  for (const Header& h : record.headers) {
    rd_kafka_header_add(headers, h.name.data(), static_cast<ssize_t>(h.name.size()),
                        h.value ? h.value->data() : nullptr,
                        h.value ? static_cast<ssize_t>(h.value->size()) : 0);
  }
  // Locals: the producev macros cast their arguments and do not take conditional expressions.
  void* value = record.value ? const_cast<char*>(record.value->data()) : nullptr;
  std::size_t value_len = record.value ? record.value->size() : 0;
  const void* key = record.key ? record.key->data() : nullptr;
  std::size_t key_len = record.key ? record.key->size() : 0;
  {
    // Before producev: its report may be served on the transaction worker at once.
    std::lock_guard lock(impl_->registry.mu);
    ++entry->in_flight;
  }
  rd_kafka_resp_err_t err = rd_kafka_producev(
      impl_->rk.get(), RD_KAFKA_V_RKT(entry->handle.get()), RD_KAFKA_V_PARTITION(record.partition),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(value, value_len),
      RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_TIMESTAMP(record.timestamp_ms),
      RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<std::uintptr_t>(opaque))),
      RD_KAFKA_V_END);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    // A record with its own partition bypasses the partitioner, which counts the partitions the
    // stall guard pauses: count that one here (the count only grows).
    if (record.partition >= 0 && impl_->partitioner != nullptr) {
      std::lock_guard lock(impl_->registry.mu);
      entry->partitions = std::max(entry->partitions, record.partition + 1);
    }
    impl_->on_produced();
    return {ProduceStatus::kQueued, {}, false};
  }
  // On failure the headers were not taken over and no delivery report will come.
  {
    std::lock_guard lock(impl_->registry.mu);
    --entry->in_flight;
  }
  rd_kafka_headers_destroy(headers);
  if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) return {ProduceStatus::kQueueFull, {}, false};
  return {ProduceStatus::kFailed,
          std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err),
          classify(err) == ErrorKind::kSize};
}

void Producer::drain() { impl_->drain(); }

bool Producer::stopped() const {
  char buf[256];
  return rd_kafka_fatal_error(impl_->rk.get(), buf, sizeof buf) != RD_KAFKA_RESP_ERR_NO_ERROR;
}
std::size_t Producer::queued() const {
  return static_cast<std::size_t>(rd_kafka_outq_len(impl_->rk.get()));
}

void Producer::purge() {
  rd_kafka_purge(impl_->rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
}

struct ProducerReaper::Impl {
  std::unique_ptr<boost::asio::thread_pool> thread;
  std::atomic<std::size_t> pending{0};
};

ProducerReaper::ProducerReaper() : impl_(std::make_unique<Impl>()) {}

ProducerReaper::~ProducerReaper() {
  if (impl_->thread) impl_->thread->join();
}

void ProducerReaper::retire(std::unique_ptr<Producer> producer) {
  if (!producer || !producer->impl_) return;
  producer->impl_->detach();
  if (!impl_->thread) impl_->thread = std::make_unique<boost::asio::thread_pool>(1);
  ++impl_->pending;
  boost::asio::post(*impl_->thread,
                    [impl = std::move(producer->impl_), &pending = impl_->pending]() mutable {
                      impl->finish();
                      impl.reset();
                      --pending;
                    });
}

std::size_t ProducerReaper::pending() const { return impl_->pending; }

}  // namespace outbox::kafka
