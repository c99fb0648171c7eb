#include "outbox/aws/eventbridge_publisher.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "eventbridge_batching.hpp"
#include "outbox/common/log_text.hpp"
#include "publisher_parts.hpp"

namespace outbox::aws {

namespace {

using Clock = std::chrono::steady_clock;
using Seq = std::uint64_t;
using common::quoted;

bool bus_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '/';
}

std::optional<std::string> env_value(const EnvLookup& env, std::string_view name) {
  auto v = env(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

// What a final refusal's code says: too large, or something else about the entry.
sink::ErrorKind final_kind(std::string_view code, int http_status) {
  const bool size = http_status == 413 || code.find("TooLarge") != std::string_view::npos ||
                    code.find("TooLong") != std::string_view::npos ||
                    code.find("SizeExceeded") != std::string_view::npos;
  return size ? sink::ErrorKind::kSize : sink::ErrorKind::kRecord;
}

}  // namespace

std::string check_event_bus(const std::string& bus) {
  if (bus.empty()) throw EventBridgeConfigError("the event bus is empty");
  if (bus.rfind("arn:", 0) == 0) {
    // arn:PARTITION:events:REGION:ACCOUNT:event-bus/NAME
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (int i = 0; i < 5; ++i) {
      const std::size_t colon = bus.find(':', start);
      if (colon == std::string::npos) break;
      parts.push_back(bus.substr(start, colon - start));
      start = colon + 1;
    }
    const std::string resource = parts.size() == 5 ? bus.substr(start) : std::string();
    if (parts.size() != 5 || parts[1].empty() || parts[2] != "events" || parts[3].empty() ||
        parts[4].empty() || resource.rfind("event-bus/", 0) != 0 ||
        resource.size() == std::string_view("event-bus/").size()) {
      throw EventBridgeConfigError("\"" + bus +
                                   "\" is not an event bus ARN "
                                   "(arn:aws:events:REGION:ACCOUNT:event-bus/NAME)");
    }
    return parts[3];
  }
  if (bus.size() > 256)
    throw EventBridgeConfigError("an event bus name has at most 256 characters");
  for (char c : bus) {
    if (!bus_name_char(c)) {
      throw EventBridgeConfigError("\"" + bus +
                                   "\" is not an event bus name (letters, digits and . _ - /) "
                                   "nor an ARN");
    }
  }
  return {};
}

EventBridgePublisherConfig resolve_eventbridge_config(const EventBridgeSinkOptions& options,
                                                      const EnvLookup& env) {
  EventBridgePublisherConfig c;
  c.bus = options.bus;
  const std::string arn_region = check_event_bus(options.bus);
  if (!options.dlq_bus.empty()) {
    (void)check_event_bus(options.dlq_bus);
    c.dlq_bus = options.dlq_bus;
  }
  c.dlq_topic = options.dlq_topic;
  std::string& region = c.events.region;
  region = options.region;
  if (region.empty()) {
    if (auto r = resolve_region(env)) region = r->region;
  }
  if (region.empty()) region = arn_region;
  if (region.empty()) {
    throw EventBridgeConfigError(
        "no AWS region: give --aws-region, set AWS_REGION, or name the bus by its ARN");
  }
  std::string endpoint = options.endpoint_url;
  if (endpoint.empty()) endpoint = env_value(env, "AWS_ENDPOINT_URL_EVENTS").value_or("");
  if (endpoint.empty()) endpoint = env_value(env, "AWS_ENDPOINT_URL").value_or("");
  if (endpoint.empty()) {
    endpoint = "https://events." + region +
               (region.rfind("cn-", 0) == 0 ? ".amazonaws.com.cn" : ".amazonaws.com");
  }
  try {
    (void)parse_endpoint(endpoint);
  } catch (const std::invalid_argument& e) {
    throw EventBridgeConfigError(std::string("EventBridge endpoint: ") + e.what());
  }
  c.events.endpoint_url = endpoint;
  // Credentials: the caller sets events.credentials_provider (the SDKs' chain, refreshed:
  // credentials_provider.hpp); nothing is asked here.
  c.events.http.max_connections = std::max<std::size_t>(1, options.max_calls);
  c.events.http.request_timeout = options.timeout;
  return c;
}

struct EventBridgePublisher::Impl : std::enable_shared_from_this<Impl> {
  struct Held : HeldRecord {
    PutEventsEntry entry;
    std::size_t size = 0;  // EventBridge's count
    int attempts = 0;
    bool solo = false;  // goes in a call of its own
  };

  boost::asio::any_io_executor executor;
  EventBridgePublisherConfig config;
  DeliveryHandler on_delivery;
  RefusedHandler on_refused;
  EventBridgeClient client;
  boost::asio::steady_timer retry_timer;
  std::size_t max_calls;

  std::map<Seq, Held> held;  // produce order
  std::deque<Seq> ready;     // to send, front first
  std::multimap<Clock::time_point, Seq> retry;
  Seq next_seq = 1;
  std::size_t in_flight = 0;  // calls
  bool stopped = false;
  bool flush_posted = false;
  // Answers and timers of an earlier generation (before a halt or a refusal) are ignored.
  std::uint64_t generation = 0;
  std::size_t calls = 0;
  std::size_t retries = 0;
  RetryLog retry_log;
  std::mt19937_64 rng{std::random_device{}()};

  Impl(boost::asio::any_io_executor ex, EventBridgePublisherConfig c, DeliveryHandler d,
       RefusedHandler r)
      : executor(ex),
        config(std::move(c)),
        on_delivery(std::move(d)),
        on_refused(std::move(r)),
        client(ex, config.events),
        retry_timer(ex),
        max_calls(std::max<std::size_t>(1, config.events.http.max_connections)) {}

  void post_flush() {
    if (flush_posted || stopped) return;
    flush_posted = true;
    boost::asio::post(executor, [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        self->flush_posted = false;
        self->flush();
      }
    });
  }

  std::size_t batch_size() const {
    return next_batch(ready.size(), [this](std::size_t i) {
      const Held& h = held.at(ready[i]);
      // A solo entry is never joined: alone at the front, it ends a batch elsewhere.
      return h.solo ? kPutEventsMaxBytes + 1 : h.size;
    });
  }

  void flush() {
    while (!stopped && in_flight < max_calls && !ready.empty()) {
      const std::size_t n = batch_size();
      std::vector<Seq> seqs(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(n));
      ready.erase(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(n));
      std::vector<PutEventsEntry> entries;
      entries.reserve(n);
      for (Seq s : seqs) entries.push_back(held.at(s).entry);
      ++in_flight;
      ++calls;
      client.put_events(std::move(entries), [weak = weak_from_this(), seqs = std::move(seqs),
                                             gen = generation](PutEventsResult r) {
        auto self = weak.lock();  // kept alive while its handlers run
        if (!self || self->generation != gen) return;
        self->answered(seqs, std::move(r));
      });
    }
  }

  std::chrono::milliseconds backoff(int attempt) {
    return retry_delay(attempt, config.retry_base, config.retry_max, rng);
  }

  void schedule_retry(Seq seq, const std::string& why) {
    auto it = held.find(seq);
    if (it == held.end()) return;
    const auto delay = backoff(it->second.attempts++);
    const auto due = Clock::now() + delay;
    const bool earliest = retry.empty() || due < retry.begin()->first;
    retry.emplace(due, seq);
    ++retries;
    if (const std::size_t entries = retry_log.count(Clock::now())) {
      publisher_logger()->warn(
          "event=eventbridge_retry bus={} entries={} attempt={} retry_in_ms={} error={}",
          quoted(config.bus), entries, it->second.attempts, delay.count(), quoted(why));
    }
    if (earliest) arm_retry_timer();
  }

  void arm_retry_timer() {
    if (retry.empty()) return;
    retry_timer.expires_at(retry.begin()->first);
    retry_timer.async_wait(
        [weak = weak_from_this(), gen = generation](const boost::system::error_code& ec) {
          if (ec) return;  // re-armed for an earlier one, or halted
          auto self = weak.lock();
          if (!self || self->generation != gen) return;
          self->retry_due();
        });
  }

  void retry_due() {
    const auto now = Clock::now();
    while (!retry.empty() && retry.begin()->first <= now) {
      ready.push_back(retry.begin()->second);
      retry.erase(retry.begin());
    }
    arm_retry_timer();
    flush();
  }

  void answered(const std::vector<Seq>& seqs, PutEventsResult r) {
    --in_flight;
    const std::uint64_t gen = generation;
    if (r.error) {
      switch (r.error->kind) {
        case FailureKind::kRetryable:
          for (Seq s : seqs) schedule_retry(s, r.error->message);
          break;
        case FailureKind::kClient:
          refuse(r.error->message);
          return;
        case FailureKind::kFinal:
          if (seqs.size() == 1) {
            deliver_failed(seqs[0], final_kind(r.error->code, r.error->http_status), r.error->code,
                           r.error->message);
          } else {
            // Which entry is bad is not known: each goes again in a call of its own.
            for (auto s = seqs.rbegin(); s != seqs.rend(); ++s) {
              held.at(*s).solo = true;
              ready.push_front(*s);
            }
          }
          break;
      }
    } else {
      for (std::size_t i = 0; i < seqs.size() && i < r.entries.size(); ++i) {
        if (stopped || generation != gen) return;  // a handler halted the publisher
        const PutEventsEntryResult& e = r.entries[i];
        if (e.ok()) {
          deliver_ok(seqs[i]);
        } else if (e.kind == FailureKind::kRetryable) {
          schedule_retry(seqs[i], "EventBridge: " + e.error_code + ": " + e.error_message);
        } else if (e.kind == FailureKind::kClient) {
          refuse("EventBridge refused an entry: " + e.error_code + ": " + e.error_message);
          return;
        } else {
          deliver_failed(seqs[i], final_kind(e.error_code, 0), e.error_code,
                         "EventBridge: " + e.error_code +
                             (e.error_message.empty() ? "" : ": " + e.error_message));
        }
      }
    }
    if (stopped || generation != gen) return;
    flush();
  }

  void deliver_ok(Seq seq) {
    auto it = held.find(seq);
    if (it == held.end()) return;
    const Held h = std::move(it->second);
    held.erase(it);
    on_delivery(h.delivered());
  }

  void report_failed(const Held& h, sink::ErrorKind kind, std::string_view name,
                     const std::string& text) {
    on_delivery(h.failed(kind, name, text));
  }

  void deliver_failed(Seq seq, sink::ErrorKind kind, const std::string& code,
                      const std::string& text) {
    auto it = held.find(seq);
    if (it == held.end()) return;
    const Held h = std::move(it->second);
    held.erase(it);
    publisher_logger()->warn("event=eventbridge_entry_refused bus={} id={} error={}",
                             quoted(h.entry.event_bus_name), quoted(h.id), quoted(text));
    report_failed(h, kind, code, text);
  }

  void refuse(const std::string& message) {
    if (stopped) return;
    stopped = true;
    ++generation;
    retry_timer.cancel();
    publisher_logger()->error("event=eventbridge_refused bus={} held={} error={}",
                              quoted(config.bus), held.size(), quoted(message));
    on_refused(message);
  }

  void halt(const std::string& why) {
    if (stopped) return;
    stopped = true;
    ++generation;
    retry_timer.cancel();
    ready.clear();
    retry.clear();
    in_flight = 0;
    std::map<Seq, Held> failing = std::move(held);
    held.clear();
    publisher_logger()->warn("event=eventbridge_publisher_stopped bus={} held={} reason={}",
                             quoted(config.bus), failing.size(), quoted(why));
    for (const auto& [seq, h] : failing) {
      report_failed(h, sink::ErrorKind::kTransient, "Halted", "EventBridge: " + why);
    }
  }

  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque, bool alone) {
    if (stopped) return {sink::ProduceStatus::kFailed, "EventBridge publisher stopped", false};
    if (held.size() >= config.max_held || (alone && !held.empty())) {
      return {sink::ProduceStatus::kQueueFull, {}, false};
    }
    const bool dead_letter = !config.dlq_topic.empty() && record.topic == config.dlq_topic;
    const std::string& bus = dead_letter && !config.dlq_bus.empty() ? config.dlq_bus : config.bus;
    MappedEntry m = map_record(record, bus);
    if (!m.error.empty()) {
      return {sink::ProduceStatus::kFailed, m.error + " (bus " + bus + ")", m.size_error};
    }
    Held h{HeldRecord::of(record, opaque)};
    h.entry = std::move(m.entry);
    h.size = m.size;
    h.solo = alone;
    const Seq seq = next_seq++;
    held.emplace(seq, std::move(h));
    ready.push_back(seq);
    post_flush();
    return {sink::ProduceStatus::kQueued, {}, false};
  }
};

EventBridgePublisher::EventBridgePublisher(boost::asio::any_io_executor executor,
                                           EventBridgePublisherConfig config,
                                           DeliveryHandler on_delivery, RefusedHandler on_refused)
    : impl_(std::make_shared<Impl>(executor, std::move(config), std::move(on_delivery),
                                   std::move(on_refused))) {}

EventBridgePublisher::~EventBridgePublisher() {
  if (impl_) {
    impl_->stopped = true;
    ++impl_->generation;
  }
}

sink::ProduceResult EventBridgePublisher::produce(const sink::Record& record, std::uint64_t opaque,
                                                  bool alone) {
  return impl_->produce(record, opaque, alone);
}

std::size_t EventBridgePublisher::queued() const { return impl_->held.size(); }
bool EventBridgePublisher::stopped() const { return impl_->stopped; }
void EventBridgePublisher::halt(const std::string& why) { impl_->halt(why); }
std::size_t EventBridgePublisher::calls() const { return impl_->calls; }
std::size_t EventBridgePublisher::retries() const { return impl_->retries; }

}  // namespace outbox::aws
