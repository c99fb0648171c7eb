// Private to src/kafka: Producer::Impl, shared by producer.cpp (the producer proper),
// transactions.cpp (the transaction calls) and topic_admin.cpp (compacted topic creation).
#pragma once

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
#include "outbox/kafka/producer.hpp"
#include "security.hpp"
#include "stall_guard.hpp"
#include "topic_registry.hpp"

namespace outbox::kafka {

using common::CHandle;
using common::quoted;

inline void destroy_producer(rd_kafka_t* rk) {
  // Outstanding messages are purged, not waited for: the relay drains before destroying.
  rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_destroy(rk);
}

using ConfHandle = CHandle<rd_kafka_conf_t, rd_kafka_conf_destroy>;
using KafkaHandle = CHandle<rd_kafka_t, destroy_producer>;
using QueueHandle = CHandle<rd_kafka_queue_t, rd_kafka_queue_destroy>;

inline std::shared_ptr<spdlog::logger> logger() {
  static auto log = [] {
    auto l = spdlog::get("kafka");
    return l ? l : spdlog::default_logger()->clone("kafka");
  }();
  return log;
}

// Set on a producer's worker thread while it runs a blocking transaction call: librdkafka may
// serve the main queue there (commit flushes, which polls), and the handlers must then be handed
// to the io_context's thread instead of running on the worker.
inline thread_local bool t_on_worker = false;

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

inline int timeout_ms(std::chrono::milliseconds t) { return static_cast<int>(t.count()); }

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

}  // namespace outbox::kafka
