// NATS JetStream publisher on Asio, the JetStream counterpart of kafka::Producer: the same
// records in (sink::Record, the rendered subject in Record::topic), the same delivery reports
// out (sink::Delivery). nats.c (libnats) keeps its own threads; every acknowledgement, failure
// and connection event it reports is handed to the io_context's thread with asio::post, as an
// owning copy, and the handlers run there only. libnats handles never leave this module.
//
// Each record is published asynchronously (js_PublishMsgAsync) with its headers as NATS headers
// and `Nats-Msg-Id` = its `id` header, so that a record sent again within the stream's duplicate
// window is dropped by the server (its acknowledgement says "duplicate"; it counts as delivered).
//
// Failures, by what the caller must do:
//   - refused by the server (no stream captures the subject, message over the stream's size
//     limit, storage full, ...): a Delivery with kind kRecord or kSize, final for that record;
//     the publisher goes on.
//   - a message over the server's max_payload: produce() returns kFailed with size_error set.
//   - the connection lost, or no acknowledgement within ack_timeout (server stopped, frozen,
//     network cut): the publisher stops (stopped() becomes true), the fatal handler runs once,
//     then every publish not acknowledged gets a Delivery with kind kTransient, in publish order.
//     Some of them may be stored: the caller makes a new Publisher and sends again from what was
//     acknowledged; the duplicate window drops what the server already holds.
//
// Not thread-safe: construct, produce, retire and destroy on the io_context's thread.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/sink/record.hpp"

namespace outbox::nats {

struct PublisherConfig {
  // Server URLs, comma-separated: nats://host:port or tls://host:port.
  std::string urls;
  // A credentials file (user JWT and NKey seed, as `nsc` writes it); empty: none.
  std::string credentials_file;
  // A file holding a user NKey seed (SU...); the public key is derived from it. Empty: none.
  // Exclusive with credentials_file.
  std::string nkey_seed_file;
  // TLS: a CA bundle to trust the server with, and a client certificate and key (mutual TLS).
  // Any of them, or tls://URLs, makes the connection require TLS.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  bool tls = false;
  // The bounded window: at most this many publishes not yet acknowledged (produce() returns
  // kQueueFull beyond it).
  std::size_t max_in_flight = 4096;
  // A publish not acknowledged within this long stops the publisher (see above).
  std::chrono::milliseconds ack_timeout{10'000};
  // Client options by name, applied after the above (from -X-style flags); an unknown name or a
  // bad value throws ConfigError. Names: name, connect_timeout_ms, ping_interval_ms,
  // max_pings_out, reconnect_wait_ms (between connection attempts at start),
  // write_deadline_ms, tls_hostname (the name the server's certificate must carry),
  // tls_ciphers.
  std::vector<std::pair<std::string, std::string>> options;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Publisher {
 public:
  using DeliveryHandler = std::function<void(const sink::Delivery&)>;
  // The publisher stopped (connection lost, or an acknowledgement overdue); called once, before
  // the failed deliveries of what was in flight.
  using FatalHandler = std::function<void(const std::string&)>;
  // The server refused the client's credentials or certificate (authorization violation, TLS
  // handshake failure). The text names the server and the error, never a secret. Without it,
  // a refusal is only a stop like any lost connection.
  using RefusedHandler = std::function<void(const std::string&)>;

  // Until the connection is up produce() answers kQueueFull, and a connection not up within
  // ack_timeout stops the publisher. The first attempt waits on the network (up to the connect
  // timeout, e.g. a server that accepts TCP and does not answer): with `connector` it runs on
  // that executor's thread and the constructor never blocks (a server that cannot be tried at
  // all then stops the publisher); without, it runs here. Later attempts are nats.c's, in the
  // background. Throws ConfigError for a bad URL, option, or unreadable credentials, NKey or TLS
  // file (and, without `connector`, servers that cannot be tried).
  Publisher(boost::asio::any_io_executor executor, const PublisherConfig& config,
            DeliveryHandler on_delivery, FatalHandler on_fatal, RefusedHandler on_refused = {},
            std::optional<boost::asio::any_io_executor> connector = std::nullopt);
  // Closes the connection here (it may wait on a server that does not answer: see retire()).
  ~Publisher();
  // On the io thread: from now on `publisher` serves nothing there and calls none of its
  // handlers; its connection is closed and it is destroyed on `worker`'s thread, after a first
  // attempt still under way there.
  static void retire(std::unique_ptr<Publisher> publisher, boost::asio::any_io_executor worker);
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Publishes a record to the subject record.topic; `opaque` comes back in its Delivery.
  // The message: data = Record::value (NULL: empty), headers = Record::headers in order (one with a
  // NULL or empty value left out), plus `key` = Record::key when set and `Nats-Msg-Id` = the `id`
  // header. timestamp_ms and partition are Kafka's and ignored. Never blocks. kQueueFull: the
  // window is full, try again after a delivery. kFailed: no Delivery will come for it: size_error
  // when over the server's max_payload; stopped() when the publisher stopped; else the record
  // cannot be a NATS message (a bad subject, a line break in a header), final for the record.
  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque);

  // Publishes sent and not yet reported (acknowledged or failed).
  std::size_t queued() const;

  // Whether the publisher stopped (connection lost, acknowledgement overdue) and accepts
  // nothing more.
  bool stopped() const;

  // Whether the connection to a server is up now.
  bool connected() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: handlers posted from nats.c's threads hold a weak one
};

// Creates the stream `name` capturing `subjects` (file storage) unless a stream of that name
// exists, and makes its duplicate window `duplicate_window` either way. Blocks up to `timeout`
// (setup and tests only, never on the relay's io thread). Returns an error message, empty on
// success. Same security settings as the publisher's (config.urls, credentials, TLS).
std::string ensure_stream(const PublisherConfig& config, const std::string& name,
                          const std::vector<std::string>& subjects,
                          std::chrono::milliseconds duplicate_window,
                          std::chrono::milliseconds timeout);

// Whether `pattern` (a stream's subject) matches every subject `filter` matches, by NATS's
// wildcards: `*` is one token, a final `>` one or more tokens. "outbox.>" captures
// "outbox.event.>" and "outbox.dlq"; "outbox.event.*" does not capture "outbox.event.>".
bool subject_captures(std::string_view pattern, std::string_view filter);

// setup's stream: what create_or_check_stream() found or did.
struct StreamCheck {
  bool created = false;  // false: it existed and fits
  std::string error;     // empty: the stream is there and fits; else one line saying why not
};

// Creates the stream `name` (file storage, `subjects`, `duplicate_window`) unless a stream of
// that name exists. An existing stream is checked, never changed (it is the operator's): it must
// capture every one of `subjects` (subject_captures), keep its messages in files, and have a
// duplicate window of at least `duplicate_window`. Blocks up to `timeout` (setup, never the
// relay's io thread). Same security settings as the publisher's.
StreamCheck create_or_check_stream(const PublisherConfig& config, const std::string& name,
                                   const std::vector<std::string>& subjects,
                                   std::chrono::milliseconds duplicate_window,
                                   std::chrono::milliseconds timeout);

}  // namespace outbox::nats
