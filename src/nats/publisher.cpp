#include "outbox/nats/publisher.hpp"

#include <nats/nats.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
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
#include "outbox/nats/stream_client.hpp"

namespace outbox::nats {

namespace {

using Clock = std::chrono::steady_clock;

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const {
    if (p != nullptr) F(p);
  }
};
using MsgPtr = std::unique_ptr<natsMsg, Deleter<natsMsg, natsMsg_Destroy>>;
using OptionsPtr = std::unique_ptr<natsOptions, Deleter<natsOptions, natsOptions_Destroy>>;
using ConnectionPtr =
    std::unique_ptr<natsConnection, Deleter<natsConnection, natsConnection_Destroy>>;
using JsPtr = std::unique_ptr<jsCtx, Deleter<jsCtx, jsCtx_Destroy>>;
using StreamInfoPtr = std::unique_ptr<jsStreamInfo, Deleter<jsStreamInfo, jsStreamInfo_Destroy>>;

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    if (auto l = spdlog::get("nats")) return l;
    auto l = spdlog::default_logger()->clone("nats");
    spdlog::register_logger(l);
    return l;
  }();
  return log;
}

std::string status_text(natsStatus s) { return natsStatus_GetText(s); }

// The last error nats.c recorded on this thread, for a failed call's message.
std::string last_error(natsStatus s) {
  natsStatus ignored = NATS_OK;
  const char* text = nats_GetLastError(&ignored);
  std::string out = status_text(s);
  if (text != nullptr && *text != '\0' && out != text) out += std::string(": ") + text;
  return out;
}

void check(natsStatus s, const std::string& what) {
  if (s != NATS_OK) throw ConfigError(what + ": " + last_error(s));
}

std::vector<std::string> split_urls(const std::string& urls) {
  std::vector<std::string> out;
  std::string_view rest = urls;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
    if (!one.empty()) out.emplace_back(one);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::int64_t parse_int(const std::string& name, const std::string& value) {
  std::int64_t v = 0;
  const auto* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc{} || p != end || v < 0) {
    throw ConfigError("NATS option " + name + ": not a non-negative integer: '" + value + "'");
  }
  return v;
}

// ---- NKeys: the public key of a user seed (base32 "SU...": prefix, Ed25519 seed, CRC16) ----
constexpr std::string_view kBase32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

std::optional<std::vector<unsigned char>> base32_decode(std::string_view in) {
  std::vector<unsigned char> out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    const auto pos = kBase32.find(c);
    if (pos == std::string_view::npos) return std::nullopt;
    buffer = (buffer << 5) | static_cast<unsigned>(pos);
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

std::string base32_encode(const std::vector<unsigned char>& in) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (unsigned char b : in) {
    buffer = (buffer << 8) | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out.push_back(kBase32[(buffer >> bits) & 31]);
    }
  }
  if (bits > 0) out.push_back(kBase32[(buffer << (5 - bits)) & 31]);
  return out;
}

std::uint16_t crc16(const unsigned char* data, std::size_t n) {  // CRC-16/XMODEM
  std::uint16_t crc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= static_cast<std::uint16_t>(data[i]) << 8;
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

// Reads the first line starting with "SU" from `file` and returns the user's public key.
// The seed itself stays in nats.c, which reads the file again (and clears it after use).
std::string nkey_public_key(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError("NATS NKey seed file " + file + ": cannot be read");
  std::string line;
  std::string seed;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.rfind("SU", 0) == 0) {
      seed = line;
      break;
    }
  }
  const std::string bad = "NATS NKey seed file " + file + ": no user seed (a line SU...) in it";
  if (seed.empty()) throw ConfigError(bad);
  auto raw = base32_decode(seed);
  if (!raw || raw->size() != 36) throw ConfigError(bad);
  const auto& r = *raw;
  const std::uint16_t want = static_cast<std::uint16_t>(r[34] | (r[35] << 8));
  if (crc16(r.data(), 34) != want) throw ConfigError(bad + " (checksum)");
  constexpr unsigned char kUserPrefix = 20 << 3;  // 'U'
  const unsigned char prefix = static_cast<unsigned char>(((r[0] & 7) << 5) | (r[1] >> 3));
  if (prefix != kUserPrefix) throw ConfigError(bad + " (not a user seed)");
  std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>> key(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, r.data() + 2, 32));
  std::vector<unsigned char> pub(1 + 32 + 2);
  std::size_t len = 32;
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), pub.data() + 1, &len) != 1 || len != 32) {
    throw ConfigError(bad + " (not an Ed25519 seed)");
  }
  pub[0] = kUserPrefix;
  const std::uint16_t crc = crc16(pub.data(), 33);
  pub[33] = static_cast<unsigned char>(crc & 0xff);
  pub[34] = static_cast<unsigned char>(crc >> 8);
  return base32_encode(pub);
}

// The options shared by the publisher and the blocking sessions (connect_blocking()).
OptionsPtr make_options(const PublisherConfig& config) {
  natsOptions* raw = nullptr;
  check(natsOptions_Create(&raw), "NATS options");
  OptionsPtr opts(raw);
  const auto urls = split_urls(config.urls);
  if (urls.empty()) throw ConfigError("NATS: no server URL given");
  std::vector<const char*> ptrs;
  bool tls = config.tls || !config.tls_ca_file.empty() || !config.tls_cert_file.empty();
  for (const auto& u : urls) {
    ptrs.push_back(u.c_str());
    if (u.rfind("tls://", 0) == 0) tls = true;
  }
  check(natsOptions_SetServers(opts.get(), ptrs.data(), static_cast<int>(ptrs.size())),
        "NATS server URLs '" + config.urls + "'");
  check(natsOptions_SetName(opts.get(), "outbox-relay"), "NATS client name");
  if (!config.credentials_file.empty() && !config.nkey_seed_file.empty()) {
    throw ConfigError("NATS: a credentials file and an NKey seed file exclude each other");
  }
  if (!config.credentials_file.empty()) {
    if (!std::ifstream(config.credentials_file)) {
      throw ConfigError("NATS credentials file " + config.credentials_file + ": cannot be read");
    }
    check(natsOptions_SetUserCredentialsFromFiles(opts.get(), config.credentials_file.c_str(),
                                                  nullptr),
          "NATS credentials file " + config.credentials_file);
  }
  if (!config.nkey_seed_file.empty()) {
    const std::string pub = nkey_public_key(config.nkey_seed_file);
    check(natsOptions_SetNKeyFromSeed(opts.get(), pub.c_str(), config.nkey_seed_file.c_str()),
          "NATS NKey seed file " + config.nkey_seed_file);
  }
  if (tls) check(natsOptions_SetSecure(opts.get(), true), "NATS TLS");
  if (!config.tls_ca_file.empty()) {
    check(natsOptions_LoadCATrustedCertificates(opts.get(), config.tls_ca_file.c_str()),
          "NATS TLS CA file " + config.tls_ca_file);
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    throw ConfigError("NATS TLS: a client certificate needs its key, and a key its certificate");
  }
  if (!config.tls_cert_file.empty()) {
    check(
        natsOptions_LoadCertificatesChain(opts.get(), config.tls_cert_file.c_str(),
                                          config.tls_key_file.c_str()),
        "NATS TLS client certificate " + config.tls_cert_file + " and key " + config.tls_key_file);
  }
  for (const auto& [name, value] : config.options) {
    const std::string what = "NATS option " + name;
    if (name == "name") {
      check(natsOptions_SetName(opts.get(), value.c_str()), what);
    } else if (name == "connect_timeout_ms") {
      check(natsOptions_SetTimeout(opts.get(), parse_int(name, value)), what);
    } else if (name == "ping_interval_ms") {
      check(natsOptions_SetPingInterval(opts.get(), parse_int(name, value)), what);
    } else if (name == "max_pings_out") {
      check(natsOptions_SetMaxPingsOut(opts.get(), static_cast<int>(parse_int(name, value))), what);
    } else if (name == "reconnect_wait_ms") {
      check(natsOptions_SetReconnectWait(opts.get(), parse_int(name, value)), what);
    } else if (name == "write_deadline_ms") {
      check(natsOptions_SetWriteDeadline(opts.get(), parse_int(name, value)), what);
    } else if (name == "tls_hostname") {
      check(natsOptions_SetExpectedHostname(opts.get(), value.c_str()), what);
    } else if (name == "tls_ciphers") {
      check(natsOptions_SetCiphers(opts.get(), value.c_str()), what);
    } else {
      throw ConfigError("unknown NATS option '" + name +
                        "' (known: name, connect_timeout_ms, ping_interval_ms, max_pings_out, "
                        "reconnect_wait_ms, write_deadline_ms, tls_hostname, tls_ciphers)");
    }
  }
  return opts;
}

// A blocking connection and its JetStream context, for setup, the tests and the tools (the
// publisher's own connection is asynchronous: Publisher). Destroyed in reverse order: the
// context holds the connection.
struct BlockingSession {
  OptionsPtr options;
  ConnectionPtr connection;
  JsPtr js;
};

// Connects within `timeout` (and waits that long for JetStream's answers); throws ConfigError
// naming what failed.
BlockingSession connect_blocking(const PublisherConfig& config, std::chrono::milliseconds timeout) {
  BlockingSession session;
  session.options = make_options(config);
  check(natsOptions_SetTimeout(session.options.get(), timeout.count()), "NATS options");
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, session.options.get());
  if (s != NATS_OK) throw ConfigError("NATS connect to " + config.urls + ": " + last_error(s));
  session.connection.reset(nc);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = timeout.count();
  jsCtx* js = nullptr;
  s = natsConnection_JetStream(&js, nc, &jo);
  if (s != NATS_OK) throw ConfigError("NATS JetStream context: " + last_error(s));
  session.js.reset(js);
  return session;
}

// The stream's information; null when it cannot be read, with the status and JetStream's code.
StreamInfoPtr stream_info(jsCtx* js, const std::string& name, natsStatus& s, jsErrCode& code) {
  code = static_cast<jsErrCode>(0);
  jsStreamInfo* si = nullptr;
  s = js_GetStreamInfo(&si, js, name.c_str(), nullptr, &code);
  return StreamInfoPtr(si);
}

// Creates the stream `name` capturing `subjects`, in files, with the duplicate window `dup_ns`.
natsStatus add_stream(jsCtx* js, const std::string& name, const std::vector<std::string>& subjects,
                      std::int64_t dup_ns, jsErrCode& code) {
  std::vector<const char*> subj;
  for (const auto& x : subjects) subj.push_back(x.c_str());
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = name.c_str();
  sc.Subjects = subj.data();
  sc.SubjectsLen = static_cast<int>(subj.size());
  sc.Storage = js_FileStorage;
  sc.Duplicates = dup_ns;
  jsStreamInfo* created = nullptr;
  const natsStatus s = js_AddStream(&created, js, &sc, nullptr, &code);
  StreamInfoPtr created_ptr(created);
  return s;
}

// Stream `name` as a blocking session finds it, created (add_stream()) when there was none.
struct FoundStream {
  BlockingSession session;
  bool missing = false;  // there was none: created now, unless `error`
  StreamInfoPtr info;    // when it existed
  std::string error;     // one line when it could be neither read nor created
  jsErrCode code{};      // JetStream's code for the failed call
};

// Throws ConfigError when it cannot connect (connect_blocking()).
FoundStream find_or_create_stream(const PublisherConfig& config, const std::string& name,
                                  const std::vector<std::string>& subjects, std::int64_t dup_ns,
                                  std::chrono::milliseconds timeout) {
  FoundStream found;
  found.session = connect_blocking(config, timeout);
  jsCtx* js = found.session.js.get();
  natsStatus s = NATS_OK;
  found.info = stream_info(js, name, s, found.code);
  if (s == NATS_NOT_FOUND || found.code == JSStreamNotFoundErr) {
    found.missing = true;
    s = add_stream(js, name, subjects, dup_ns, found.code);
    if (s != NATS_OK) found.error = "cannot create JetStream stream " + name + ": " + last_error(s);
  } else if (s != NATS_OK) {
    found.error = "cannot read JetStream stream " + name + ": " + last_error(s);
  }
  return found;
}

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
      if (auto self = w.lock()) self->handle_ack(std::move(ack));
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
      if (!self) return;
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
      if (auto self = w.lock()) self->connection_lost(err, text, "reported an error");
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
      if (!self) return;
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
};

Publisher::Publisher(boost::asio::any_io_executor executor, const PublisherConfig& config,
                     DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused)
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
  void* closure = reinterpret_cast<void*>(static_cast<std::uintptr_t>(impl_->registry_id));
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
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, o);
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    std::lock_guard lock(Impl::registry_mutex());
    Impl::registry().erase(impl_->registry_id);
    throw ConfigError("NATS connect to " + config.urls + ": " + last_error(s));
  }
  impl_->connection.reset(nc);
  impl_->connected = s == NATS_OK;
  impl_->ever_connected = impl_->connected;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = &Impl::on_ack;
  jo.PublishAsync.AckHandlerClosure = closure;
  // The window is ours (max_in_flight); nats.c's own limit must never make a publish wait.
  jo.PublishAsync.MaxPending = static_cast<int64_t>(config.max_in_flight) * 2 + 16;
  jsCtx* js = nullptr;
  s = natsConnection_JetStream(&js, nc, &jo);
  if (s != NATS_OK) {
    std::lock_guard lock(Impl::registry_mutex());
    Impl::registry().erase(impl_->registry_id);
    throw ConfigError("NATS JetStream context: " + last_error(s));
  }
  impl_->js.reset(js);
  if (impl_->connected) {
    logger()->info("connected to NATS servers={}", config.urls);
  } else {
    impl_->connect_timer.expires_after(config.ack_timeout);
    impl_->connect_timer.async_wait(
        [w = std::weak_ptr<Impl>(impl_)](const boost::system::error_code&) {
          auto self = w.lock();
          if (!self || self->connected || self->stopped) return;
          self->stop("not connected to NATS servers=" + self->urls + " within " +
                     std::to_string(self->ack_timeout.count()) + " ms");
        });
  }
}

Publisher::~Publisher() {
  {
    std::lock_guard lock(Impl::registry_mutex());
    Impl::registry().erase(impl_->registry_id);
  }
  impl_->ack_timer.cancel();
  impl_->connect_timer.cancel();
  // The JetStream context first (it holds the connection), then the connection.
  impl_->js.reset();
  impl_->connection.reset();
}

sink::ProduceResult Publisher::produce(const sink::Record& record, std::uint64_t opaque) {
  Impl& im = *impl_;
  if (im.stopped) {
    return {sink::ProduceStatus::kFailed, "NATS publisher stopped", false};
  }
  // Not connected yet: nats.c would refuse headers (it does not know yet that the server takes
  // them). The caller waits as for a full window; the publisher stops if the connection does
  // not come within ack_timeout.
  if (!im.connected || im.in_flight.size() >= im.max_in_flight) {
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

// ---- admin ----------------------------------------------------------------------------------

std::string ensure_stream(const PublisherConfig& config, const std::string& name,
                          const std::vector<std::string>& subjects,
                          std::chrono::milliseconds duplicate_window,
                          std::chrono::milliseconds timeout) {
  try {
    const std::int64_t dup_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(duplicate_window).count();
    FoundStream found = find_or_create_stream(config, name, subjects, dup_ns, timeout);
    if (found.missing || !found.error.empty()) return found.error;
    // It exists: add the subjects it lacks and set the duplicate window.
    jsStreamConfig sc = *found.info->Config;
    std::vector<const char*> subj(sc.Subjects, sc.Subjects + sc.SubjectsLen);
    for (const auto& x : subjects) {
      if (std::none_of(subj.begin(), subj.end(), [&](const char* c) { return x == c; })) {
        subj.push_back(x.c_str());
      }
    }
    if (sc.Duplicates == dup_ns && static_cast<int>(subj.size()) == sc.SubjectsLen) return {};
    sc.Subjects = subj.data();
    sc.SubjectsLen = static_cast<int>(subj.size());
    sc.Duplicates = dup_ns;
    jsStreamInfo* updated = nullptr;
    const natsStatus s =
        js_UpdateStream(&updated, found.session.js.get(), &sc, nullptr, &found.code);
    StreamInfoPtr updated_ptr(updated);
    if (s != NATS_OK) return "cannot update JetStream stream " + name + ": " + last_error(s);
    return {};
  } catch (const ConfigError& e) {
    return e.what();
  }
}

namespace {

std::vector<std::string_view> tokens(std::string_view subject) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = subject.find('.', start);
    out.push_back(subject.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// "2m", "90s", "1500ms": a duration as the flags write it.
std::string duration_text(std::int64_t ns) {
  const std::int64_t ms = ns / 1'000'000;
  if (ms % 60'000 == 0 && ms > 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1'000 == 0 && ms > 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

bool subject_captures(std::string_view pattern, std::string_view filter) {
  const auto p = tokens(pattern);
  const auto f = tokens(filter);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == ">") return i < f.size();  // one or more tokens, whatever they are
    if (i >= f.size()) return false;
    if (p[i] == "*") {
      if (f[i] == ">") return false;  // one token cannot capture several
      continue;
    }
    if (p[i] != f[i]) return false;
  }
  return p.size() == f.size();
}

StreamCheck create_or_check_stream(const PublisherConfig& config, const std::string& name,
                                   const std::vector<std::string>& subjects,
                                   std::chrono::milliseconds duplicate_window,
                                   std::chrono::milliseconds timeout) {
  const std::string stream = "JetStream stream " + name;
  try {
    const std::int64_t dup_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(duplicate_window).count();
    const FoundStream found = find_or_create_stream(config, name, subjects, dup_ns, timeout);
    if (found.missing && !found.error.empty() && found.code == JSStreamSubjectOverlapErr) {
      std::string listed;
      for (const auto& x : subjects) listed += (listed.empty() ? "" : ", ") + x;
      return {false, "cannot create " + stream + ": another stream already captures some of " +
                         listed + " (a subject goes to one stream): name that stream with " +
                         "--nats-stream, and setup checks it"};
    }
    if (!found.error.empty()) return {false, found.error};
    if (found.missing) return {true, {}};
    const jsStreamConfig& sc = *found.info->Config;
    std::string has;
    for (int i = 0; i < sc.SubjectsLen; ++i) has += std::string(i ? ", " : "") + sc.Subjects[i];
    for (const std::string& x : subjects) {
      const bool captured = std::any_of(sc.Subjects, sc.Subjects + sc.SubjectsLen,
                                        [&](const char* p) { return subject_captures(p, x); });
      if (!captured) {
        return {false, stream + " exists but does not capture " + x +
                           " (its subjects: " + (has.empty() ? "none" : has) +
                           "): add the subject to it, or choose another --nats-stream"};
      }
    }
    if (sc.Storage != js_FileStorage) {
      return {false, stream +
                         " exists but keeps its messages in memory: a server restart would lose "
                         "acknowledged events; the outbox needs a stream with file storage"};
    }
    if (sc.Duplicates < dup_ns) {
      return {false, stream + " exists but its duplicate window is " +
                         duration_text(sc.Duplicates) + ", shorter than " + duration_text(dup_ns) +
                         " (--nats-duplicate-window): events the relay sends again after a "
                         "crash would be stored twice past it; raise the stream's "
                         "duplicate_window, or ask for less"};
    }
    return {false, {}};
  } catch (const ConfigError& e) {
    return {false, e.what()};
  }
}

// ---- reading a stream back (stream_client.hpp) ---------------------------------------------

struct StreamClient::Impl {
  BlockingSession session;

  // Throws std::runtime_error naming the stream when it cannot be read.
  StreamInfoPtr info(const std::string& stream) const {
    natsStatus s = NATS_OK;
    jsErrCode code{};
    StreamInfoPtr si = stream_info(session.js.get(), stream, s, code);
    if (s != NATS_OK) {
      throw std::runtime_error("cannot read JetStream stream " + stream + ": " + last_error(s));
    }
    return si;
  }
};

StreamClient::StreamClient(const PublisherConfig& config, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  try {
    impl_->session = connect_blocking(config, timeout);
  } catch (const ConfigError& e) {
    throw std::runtime_error(e.what());
  }
}

StreamClient::~StreamClient() = default;

StreamState StreamClient::state(const std::string& stream) {
  const StreamInfoPtr si = impl_->info(stream);
  return {si->State.Msgs, si->State.FirstTime, si->State.LastTime};
}

void StreamClient::remove(const std::string& stream) {
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_DeleteStream(impl_->session.js.get(), stream.c_str(), nullptr, &code);
  if (s != NATS_OK) {
    throw std::runtime_error("cannot delete JetStream stream " + stream + ": " + last_error(s));
  }
}

std::vector<StoredMessage> StreamClient::messages(const std::string& stream) {
  const StreamInfoPtr si = impl_->info(stream);
  jsCtx* js = impl_->session.js.get();
  jsErrCode code = static_cast<jsErrCode>(0);
  std::vector<StoredMessage> out;
  const std::uint64_t last = si->State.LastSeq;
  for (std::uint64_t seq = si->State.FirstSeq; seq != 0 && seq <= last; ++seq) {
    natsMsg* raw = nullptr;
    const natsStatus s = js_GetMsg(&raw, js, stream.c_str(), seq, nullptr, &code);
    MsgPtr m(raw);
    if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) continue;  // deleted
    if (s != NATS_OK) {
      throw std::runtime_error("cannot read message " + std::to_string(seq) + " of " + stream +
                               ": " + last_error(s));
    }
    StoredMessage st;
    st.seq = seq;
    st.subject = natsMsg_GetSubject(m.get());
    st.data.assign(natsMsg_GetData(m.get()),
                   static_cast<std::size_t>(natsMsg_GetDataLength(m.get())));
    const char** keys = nullptr;
    int n = 0;
    if (natsMsgHeader_Keys(m.get(), &keys, &n) == NATS_OK) {
      for (int i = 0; i < n; ++i) {
        const char** values = nullptr;
        int nv = 0;
        if (natsMsgHeader_Values(m.get(), keys[i], &values, &nv) == NATS_OK) {
          for (int j = 0; j < nv; ++j) st.headers.emplace_back(keys[i], values[j]);
          std::free(static_cast<void*>(values));
        }
      }
      std::free(static_cast<void*>(keys));
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace outbox::nats
