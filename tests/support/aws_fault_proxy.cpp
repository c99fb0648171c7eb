// The proxy's coroutines: one per client connection, each with an upstream connection of its own.
#include "outbox_test/aws_fault_proxy.hpp"

// clang-format off
#include <utility>
// clang-format on
#include <simdjson.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "aws/json_protocol.hpp"
#include "outbox/aws/http_client.hpp"

namespace outbox_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

CallFault CallFault::throttling(std::string action, int times) {
  CallFault f;
  f.action = std::move(action);
  f.times = times;
  f.query_error = "ThrottlingException;Sender";
  return f;
}

CallFault CallFault::sqs_request_throttled(std::string action, int times) {
  CallFault f;
  f.action = std::move(action);
  f.times = times;
  f.code = "com.amazonaws.sqs#RequestThrottled";
  f.query_error = "AWS.SimpleQueueService.RequestThrottled;Sender";
  return f;
}

CallFault CallFault::server_error(int status, std::string action, int times) {
  CallFault f;
  f.action = std::move(action);
  f.times = times;
  f.status = status;
  f.code = status == 503 ? "ServiceUnavailable" : "InternalFailure";
  f.message = "injected by the test proxy";
  return f;
}

EntryFault EntryFault::index(std::size_t i, std::string action, int times) {
  return where([i](const BatchEntry& e) { return e.index == i; }, std::move(action), times);
}

EntryFault EntryFault::group(std::string group_id, int times) {
  return where([g = std::move(group_id)](const BatchEntry& e) { return e.group_id == g; },
               "SendMessageBatch", times);
}

EntryFault EntryFault::where(std::function<bool(const BatchEntry&)> select, std::string action,
                             int times) {
  EntryFault f;
  f.action = std::move(action);
  f.select = std::move(select);
  f.times = times;
  return f;
}

namespace {

// Boost 1.74's Beast has a string_view of its own.
std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

bool header_is(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()),
                        beast::string_view(b.data(), b.size()));
}

std::string json_string(std::string_view text) {
  std::string out;
  outbox::aws::append_json_string(out, text);
  return out;
}

// The action of a JSON-protocol request (X-Amz-Target: AmazonSQS.SendMessageBatch), or of a
// query-protocol one (Action=... in the form body).
std::string action_of(const Request& req) {
  const auto target = sv(req["X-Amz-Target"]);
  if (!target.empty()) {
    const auto dot = target.rfind('.');
    return std::string(dot == std::string_view::npos ? target : target.substr(dot + 1));
  }
  const std::string& body = req.body();
  for (std::size_t at = 0; at < body.size();) {
    const std::size_t end = std::min(body.find('&', at), body.size());
    const std::string_view pair(body.data() + at, end - at);
    if (pair.starts_with("Action=")) return std::string(pair.substr(7));
    at = end + 1;
  }
  return {};
}

// "20261204T060000Z" -> a time point.
std::chrono::system_clock::time_point parse_amz_date(std::string_view text) {
  std::tm tm{};
  if (text.size() != 16 || ::strptime(std::string(text).c_str(), "%Y%m%dT%H%M%SZ", &tm) == nullptr)
    throw std::runtime_error("bad X-Amz-Date");
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
}

std::string_view field_of(std::string_view authorization, std::string_view name) {
  const auto at = authorization.find(name);
  if (at == std::string_view::npos) return {};
  const auto start = at + name.size();
  const auto end = authorization.find_first_of(", ", start);
  return authorization.substr(start, end == std::string_view::npos ? end : end - start);
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t end = std::min(text.find(sep, at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Signs `req` (whose body changed) again as the client did: same key, date, region, service and
// signed headers. An error message, empty when done.
std::string sign_again(Request& req, const std::vector<outbox::aws::Credentials>& keys) {
  const std::string authorization(req[http::field::authorization]);
  const auto credential = split(field_of(authorization, "Credential="), '/');
  const auto signed_headers = split(field_of(authorization, "SignedHeaders="), ';');
  if (credential.size() != 5 || signed_headers.empty()) return "no SigV4 Authorization header";
  const outbox::aws::Credentials* key = nullptr;
  for (const auto& k : keys) {
    if (k.access_key_id == credential[0]) key = &k;
  }
  if (key == nullptr) return "no signing key for access key id " + std::string(credential[0]);
  outbox::aws::Credentials credentials = *key;
  credentials.session_token = std::string(req["X-Amz-Security-Token"]);

  outbox::aws::SigningRequest signing;
  signing.method = std::string(req.method_string());
  signing.path = std::string(req.target().substr(0, req.target().find('?')));
  if (req.target().find('?') != std::string_view::npos) return "a query string (not re-signed)";
  outbox::aws::SigningOptions options;
  options.region = std::string(credential[2]);
  options.service = std::string(credential[3]);
  options.sign_session_token = false;
  for (const auto name : signed_headers) {
    if (header_is(name, "x-amz-date") || header_is(name, "authorization")) continue;
    if (header_is(name, "x-amz-security-token")) {
      options.sign_session_token = true;
      continue;
    }
    if (header_is(name, "x-amz-content-sha256")) {
      options.add_content_sha256 = true;
      continue;
    }
    for (const auto& f : req) {
      if (header_is(sv(f.name_string()), name)) {
        signing.headers.push_back({std::string(f.name_string()), std::string(f.value())});
      }
    }
  }
  signing.payload_hash = outbox::aws::payload_hash(req.body());
  try {
    options.time = parse_amz_date(sv(req["X-Amz-Date"]));
    const auto signed_request = outbox::aws::sign(signing, credentials, options);
    for (const auto& h : signed_request.headers) req.set(h.name, h.value);
  } catch (const std::exception& e) {
    return e.what();
  }
  req.prepare_payload();
  return {};
}

Response json_answer(const Request& req, int status, std::string body) {
  Response res{static_cast<http::status>(status), req.version()};
  const auto type = req[http::field::content_type];
  res.set(http::field::content_type, type.empty() ? "application/x-amz-json-1.0" : type);
  res.set("x-amzn-RequestId", "00000000-0000-0000-0000-test-proxy00");
  res.body() = std::move(body);
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

// The entries a batch request loses to the entry faults, and the request without them.
struct Removed {
  std::vector<bool> mask;                // per entry of the request: removed
  std::vector<BatchEntry> entries;       // the removed ones, in order
  std::vector<const EntryFault*> cause;  // the fault that removed each
  std::string body;                      // the request's body without them
};

}  // namespace

struct AwsFaultProxy::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer gate{io, asio::steady_timer::time_point::max()};
  outbox::aws::Endpoint upstream;
  std::vector<outbox::aws::Credentials> keys;
  std::thread thread;

  mutable std::mutex mutex;  // guards what follows
  std::deque<CallFault> call_faults;
  std::deque<EntryFault> entry_faults;
  std::optional<FreezePoint> frozen;
  ProxyCounters counters;

  void wake() {
    asio::post(io, [this] { gate.cancel(); });
  }

  std::optional<CallFault> take_call_fault(const std::string& action, bool after_forward) {
    std::lock_guard lock(mutex);
    for (auto it = call_faults.begin(); it != call_faults.end(); ++it) {
      if (it->after_forward != after_forward || it->times == 0) continue;
      if (!it->action.empty() && it->action != action) continue;
      CallFault taken = *it;
      if (it->times > 0 && --it->times == 0) call_faults.erase(it);
      ++counters.faulted_calls;
      return taken;
    }
    return std::nullopt;
  }

  // Applies the entry faults to a SendMessageBatch or PutEvents request: none when it is another
  // call or none of its entries is selected.
  std::optional<Removed> remove_entries(const std::string& action, const Request& req) {
    if (action != "SendMessageBatch" && action != "PutEvents") return std::nullopt;
    simdjson::dom::parser parser;
    simdjson::dom::object doc;
    simdjson::dom::array list;
    if (parser.parse(req.body()).get(doc) != simdjson::SUCCESS ||
        doc["Entries"].get(list) != simdjson::SUCCESS) {
      return std::nullopt;
    }
    Removed removed;
    std::string kept;
    std::size_t index = 0;
    std::lock_guard lock(mutex);
    for (simdjson::dom::element item : list) {
      BatchEntry entry;
      entry.action = action;
      entry.index = index++;
      std::string_view v;
      const auto text = [&](const char* key, std::string& out) {
        if (item[key].get(v) == simdjson::SUCCESS) out = std::string(v);
      };
      text("Id", entry.id);
      text("MessageGroupId", entry.group_id);
      text("MessageDeduplicationId", entry.deduplication_id);
      text(action == "PutEvents" ? "Detail" : "MessageBody", entry.body);
      text("DetailType", entry.detail_type);
      const EntryFault* cause = nullptr;
      for (auto& f : entry_faults) {
        if (f.action == action && f.times != 0 && f.select && f.select(entry)) {
          if (f.times > 0) --f.times;
          cause = &f;
          break;
        }
      }
      removed.mask.push_back(cause != nullptr);
      if (cause != nullptr) {
        counters.failed.push_back(entry);
        ++counters.entries_failed;
        removed.entries.push_back(std::move(entry));
        removed.cause.push_back(cause);
      } else {
        ++counters.entries_forwarded;
        if (!kept.empty()) kept += ',';
        kept += simdjson::minify(item);
      }
    }
    if (removed.entries.empty()) return std::nullopt;
    // A used-up fault stays until the request is answered (`cause` points at it); clear() and
    // later requests skip it (times == 0).
    removed.body = "{";
    bool first = true;
    for (auto field : doc) {
      if (!first) removed.body += ',';
      first = false;
      removed.body += json_string(field.key) + ':';
      removed.body += field.key == "Entries" ? "[" + kept + "]" : simdjson::minify(field.value);
    }
    removed.body += '}';
    return removed;
  }

  // moto's answer (or none when nothing was forwarded) with the removed entries as failed ones.
  std::string merged_answer(const std::string& action, const Removed& removed,
                            const std::string* upstream_body) {
    simdjson::dom::parser parser;
    simdjson::dom::object doc;
    if (upstream_body != nullptr && parser.parse(*upstream_body).get(doc) != simdjson::SUCCESS) {
      return *upstream_body;  // unreadable: the client sees what moto said
    }
    std::lock_guard lock(mutex);  // the causes' code and message
    if (action == "SendMessageBatch") {
      std::string successful;
      std::string failed;
      simdjson::dom::array list;
      if (upstream_body != nullptr && doc["Successful"].get(list) == simdjson::SUCCESS) {
        for (auto item : list)
          successful += (successful.empty() ? "" : ",") + simdjson::minify(item);
      }
      if (upstream_body != nullptr && doc["Failed"].get(list) == simdjson::SUCCESS) {
        for (auto item : list) failed += (failed.empty() ? "" : ",") + simdjson::minify(item);
      }
      for (std::size_t i = 0; i < removed.entries.size(); ++i) {
        if (!failed.empty()) failed += ',';
        failed += "{\"Id\":" + json_string(removed.entries[i].id) +
                  ",\"SenderFault\":false,\"Code\":" + json_string(removed.cause[i]->code) +
                  ",\"Message\":" + json_string(removed.cause[i]->message) + "}";
      }
      return "{\"Successful\":[" + successful + "],\"Failed\":[" + failed + "]}";
    }
    // PutEvents: one answer per entry, in the request's order.
    std::vector<std::string> answered;
    std::int64_t failed_count = 0;
    simdjson::dom::array list;
    if (upstream_body != nullptr) {
      if (doc["Entries"].get(list) == simdjson::SUCCESS) {
        for (auto item : list) answered.push_back(simdjson::minify(item));
      }
      std::int64_t n = 0;
      if (doc["FailedEntryCount"].get(n) == simdjson::SUCCESS) failed_count = n;
    }
    std::string entries;
    std::size_t from_upstream = 0;
    std::size_t from_removed = 0;
    for (const bool gone : removed.mask) {
      if (!entries.empty()) entries += ',';
      if (gone) {
        const auto* cause = removed.cause[from_removed++];
        entries += "{\"ErrorCode\":" + json_string(cause->code) +
                   ",\"ErrorMessage\":" + json_string(cause->message) + "}";
        ++failed_count;
      } else {
        entries += from_upstream < answered.size() ? answered[from_upstream] : "{}";
        ++from_upstream;
      }
    }
    return "{\"FailedEntryCount\":" + std::to_string(failed_count) + ",\"Entries\":[" + entries +
           "]}";
  }

  asio::awaitable<void> hold(FreezePoint at) {
    bool counted = false;
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (frozen != at) break;
        if (!counted) ++counters.held;
        counted = true;
      }
      beast::error_code ec;
      co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (counted) {
      std::lock_guard lock(mutex);
      --counters.held;
    }
  }

  // Sends `req` to moto on `up` (connected when closed, again once when a kept-alive connection
  // turned out closed); none when moto cannot be reached.
  asio::awaitable<std::optional<Response>> forward(std::optional<beast::tcp_stream>& up,
                                                   beast::flat_buffer& buffer, Request& req) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      beast::error_code ec;
      const bool reused = up.has_value();
      if (!up) {
        up.emplace(io);
        buffer.clear();
        const tcp::endpoint where(asio::ip::make_address(upstream.host), upstream.port);
        up->expires_after(std::chrono::seconds(10));
        co_await up->async_connect(where, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          up.reset();
          co_return std::nullopt;
        }
      }
      up->expires_after(std::chrono::seconds(120));
      co_await http::async_write(*up, req, asio::redirect_error(asio::use_awaitable, ec));
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      if (!ec) {
        co_await http::async_read(*up, buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
      }
      if (!ec) {
        Response res = parser.release();
        if (!res.keep_alive()) up.reset();
        co_return res;
      }
      up.reset();
      if (!reused || parser.got_some()) break;
    }
    co_return std::nullopt;
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    beast::tcp_stream client(std::move(socket));
    beast::flat_buffer client_buffer;
    std::optional<beast::tcp_stream> up;
    beast::flat_buffer up_buffer;
    for (;;) {
      beast::error_code ec;
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      co_await http::async_read(client, client_buffer, parser,
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      Request req = parser.release();
      const std::string action = action_of(req);
      {
        std::lock_guard lock(mutex);
        ++counters.calls[action];
      }
      co_await hold(FreezePoint::kRequest);

      std::optional<Response> res;
      if (auto fault = take_call_fault(action, false)) {
        res = fault_answer(req, *fault);
      } else {
        std::optional<Removed> removed = remove_entries(action, req);
        bool forwarded = true;
        if (removed) {
          const bool all =
              std::find(removed->mask.begin(), removed->mask.end(), false) == removed->mask.end();
          if (all) {
            forwarded = false;
            res = json_answer(req, 200, merged_answer(action, *removed, nullptr));
          } else {
            req.body() = removed->body;
            if (std::string error = sign_again(req, keys); !error.empty()) {
              forwarded = false;
              res =
                  json_answer(req, 500,
                              "{\"__type\":\"ProxyCannotSign\",\"message\":" +
                                  json_string("the test proxy cannot sign again: " + error) + "}");
            }
          }
        }
        if (forwarded) {
          res = co_await forward(up, up_buffer, req);
          std::lock_guard lock(mutex);
          if (!res) {
            ++counters.upstream_errors;
          } else {
            ++counters.forwarded;
          }
        }
        if (!res) co_return;  // moto unreachable: the client sees its connection closed
        if (forwarded && removed && res->result_int() / 100 == 2) {
          res->body() = merged_answer(action, *removed, &res->body());
          res->prepare_payload();
        }
        if (auto late = take_call_fault(action, true)) res = fault_answer(req, *late);
      }
      co_await hold(FreezePoint::kAnswer);
      const bool keep = res->keep_alive() && req.keep_alive();
      {
        // Counted before the client can have it: a test that got its answer sees it counted.
        std::lock_guard lock(mutex);
        ++counters.answered;
      }
      co_await http::async_write(client, *res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      if (!keep) {
        client.socket().shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
    }
  }

  static Response fault_answer(const Request& req, const CallFault& fault) {
    std::string body;
    if (!fault.code.empty()) {
      body = "{\"__type\":" + json_string(fault.code) +
             ",\"message\":" + json_string(fault.message) + "}";
    }
    Response res = json_answer(req, fault.status, std::move(body));
    if (!fault.query_error.empty()) res.set("x-amzn-query-error", fault.query_error);
    return res;
  }

  asio::awaitable<void> accept() {
    for (;;) {
      beast::error_code ec;
      tcp::socket socket =
          co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(io, serve(std::move(socket)), asio::detached);
    }
  }
};

AwsFaultProxy::AwsFaultProxy(AwsFaultProxyOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->upstream = outbox::aws::parse_endpoint(options.upstream);
  impl_->keys = std::move(options.signing_keys);
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), options.port);
  impl_->acceptor.open(at.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(at);
  impl_->acceptor.listen();
  asio::co_spawn(impl_->io, impl_->accept(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

AwsFaultProxy::~AwsFaultProxy() {
  impl_->io.stop();
  impl_->thread.join();
}

std::uint16_t AwsFaultProxy::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string AwsFaultProxy::endpoint() const { return "http://127.0.0.1:" + std::to_string(port()); }

void AwsFaultProxy::fail_calls(CallFault fault) {
  std::lock_guard lock(impl_->mutex);
  impl_->call_faults.push_back(std::move(fault));
}

void AwsFaultProxy::fail_entries(EntryFault fault) {
  std::lock_guard lock(impl_->mutex);
  impl_->entry_faults.push_back(std::move(fault));
}

void AwsFaultProxy::freeze(FreezePoint point) {
  std::lock_guard lock(impl_->mutex);
  impl_->frozen = point;
}

void AwsFaultProxy::thaw() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->frozen.reset();
  }
  impl_->wake();
}

void AwsFaultProxy::clear() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->call_faults.clear();
    // Entry faults stay in place while a request's answer may point at them; spent, they match
    // nothing.
    for (auto& f : impl_->entry_faults) f.times = 0;
    impl_->frozen.reset();
  }
  impl_->wake();
}

ProxyCounters AwsFaultProxy::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace outbox_test
