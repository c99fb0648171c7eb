#include "outbox/kafka/producer.hpp"

#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "errors.hpp"
#include "outbox/common/c_handle.hpp"
#include "outbox/common/log_text.hpp"
#include "security.hpp"
#include "stall_guard.hpp"

namespace outbox::kafka {
namespace {

using common::CHandle;
using common::quoted;

void destroy_producer(rd_kafka_t* rk) {
  // Outstanding messages are purged, not waited for: the relay drains before destroying.
  rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_destroy(rk);
}

using ConfHandle = CHandle<rd_kafka_conf_t, rd_kafka_conf_destroy>;
using KafkaHandle = CHandle<rd_kafka_t, destroy_producer>;
using QueueHandle = CHandle<rd_kafka_queue_t, rd_kafka_queue_destroy>;
using TopicHandle = CHandle<rd_kafka_topic_t, rd_kafka_topic_destroy>;

std::shared_ptr<spdlog::logger> logger() {
  static auto log = [] {
    auto l = spdlog::get("kafka");
    return l ? l : spdlog::default_logger()->clone("kafka");
  }();
  return log;
}

using Partitioner = int32_t (*)(const rd_kafka_topic_t*, const void*, size_t, int32_t, void*,
                                void*);

// librdkafka's built-in partitioner of that name (the "partitioner" property), or nullptr.
Partitioner builtin_partitioner(std::string_view name) {
  static constexpr std::pair<std::string_view, Partitioner> kBuiltins[] = {
      {"random", &rd_kafka_msg_partitioner_random},
      {"consistent", &rd_kafka_msg_partitioner_consistent},
      {"consistent_random", &rd_kafka_msg_partitioner_consistent_random},
      {"murmur2", &rd_kafka_msg_partitioner_murmur2},
      {"murmur2_random", &rd_kafka_msg_partitioner_murmur2_random},
      {"fnv1a", &rd_kafka_msg_partitioner_fnv1a},
      {"fnv1a_random", &rd_kafka_msg_partitioner_fnv1a_random}};
  for (const auto& [n, fn] : kBuiltins) {
    if (n == name) return fn;
  }
  return nullptr;
}

// One topic the producer holds a handle for: the handle, what the stall guard needs (the
// partition count, which librdkafka tells only its partitioner) and the records in flight.
struct TopicEntry {
  std::string name;
  TopicHandle handle;
  int32_t partitions = 0;
  std::uint64_t in_flight = 0;  // produced, delivery report not yet served
};

// The topics the producer holds handles for, bounded: past kMaxTopicHandles the least recently
// used topic with no record in flight is closed (and opened again when an event needs it). Every
// topic's opaque is this registry, never a per-topic record: librdkafka keeps its own topic object
// after rd_kafka_topic_destroy() and hands it back, with the opaque of its first creation, when the
// name is opened again; a per-topic record freed on eviction would then be read after its free.
// The partitioner looks its topic up by name instead. Guarded by `mu`: the partitioner runs on
// librdkafka's threads too, delivery reports on the transaction worker. No librdkafka call is
// made while `mu` is held (librdkafka holds its own locks around the partitioner).
struct TopicRegistry {
  static constexpr std::size_t kMaxTopicHandles = 1000;

  Partitioner partitioner = nullptr;  // the configured built-in one, which does the choosing
  std::mutex mu;
  std::list<TopicEntry> lru;  // front: most recently used
  std::unordered_map<std::string_view, std::list<TopicEntry>::iterator> index;  // keys: names

  TopicEntry* find(std::string_view name) {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &*it->second;
  }
};

int32_t counting_partitioner(const rd_kafka_topic_t* rkt, const void* key, size_t keylen,
                             int32_t partition_cnt, void* rkt_opaque, void* msg_opaque) {
  auto* registry = static_cast<TopicRegistry*>(rkt_opaque);
  {
    std::lock_guard lock(registry->mu);
    if (TopicEntry* e = registry->find(rd_kafka_topic_name(rkt))) e->partitions = partition_cnt;
  }
  return registry->partitioner(rkt, key, keylen, partition_cnt, rkt_opaque, msg_opaque);
}

// Set on a producer's worker thread while it runs a blocking transaction call: librdkafka may
// serve the main queue there (commit flushes, which polls), and the handlers must then be handed
// to the io_context's thread instead of running on the worker.
thread_local bool t_on_worker = false;

// A Delivery that owns its bytes, to cross from the worker thread to the io_context's.
struct OwnedDelivery {
  Delivery d;
  std::string topic, error_name, key, value, id, type;
  bool has_key = false, has_value = false, has_type = false;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;

  explicit OwnedDelivery(const Delivery& from) : d(from) {
    topic = from.topic;
    error_name = from.error_name;
    has_key = from.key.has_value();
    if (has_key) key = *from.key;
    has_value = from.value.has_value();
    if (has_value) value = *from.value;
    id = from.id_header;
    has_type = from.type_header.has_value();
    if (has_type) type = *from.type_header;
    for (const Header& h : from.other_headers) {
      headers.emplace_back(
          std::string(h.name),
          h.value ? std::optional<std::string>(std::string(*h.value)) : std::nullopt);
    }
  }
  // The Delivery with its views into this object's strings.
  const Delivery& view() {
    d.topic = topic;
    d.error_name = error_name;
    d.key = has_key ? std::optional<std::string_view>(key) : std::nullopt;
    d.value = has_value ? std::optional<std::string_view>(value) : std::nullopt;
    d.id_header = id;
    d.type_header = has_type ? std::optional<std::string_view>(type) : std::nullopt;
    d.other_headers.clear();
    for (const auto& [name, v] : headers) {
      d.other_headers.push_back({name, v ? std::optional<std::string_view>(*v) : std::nullopt});
    }
    return d;
  }
};

}  // namespace

struct Producer::Impl : std::enable_shared_from_this<Producer::Impl> {
  Impl(boost::asio::any_io_executor executor, DeliveryHandler on_delivery, FatalHandler on_fatal,
       RefusedHandler on_refused)
      : executor(executor),
        event_fd(executor),
        guard_timer(executor),
        on_delivery(std::move(on_delivery)),
        on_fatal(std::move(on_fatal)),
        on_refused(std::move(on_refused)) {}

  // Declared before rk: librdkafka may call the partitioner until rk is destroyed.
  TopicRegistry registry;
  Partitioner partitioner = nullptr;  // nullptr: unknown partitioner, no stall guard
  KafkaHandle rk;
  QueueHandle main_queue;
  boost::asio::any_io_executor executor;
  // The thread the blocking transaction calls wait on (created with the first of them); joined
  // before rk is destroyed.
  std::unique_ptr<boost::asio::thread_pool> worker;
  std::atomic<bool> txn_call_running{false};
  boost::asio::posix::stream_descriptor event_fd;
  boost::asio::steady_timer guard_timer;
  DeliveryHandler on_delivery;
  FatalHandler on_fatal;
  RefusedHandler on_refused;
  TopicEntry* last_topic = nullptr;  // consecutive events mostly share a topic
  Delivery scratch;

  bool waiting = false;
  bool destroyed = false;

  // The entry of topic `name`, opened if needed; nullptr when librdkafka refuses the handle.
  // Called on the io_context's thread only (the only one that adds or removes entries).
  TopicEntry* topic(std::string_view name) {
    // Topic handles are cached: producev() by name would look the topic up on every call.
    if (last_topic != nullptr && name == last_topic->name) return last_topic;
    {
      std::lock_guard lock(registry.mu);
      auto it = registry.index.find(name);
      if (it != registry.index.end()) {
        registry.lru.splice(registry.lru.begin(), registry.lru, it->second);
        last_topic = &*it->second;
        return last_topic;
      }
    }
    rd_kafka_topic_conf_t* tconf = nullptr;
    if (partitioner != nullptr) {
      tconf = rd_kafka_default_topic_conf_dup(rk.get());
      rd_kafka_topic_conf_set_opaque(tconf, &registry);
      rd_kafka_topic_conf_set_partitioner_cb(tconf, &counting_partitioner);
    }
    TopicHandle t(rd_kafka_topic_new(rk.get(), std::string(name).c_str(), tconf));
    if (!t) return nullptr;
    rd_kafka_topic_t* handle = t.get();
    TopicHandle evicted;  // closed after the lock is released
    {
      std::lock_guard lock(registry.mu);
      if (registry.lru.size() >= TopicRegistry::kMaxTopicHandles) {
        // The least recently used topic with nothing in flight; none: the cap is exceeded until
        // reports come (the records in flight are bounded by librdkafka's queue).
        for (auto it = registry.lru.end(); it != registry.lru.begin();) {
          --it;
          if (it->in_flight != 0) continue;
          if (&*it == last_topic) last_topic = nullptr;
          evicted = std::move(it->handle);
          registry.index.erase(it->name);
          registry.lru.erase(it);
          break;
        }
      }
      registry.lru.push_front(TopicEntry{std::string(name), std::move(t), 0, 0});
      registry.index.emplace(registry.lru.front().name, registry.lru.begin());
      last_topic = &registry.lru.front();
    }
    evicted.reset();
    request_metadata(handle);
    return last_topic;
  }

  // A delivery report of a record of `name` came (any thread).
  void delivered(std::string_view name) {
    std::lock_guard lock(registry.mu);
    if (TopicEntry* e = registry.find(name); e != nullptr && e->in_flight > 0) --e->in_flight;
  }

  // librdkafka looks a topic it has not produced to up only on its one-second topic scan, which
  // delayed the first records of every new topic by up to a second. A zero timeout sends the
  // request (when a broker connection is up) without waiting; the response fills librdkafka's
  // metadata cache whether or not anyone waits for it.
  void request_metadata(rd_kafka_topic_t* t) {
    const rd_kafka_metadata_t* md = nullptr;
    if (rd_kafka_metadata(rk.get(), 0, t, &md, 0) == RD_KAFKA_RESP_ERR_NO_ERROR && md) {
      rd_kafka_metadata_destroy(md);
    }
  }

  // The stall guard (stall_guard.hpp): librdkafka busy-polls its broker thread while a stalled
  // broker leaves requests in flight; pausing the partitions stops that.
  using Clock = StallGuard::Clock;
  StallGuard guard;
  bool guard_armed = false;  // a guard_timer wait is pending

  void on_produced() {
    if (partitioner == nullptr || guard_armed) return;
    guard.start(Clock::now());
    arm_guard();
  }

  void arm_guard() {
    guard_armed = true;
    guard_timer.expires_after(StallGuard::kTick);
    guard_timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self) return;
      self->guard_armed = false;
      if (ec || self->destroyed) return;
      self->check_stall();
    });
  }

  void check_stall() {
    const auto now = Clock::now();
    const bool in_flight = rd_kafka_outq_len(rk.get()) > 0;
    const StallGuard::Action action = guard.check(now, in_flight);
    // Armed before acting: resuming flushes, which may run the delivery handler, which may
    // produce; that produce must neither restart the stall clock nor cancel this wait. With
    // nothing in flight, the next produce arms the guard again.
    if (in_flight) arm_guard();
    switch (action) {
      case StallGuard::Action::kNone:
        break;
      case StallGuard::Action::kPause:
        set_paused(true, now);
        break;
      case StallGuard::Action::kResume:
      case StallGuard::Action::kProbe:
        set_paused(false, now);
        break;
    }
  }

  // Pauses or resumes every partition this producer knows, as the guard decided.
  void set_paused(bool pause, Clock::time_point now) {
    // Topics with nothing in flight are paused too when they are still open: harmless.
    std::vector<std::pair<std::string, int32_t>> known;
    {
      std::lock_guard lock(registry.mu);
      for (const TopicEntry& e : registry.lru) {
        if (e.partitions > 0) known.emplace_back(e.name, e.partitions);
      }
    }
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(16);
    for (const auto& [name, n] : known) {
      for (int32_t p = 0; p < n; ++p) rd_kafka_topic_partition_list_add(list, name.c_str(), p);
    }
    if (pause) {
      rd_kafka_pause_partitions(rk.get(), list);
      logger()->debug(
          "event=kafka_stalled msg=\"no acknowledgement for {} ms with {} records in "
          "flight: sends paused until the broker answers\"",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - guard.last_progress())
              .count(),
          rd_kafka_outq_len(rk.get()));
    } else {
      rd_kafka_resume_partitions(rk.get(), list);
      // Resuming does not wake the broker threads (they may sleep up to a second); a flush
      // without waiting does, and serves delivery reports once.
      rd_kafka_flush(rk.get(), 0);
    }
    rd_kafka_topic_partition_list_destroy(list);
  }

  void arm() {
    if (waiting || destroyed) return;
    waiting = true;
    event_fd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                        [weak = weak_from_this()](const boost::system::error_code& ec) {
                          auto self = weak.lock();
                          if (!self) return;
                          self->waiting = false;
                          if (ec || self->destroyed) return;
                          self->drain();
                          self->arm();
                        });
  }

  void drain() {
    std::uint64_t counter = 0;
    // Reset the eventfd first: librdkafka writes again whenever the queue turns non-empty later.
    while (::read(event_fd.native_handle(), &counter, sizeof counter) > 0) {
    }
    while (rd_kafka_poll(rk.get(), 0) > 0) {
    }
    if (guard.after_reports() == StallGuard::Action::kResume) set_paused(false, Clock::now());
  }

  static void dr_cb(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    self->delivered(rd_kafka_topic_name(msg->rkt));
    if (t_on_worker) {
      // Served inside a transaction call on the worker: the handler runs on the io_context.
      Delivery d;
      fill(d, msg);
      auto owned = std::make_shared<OwnedDelivery>(d);
      boost::asio::post(self->executor, [weak = self->weak_from_this(), owned] {
        auto s = weak.lock();
        if (!s || s->destroyed) return;
        s->guard.on_report();
        s->on_delivery(owned->view());
      });
      return;
    }
    self->guard.on_report();
    fill(self->scratch, msg);
    self->on_delivery(self->scratch);
  }

  static void fill(Delivery& d, const rd_kafka_message_t* msg) {
    d.opaque = reinterpret_cast<std::uintptr_t>(msg->_private);
    d.bytes = static_cast<std::size_t>(msg->len) + msg->key_len;
    d.ok = msg->err == RD_KAFKA_RESP_ERR_NO_ERROR;
    d.kind = classify(msg->err);
    d.size_error = d.kind == ErrorKind::kSize;
    d.batch_error = rejects_batch(d.kind);
    d.partition = msg->partition;
    d.offset = msg->offset;
    d.topic = rd_kafka_topic_name(msg->rkt);
    if (!d.ok) {
      d.error_name = rd_kafka_err2name(msg->err);
      // Not rd_kafka_message_errstr(): for a failed produce it returns the payload itself.
      d.error = std::string(d.error_name) + ": " + rd_kafka_err2str(msg->err);
      d.key = msg->key ? std::optional<std::string_view>(
                             std::string_view(static_cast<const char*>(msg->key), msg->key_len))
                       : std::nullopt;
      d.value = msg->payload ? std::optional<std::string_view>(std::string_view(
                                   static_cast<const char*>(msg->payload), msg->len))
                             : std::nullopt;
      d.id_header = {};
      d.type_header.reset();
      d.other_headers.clear();
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(msg, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const void* v = nullptr;
        size_t n = 0;
        if (rd_kafka_header_get_last(hdrs, "id", &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR && v) {
          d.id_header = std::string_view(static_cast<const char*>(v), n);
        }
        if (rd_kafka_header_get_last(hdrs, "type", &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR && v) {
          d.type_header = std::string_view(static_cast<const char*>(v), n);
        }
        const char* name = nullptr;
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR; ++i) {
          const std::string_view header_name(name);
          if (header_name == "id" || header_name == "type") continue;
          d.other_headers.push_back(
              {header_name,
               v ? std::optional<std::string_view>(std::string_view(static_cast<const char*>(v), n))
                 : std::nullopt});
        }
      }
    }
  }

  // Runs `call` (a handler of the io_context's thread) there: now when this is that thread, else
  // posted (see t_on_worker).
  void on_io_thread(std::function<void(Impl&)> call) {
    if (!t_on_worker) {
      call(*this);
      return;
    }
    boost::asio::post(executor, [weak = weak_from_this(), call = std::move(call)] {
      auto s = weak.lock();
      if (s && !s->destroyed) call(*s);
    });
  }

  // Runs `blocking` on the worker thread; the caller resumes on its own executor.
  template <typename F>
  boost::asio::awaitable<std::invoke_result_t<F>> off_thread(F blocking) {
    using R = std::invoke_result_t<F>;
    if (!worker) worker = std::make_unique<boost::asio::thread_pool>(1);
    txn_call_running = true;
    struct Reset {
      std::atomic<bool>& flag;
      ~Reset() { flag = false; }
    } reset{txn_call_running};
    auto task = [call = std::move(blocking)]() -> boost::asio::awaitable<R> {
      t_on_worker = true;
      R r = call();
      t_on_worker = false;
      co_return r;
    };
    R result = co_await boost::asio::co_spawn(worker->get_executor(), std::move(task),
                                              boost::asio::use_awaitable);
    co_return result;
  }

  // One of librdkafka's blocking transaction calls (init, commit, abort) with its timeout, on the
  // worker thread (off_thread()).
  boost::asio::awaitable<TxnResult> transaction_call(rd_kafka_error_t* (*call)(rd_kafka_t*, int),
                                                     std::chrono::milliseconds timeout);

  // The io_context's half of the end: nothing more is served there and no handler is called
  // (a report or error still posted finds `destroyed`; one librdkafka serves while it ends
  // meets the empty handlers).
  void detach() {
    if (destroyed) return;
    destroyed = true;
    guard_timer.cancel();
    rd_kafka_queue_io_event_enable(main_queue.get(), -1, nullptr, 0);
    boost::system::error_code ignored;
    event_fd.close(ignored);
    on_delivery = [](const Delivery&) {};
    on_fatal = [](const std::string&) {};
    on_refused = nullptr;
  }

  // The rest, on any thread once detach() ran: a transaction call still running (its caller is
  // gone) finishes first, as rk must outlive it; then librdkafka's client ends (blocking).
  void finish() {
    if (worker) worker->join();
    main_queue.reset();
    {
      // Closed before rk is destroyed (entries closed here are no longer found by the
      // partitioner).
      std::list<TopicEntry> open;
      {
        std::lock_guard lock(registry.mu);
        registry.index.clear();
        open.swap(registry.lru);
        last_topic = nullptr;
      }
    }
    rk.reset();
  }

  static void error_cb(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
      char buf[512];
      rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof buf);
      self->on_io_thread(
          [m = std::string(rd_kafka_err2name(orig)) + ": " + buf](Impl& s) { s.on_fatal(m); });
      return;
    }
    const rd_kafka_resp_err_t code = static_cast<rd_kafka_resp_err_t>(err);
    const ClientError kind = classify_client_error(err, reason);
    if (kind != ClientError::kOther && self->on_refused) {
      // librdkafka would reconnect and be refused again, for ever. The reason names the broker
      // ("sasl_ssl://host:port/id: SASL authentication error: ...") and holds no secret.
      self->on_io_thread(
          [m = std::string(kind == ClientError::kAuthentication ? "authentication refused"
                                                                : "TLS certificate refused") +
               " (" + rd_kafka_err2name(code) + "): " + reason](Impl& s) {
            if (s.on_refused) s.on_refused(m);
          });
      return;
    }
    // Transport errors and all-brokers-down are ridden out by librdkafka's own retries.
    logger()->warn("event=kafka_error err={} reason={}",
                   rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), quoted(reason));
  }

  static void log_cb(const rd_kafka_t*, int level, const char* fac, const char* buf) {
    auto lvl = level <= 3   ? spdlog::level::err
               : level <= 4 ? spdlog::level::warn
               : level <= 6 ? spdlog::level::info
                            : spdlog::level::debug;
    // The relay sets this one on purpose (refused batches rewind instead of leaving gaps).
    if (std::string_view(fac) == "CONFWARN" &&
        std::string_view(buf).find("enable.gapless.guarantee is experimental") !=
            std::string_view::npos) {
      lvl = spdlog::level::debug;
    }
    logger()->log(lvl, "event=librdkafka facility={} msg={}", fac, quoted(buf));
  }
};

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

int timeout_ms(std::chrono::milliseconds t) { return static_cast<int>(t.count()); }

// Whether the cluster's metadata lists `topic` (all topics asked: asking for one by name may make
// a broker with auto.create.topics.enable create it, uncompacted).
bool topic_listed(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout) {
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk, 1, nullptr, &md, timeout_ms(timeout)) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md == nullptr) {
    return false;
  }
  bool found = false;
  for (int i = 0; i < md->topic_cnt && !found; ++i) {
    found = md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && topic == md->topics[i].topic;
  }
  rd_kafka_metadata_destroy(md);
  return found;
}

std::string create_compacted(rd_kafka_t* rk, const std::string& topic,
                             std::chrono::milliseconds timeout) {
  // Made beforehand (by an operator whose relay may not create topics, or by an earlier start):
  // nothing to ask of the admin API.
  if (topic_listed(rk, topic, timeout)) return {};
  char errstr[512];
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), 1, -1, errstr, sizeof errstr);
  if (nt == nullptr) return std::string("topic ") + topic + ": " + errstr;
  rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
  rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(options, timeout_ms(timeout), errstr, sizeof errstr);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &nt, 1, options, queue);
  std::string error;
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, timeout_ms(timeout) + 1000);
  if (ev == nullptr) {
    error = "creating topic " + topic + ": no answer from the broker in time";
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    error = "creating topic " + topic + ": " + rd_kafka_event_error_string(ev);
  } else {
    std::size_t n = 0;
    const rd_kafka_topic_result_t** results =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    for (std::size_t i = 0; i < n; ++i) {
      const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        error = "creating topic " + topic + ": " + rd_kafka_err2name(err) + ": " +
                (rd_kafka_topic_result_error_string(results[i])
                     ? rd_kafka_topic_result_error_string(results[i])
                     : "");
      }
    }
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(queue);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_NewTopic_destroy(nt);
  return error;
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

boost::asio::awaitable<std::string> Producer::create_compacted_topic(
    std::string topic, std::chrono::milliseconds timeout) {
  rd_kafka_t* rk = impl_->rk.get();
  auto call = [rk, name = topic, timeout] { return create_compacted(rk, name, timeout); };
  std::string error = co_await impl_->off_thread(std::move(call));
  co_return error;
}

bool Producer::fenced() const {
  char buf[256];
  const rd_kafka_resp_err_t err = rd_kafka_fatal_error(impl_->rk.get(), buf, sizeof buf);
  return err == RD_KAFKA_RESP_ERR__FENCED || err == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
         err == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
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
