#include "outbox/nats/publisher.hpp"

#include <nats/nats.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "errors.hpp"
#include "session.hpp"

namespace outbox::nats {

using namespace detail;

namespace {

bool has_line_break(std::string_view s) {
  return s.find_first_of("\r\n") != std::string_view::npos;
}

}  // namespace

// ---- the publisher ------------------------------------------------------------------------

struct Publisher::Impl : std::enable_shared_from_this<Publisher::Impl> {
  // What produce() copied, for the failure report and the dead-letter record.
  struct Entry {
    std::uint64_t opaque = 0;
    std::size_t bytes = 0;
    Clock::time_point sent;
    std::string subject;
    std::optional<std::string> key;
    std::optional<std::string> value;
    std::string id;
    std::optional<std::string> type;
    std::vector<std::pair<std::string, std::optional<std::string>>> others;
  };

  // An acknowledgement as nats.c reported it, copied on its thread.
  struct Ack {
    MsgPtr msg;
    bool ok = false;
    bool duplicate = false;
    std::uint64_t sequence = 0;
    natsStatus status = NATS_OK;
    jsErrCode code = static_cast<jsErrCode>(0);
    std::string text;
  };

  boost::asio::any_io_executor executor;
  DeliveryHandler on_delivery;
  FatalHandler on_fatal;
  RefusedHandler on_refused;
  std::size_t max_in_flight = 0;
  std::chrono::milliseconds ack_timeout{};
  std::string urls;

  OptionsPtr options;
  ConnectionPtr connection;
  JsPtr js;
  std::uint64_t registry_id = 0;

  std::uint64_t next_seq = 0;
  std::map<std::uint64_t, Entry> in_flight;  // by publish order
  std::unordered_map<const natsMsg*, std::uint64_t> by_msg;
  bool stopped = false;
  bool connected = false;
  bool ever_connected = false;
  // The connection and the JetStream context are set (by the thread that connected): read them
  // on the io thread only once this is true.
  std::atomic<bool> ready{false};
  // Retired (Publisher::retire, the destructor): serves nothing more on the io thread and calls
  // none of its handlers; what nats.c still reports is dropped.
  bool detached = false;
  boost::asio::steady_timer ack_timer;
  bool ack_timer_armed = false;
  boost::asio::steady_timer connect_timer;

  explicit Impl(boost::asio::any_io_executor ex) : executor(ex), ack_timer(ex), connect_timer(ex) {}

  // nats.c calls back on its own threads with the closure it was given: an id into this
  // registry, so that a callback arriving after the publisher is gone finds nothing.
  struct Bridge {
    boost::asio::any_io_executor executor;
    std::weak_ptr<Impl> impl;
  };
  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<std::uint64_t, Bridge>& registry() {
    static std::unordered_map<std::uint64_t, Bridge> r;
    return r;
  }
  static std::optional<Bridge> find(void* closure) {
    std::lock_guard lock(registry_mutex());
    auto it = registry().find(reinterpret_cast<std::uintptr_t>(closure));
    if (it == registry().end()) return std::nullopt;
    return it->second;
  }

  // ---- nats.c's threads ----
  static void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    Ack ack;
    ack.msg.reset(msg);  // ours from here on
    if (pa != nullptr) {
      ack.ok = true;
      ack.duplicate = pa->Duplicate;
      ack.sequence = pa->Sequence;
    } else if (pae != nullptr) {
      ack.status = pae->Err;
      ack.code = pae->ErrCode;
      if (pae->ErrText != nullptr) ack.text = pae->ErrText;
    }
    auto bridge = find(closure);
    if (!bridge) return;  // the publisher is gone: the message is destroyed here
    boost::asio::post(bridge->executor, [w = bridge->impl, ack = std::move(ack)]() mutable {
      auto self = w.lock();
      if (self && !self->detached) self->handle_ack(std::move(ack));
    });
  }

  static void post_connection_event(natsConnection* nc, void* closure, bool up) {
    auto bridge = find(closure);
    if (!bridge) return;
    std::string text;
    natsStatus status = NATS_OK;
    if (!up && nc != nullptr) {
      const char* last = nullptr;
      status = natsConnection_GetLastError(nc, &last);
      if (last != nullptr && *last != '\0') text = last;
    }
    boost::asio::post(bridge->executor, [w = bridge->impl, up, status, text]() {
      auto self = w.lock();
      if (!self || self->detached) return;
      if (up) {
        self->connected = true;
        self->ever_connected = true;
        logger()->info("connected to NATS servers={}", self->urls);
      } else {
        self->connected = false;
        self->connection_lost(status, text, "lost");
      }
    });
  }
  static void on_connected(natsConnection* nc, void* closure) {
    post_connection_event(nc, closure, true);
  }
  static void on_disconnected(natsConnection* nc, void* closure) {
    post_connection_event(nc, closure, false);
  }
  static void on_error(natsConnection* nc, natsSubscription*, natsStatus err, void* closure) {
    // Asynchronous errors: a publish the server's permissions refuse is reported here, and the
    // connection stays up; its acknowledgement never comes. It stops the publisher.
    auto bridge = find(closure);
    if (!bridge) return;
    const char* last = nullptr;
    natsConnection_GetLastError(nc, &last);
    std::string text = last != nullptr ? last : status_text(err);
    boost::asio::post(bridge->executor, [w = bridge->impl, err, text]() {
      auto self = w.lock();
      if (self && !self->detached) self->connection_lost(err, text, "reported an error");
    });
  }

  // ---- the io thread ----
  void handle_ack(Ack ack) {
    auto it = by_msg.find(ack.msg.get());
    if (it == by_msg.end()) return;  // already failed by a stop
    auto entry_it = in_flight.find(it->second);
    Classified c = ack.ok ? Classified{} : classify_ack_error(ack.status, ack.code);
    if (c.kind == sink::ErrorKind::kTransient) {
      // No acknowledgement (a timeout inside the client): whether the server stored it, and
      // what comes after it, is unknown. Stopped first, so that its failure reads as a rewind.
      stop("publish to " + entry_it->second.subject +
           " not acknowledged: " + (ack.text.empty() ? status_text(ack.status) : ack.text));
      return;
    }
    by_msg.erase(it);
    Entry entry = std::move(entry_it->second);
    in_flight.erase(entry_it);
    if (ack.ok) {
      sink::Delivery d;
      d.opaque = entry.opaque;
      d.bytes = entry.bytes;
      d.topic = entry.subject;
      // The stream sequence (of the stored original, for a duplicate).
      d.offset = static_cast<std::int64_t>(ack.sequence);
      d.id_header = entry.id;
      on_delivery(d);
      return;
    }
    std::string text = c.name + ": ";
    if (c.name == "NO_STREAM") {
      text += "no JetStream stream captures subject " + entry.subject;
    } else {
      text += ack.text.empty() ? status_text(ack.status) : ack.text;
    }
    fail_entry(entry, c, text);
  }

  void fail_entry(const Entry& entry, const Classified& c, const std::string& text) {
    sink::Delivery d;
    d.opaque = entry.opaque;
    d.bytes = entry.bytes;
    d.ok = false;
    d.kind = c.kind;
    d.size_error = c.kind == sink::ErrorKind::kSize;
    d.batch_error = sink::rejects_batch(c.kind);
    d.error_name = c.name;
    d.error = text;
    d.topic = entry.subject;
    if (entry.key) d.key = *entry.key;
    if (entry.value) d.value = *entry.value;
    d.id_header = entry.id;
    if (entry.type) d.type_header = *entry.type;
    for (const auto& [n, v] : entry.others) {
      d.other_headers.push_back({n, v ? std::optional<std::string_view>(*v) : std::nullopt});
    }
    on_delivery(d);
  }

  void connection_lost(natsStatus status, const std::string& text, const char* what) {
    if (stopped) return;
    const Classified c = classify_status(status);
    std::string why = std::string("NATS connection to ") + urls + " " + what;
    if (!text.empty()) why += ": " + text;
    // Connecting is retried for ever while the servers cannot be reached; nats.c gives up (and
    // closes) before the first connection only when the servers refused it: a refused login or
    // certificate (its last error then says only "No server available").
    const bool refused = c.kind == sink::ErrorKind::kAuthorization || !ever_connected ||
                         text.find("Authorization") != std::string::npos ||
                         text.find("Permissions") != std::string::npos;
    if (!ever_connected) {
      why = "NATS servers " + urls + " refused the connection (credentials or certificate?): " +
            (text.empty() ? status_text(status) : text);
    }
    if (refused && on_refused) on_refused(why);
    stop(why);
  }

  // Stops: nothing more is published; every publish not acknowledged fails, in order.
  void stop(const std::string& why) {
    if (stopped) return;
    stopped = true;
    ack_timer.cancel();
    connect_timer.cancel();
    auto keep = shared_from_this();  // a handler may drop the Publisher
    logger()->warn("NATS publisher stopped in_flight={} reason=\"{}\"", in_flight.size(), why);
    if (on_fatal) on_fatal(why);
    auto pending = std::move(in_flight);
    in_flight.clear();
    by_msg.clear();
    const Classified c{sink::ErrorKind::kTransient, "CONNECTION_LOST"};
    for (auto& [seq, entry] : pending) fail_entry(entry, c, why);
  }

  void arm_ack_timer() {
    if (ack_timer_armed || stopped || in_flight.empty()) return;
    ack_timer_armed = true;
    ack_timer.expires_at(in_flight.begin()->second.sent + ack_timeout);
    ack_timer.async_wait([w = weak_from_this()](const boost::system::error_code&) {
      auto self = w.lock();
      if (!self || self->detached) return;
      self->ack_timer_armed = false;
      if (self->stopped || self->in_flight.empty()) return;
      const auto& oldest = self->in_flight.begin()->second;
      if (Clock::now() - oldest.sent >= self->ack_timeout) {
        self->stop("no acknowledgement from JetStream within " +
                   std::to_string(self->ack_timeout.count()) + " ms (subject " + oldest.subject +
                   (self->connected ? ")" : ", not connected)"));
        return;
      }
      self->arm_ack_timer();
    });
  }

  // ---- connecting: any one thread ----
  // The first connection attempt (it waits on the network: up to the connect timeout) and the
  // JetStream context; nats.c retries in the background when it fails. Throws ConfigError when
  // the servers cannot be tried at all. True when connected now.
  bool connect_now() {
    natsConnection* nc = nullptr;
    natsStatus s = natsConnection_Connect(&nc, options.get());
    if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
      unregister();
      throw ConfigError("NATS connect to " + urls + ": " + last_error(s));
    }
    connection.reset(nc);
    const bool up = s == NATS_OK;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.AckHandler = &Impl::on_ack;
    jo.PublishAsync.AckHandlerClosure = closure();
    // The window is ours (max_in_flight); nats.c's own limit must never make a publish wait.
    jo.PublishAsync.MaxPending = static_cast<int64_t>(max_in_flight) * 2 + 16;
    jsCtx* js_ctx = nullptr;
    s = natsConnection_JetStream(&js_ctx, nc, &jo);
    if (s != NATS_OK) {
      unregister();
      throw ConfigError("NATS JetStream context: " + last_error(s));
    }
    js.reset(js_ctx);
    ready.store(true, std::memory_order_release);
    return up;
  }

  // ---- the io thread ----
  // The first attempt's outcome: up, or the wait for the background attempts (ack_timeout).
  void first_attempt(bool up) {
    if (stopped || detached) return;
    if (up) {
      connected = true;
      ever_connected = true;
      logger()->info("connected to NATS servers={}", urls);
      return;
    }
    connect_timer.expires_after(ack_timeout);
    connect_timer.async_wait([w = weak_from_this()](const boost::system::error_code&) {
      auto self = w.lock();
      if (!self || self->detached || self->connected || self->stopped) return;
      self->stop("not connected to NATS servers=" + self->urls + " within " +
                 std::to_string(self->ack_timeout.count()) + " ms");
    });
  }

  void* closure() const {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(registry_id));
  }
  void unregister() {
    std::lock_guard lock(registry_mutex());
    registry().erase(registry_id);
  }
  // On the io thread: nothing more is served there (see `detached`).
  void detach() {
    unregister();
    detached = true;
    ack_timer.cancel();
    connect_timer.cancel();
  }
  // Anywhere after detach(): the JetStream context first (it holds the connection), then the
  // connection (closing it may wait on a server that does not answer).
  void finish() {
    js.reset();
    connection.reset();
  }
};

Publisher::Publisher(boost::asio::any_io_executor executor, const PublisherConfig& config,
                     DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused,
                     std::optional<boost::asio::any_io_executor> connector)
    : impl_(std::make_shared<Impl>(executor)) {
  if (config.max_in_flight == 0) throw ConfigError("NATS: max_in_flight must be at least 1");
  impl_->on_delivery = std::move(on_delivery);
  impl_->on_fatal = std::move(on_fatal);
  impl_->on_refused = std::move(on_refused);
  impl_->max_in_flight = config.max_in_flight;
  impl_->ack_timeout = config.ack_timeout;
  impl_->urls = config.urls;
  impl_->options = make_options(config);
  {
    std::lock_guard lock(Impl::registry_mutex());
    static std::uint64_t next_id = 0;
    impl_->registry_id = ++next_id;
    Impl::registry().emplace(impl_->registry_id, Impl::Bridge{executor, impl_});
  }
  void* closure = impl_->closure();
  natsOptions* o = impl_->options.get();
  // One connection per publisher, never reconnected: after a cut, what the old connection
  // buffered must not reach the server behind what the cut lost (order). The caller makes a
  // new publisher. Connecting at start is retried for ever, in the background.
  check(natsOptions_SetAllowReconnect(o, false), "NATS options");
  check(natsOptions_SetMaxReconnect(o, -1), "NATS options");
  check(natsOptions_SetRetryOnFailedConnect(o, true, &Impl::on_connected, closure), "NATS options");
  check(natsOptions_SetDisconnectedCB(o, &Impl::on_disconnected, closure), "NATS options");
  check(natsOptions_SetClosedCB(o, &Impl::on_disconnected, closure), "NATS options");
  check(natsOptions_SetErrorHandler(o, &Impl::on_error, closure), "NATS options");
  if (!connector) {
    impl_->first_attempt(impl_->connect_now());
    return;
  }
  // The first attempt on the connector's thread; its outcome on the io thread.
  boost::asio::post(*connector, [impl = impl_]() {
    bool up = false;
    std::string error;
    try {
      up = impl->connect_now();
    } catch (const ConfigError& e) {
      error = e.what();
    }
    boost::asio::post(impl->executor, [w = std::weak_ptr<Impl>(impl), up, error]() {
      auto self = w.lock();
      if (!self || self->detached) return;
      if (error.empty()) {
        self->first_attempt(up);
      } else {
        self->connection_lost(NATS_ERR, error, "could not be tried");
      }
    });
  });
}

Publisher::~Publisher() {
  if (!impl_) return;  // retired
  impl_->detach();
  impl_->finish();
}

void Publisher::retire(std::unique_ptr<Publisher> publisher, boost::asio::any_io_executor worker) {
  if (!publisher || !publisher->impl_) return;
  publisher->impl_->detach();
  boost::asio::post(worker, [impl = std::move(publisher->impl_)]() mutable {
    impl->finish();
    impl.reset();
  });
}

sink::ProduceResult Publisher::produce(const sink::Record& record, std::uint64_t opaque) {
  Impl& im = *impl_;
  if (im.stopped) {
    return {sink::ProduceStatus::kFailed, "NATS publisher stopped", false};
  }
  // Not connected yet: nats.c would refuse headers (it does not know yet that the server takes
  // them). The caller waits as for a full window; the publisher stops if the connection does
  // not come within ack_timeout.
  if (!im.connected || !im.ready.load(std::memory_order_acquire) ||
      im.in_flight.size() >= im.max_in_flight) {
    return {sink::ProduceStatus::kQueueFull, {}, false};
  }
  Impl::Entry entry;
  entry.opaque = opaque;
  entry.bytes = (record.key ? record.key->size() : 0) + (record.value ? record.value->size() : 0);
  entry.subject = std::string(record.topic);
  if (record.key) entry.key = std::string(*record.key);
  if (record.value) entry.value = std::string(*record.value);
  for (const auto& h : record.headers) {
    if (h.name == "id" && h.value) {
      entry.id = std::string(*h.value);
    } else if (h.name == "type" && h.value) {
      entry.type = std::string(*h.value);
    } else {
      entry.others.emplace_back(std::string(h.name),
                                h.value ? std::optional<std::string>(*h.value) : std::nullopt);
    }
  }
  natsMsg* raw = nullptr;
  natsStatus s = natsMsg_Create(&raw, entry.subject.c_str(), nullptr,
                                entry.value ? entry.value->data() : nullptr,
                                entry.value ? static_cast<int>(entry.value->size()) : 0);
  if (s != NATS_OK) {
    return {sink::ProduceStatus::kFailed,
            "INVALID_SUBJECT: " + last_error(s) + " (subject '" + entry.subject + "')", false};
  }
  MsgPtr msg(raw);
  // Headers in the record's order. NATS has no null header, and nats.c (3.4) reads an empty
  // value back as the next header line: a header with a NULL or empty value is left out.
  for (const auto& h : record.headers) {
    if (!h.value || h.value->empty()) continue;
    const std::string name(h.name);
    const std::string value(*h.value);
    if (name.empty() || has_line_break(name) || has_line_break(value) ||
        name.find(':') != std::string::npos) {
      return {sink::ProduceStatus::kFailed,
              "INVALID_HEADER: header '" + name +
                  "' cannot be a NATS header (empty name, ':' in "
                  "the name, or a line break)",
              false};
    }
    s = natsMsgHeader_Add(msg.get(), name.c_str(), value.c_str());
    if (s != NATS_OK)
      return {sink::ProduceStatus::kFailed, "INVALID_HEADER: " + last_error(s), false};
  }
  if (record.key) {
    if (has_line_break(*record.key)) {
      return {sink::ProduceStatus::kFailed, "INVALID_HEADER: the key has a line break", false};
    }
    s = natsMsgHeader_Set(msg.get(), "key", entry.key->c_str());
    if (s != NATS_OK)
      return {sink::ProduceStatus::kFailed, "INVALID_HEADER: " + last_error(s), false};
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  if (!entry.id.empty()) po.MsgId = entry.id.c_str();
  const natsMsg* key = msg.get();
  natsMsg* to_send = msg.get();
  s = js_PublishMsgAsync(im.js.get(), &to_send, &po);
  if (s != NATS_OK) {
    // Not taken: the message is still ours (msg frees it).
    const Classified c = classify_status(s);
    if (c.kind == sink::ErrorKind::kSize) {
      std::size_t max = 0;
      if (im.connection)
        max = static_cast<std::size_t>(natsConnection_GetMaxPayload(im.connection.get()));
      return {sink::ProduceStatus::kFailed,
              "MAX_PAYLOAD: message to " + entry.subject +
                  " larger than the server's max_payload (" + std::to_string(max) + " bytes)",
              true};
    }
    if (c.kind == sink::ErrorKind::kTransient) {
      // The connection is gone (its event may not have arrived yet): stop now.
      im.stop("NATS publish failed: " + last_error(s));
      return {sink::ProduceStatus::kFailed, "NATS publisher stopped: " + last_error(s), false};
    }
    return {sink::ProduceStatus::kFailed, c.name + ": " + last_error(s), false};
  }
  (void)msg.release();  // nats.c owns it until its acknowledgement
  entry.sent = Clock::now();
  const std::uint64_t seq = ++im.next_seq;
  im.by_msg.emplace(key, seq);
  im.in_flight.emplace(seq, std::move(entry));
  im.arm_ack_timer();
  return {sink::ProduceStatus::kQueued, {}, false};
}

std::size_t Publisher::queued() const { return impl_->in_flight.size(); }

bool Publisher::stopped() const { return impl_->stopped; }

bool Publisher::connected() const { return impl_->connected; }

}  // namespace outbox::nats
