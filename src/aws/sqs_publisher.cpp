#include "outbox/aws/sqs_publisher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <map>
#include <random>
#include <stdexcept>

#include "outbox/common/log_text.hpp"
#include "publisher_parts.hpp"
#include "sqs_batching.hpp"

namespace outbox::aws {

namespace {

using Clock = std::chrono::steady_clock;
using common::quoted;

// scheme://host[:port] of a URL, and its path.
std::pair<std::string, std::string> split_url(const std::string& url, const char* what) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.substr(0, scheme) != "http" && url.substr(0, scheme) != "https")) {
    throw SqsConfigError(std::string(what) + " \"" + url.substr(0, 200) +
                         "\" is not an http:// or https:// URL");
  }
  const auto path = url.find('/', scheme + 3);
  if (path == std::string::npos || path + 1 >= url.size()) {
    throw SqsConfigError(std::string(what) + " \"" + url.substr(0, 200) +
                         "\" has no path (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)");
  }
  return {url.substr(0, path), url.substr(path)};
}

// sqs.REGION.amazonaws.com[.cn] or REGION.queue.amazonaws.com.
std::string region_of_host(std::string host) {
  if (auto colon = host.find(':'); colon != std::string::npos) host.resize(colon);
  if (host.starts_with("sqs.")) {
    const auto dot = host.find('.', 4);
    if (dot != std::string::npos && host.find(".amazonaws.com", dot) == dot) {
      return host.substr(4, dot - 4);
    }
  }
  if (auto q = host.find(".queue.amazonaws.com"); q != std::string::npos && q > 0) {
    return host.substr(0, q);
  }
  return {};
}

sink::ErrorKind final_kind(std::string_view code) {
  if (code == "MessageTooLong" || code == "BatchRequestTooLong" ||
      code == "AWS.SimpleQueueService.BatchRequestTooLong") {
    return sink::ErrorKind::kSize;
  }
  return sink::ErrorKind::kRecord;
}

}  // namespace

SqsPublisherConfig resolve_sqs_config(const SqsSinkOptions& options, const EnvLookup& env) {
  SqsPublisherConfig c;
  c.queue_url = options.queue_url;
  c.dlq_queue_url = options.dlq_queue_url;
  const auto [origin, path] = split_url(options.queue_url, "--sqs");
  if (!options.dlq_queue_url.empty()) (void)split_url(options.dlq_queue_url, "--sqs-dlq");
  auto from_env = [&](std::string_view name) -> std::string {
    auto v = env(name);
    return v ? *v : std::string();
  };
  c.sqs.endpoint_url = options.endpoint_url;
  if (c.sqs.endpoint_url.empty()) c.sqs.endpoint_url = from_env("AWS_ENDPOINT_URL_SQS");
  if (c.sqs.endpoint_url.empty()) c.sqs.endpoint_url = from_env("AWS_ENDPOINT_URL");
  if (c.sqs.endpoint_url.empty()) c.sqs.endpoint_url = origin;
  try {
    (void)parse_endpoint(c.sqs.endpoint_url);
  } catch (const std::invalid_argument& e) {
    throw SqsConfigError(std::string("endpoint (--aws-endpoint, AWS_ENDPOINT_URL_SQS, "
                                     "AWS_ENDPOINT_URL): ") +
                         e.what());
  }
  c.sqs.region = options.region;
  if (c.sqs.region.empty()) {
    if (auto r = resolve_region(env)) c.sqs.region = r->region;
  }
  if (c.sqs.region.empty()) c.sqs.region = region_of_host(origin.substr(origin.find("://") + 3));
  if (c.sqs.region.empty()) {
    throw SqsConfigError(
        "no AWS region: give --aws-region, or AWS_REGION, or a profile's region, or a queue "
        "URL of sqs.REGION.amazonaws.com");
  }
  // Credentials: the caller sets sqs.credentials_provider (the SDKs' chain, refreshed:
  // credentials_provider.hpp); nothing is asked here.
  c.sqs.http.max_connections = std::max<std::size_t>(1, options.max_calls);
  c.sqs.http.request_timeout = options.timeout;
  return c;
}

struct SqsPublisher::Impl : std::enable_shared_from_this<SqsPublisher::Impl> {
  using Seq = GroupScheduler::Seq;

  struct Held : HeldRecord {
    int queue = 0;
    bool alone = false;
    int attempts = 0;
    SqsSendEntry entry;
  };

  struct Queue {
    std::string url;
    std::optional<QueueAttributes> attributes;
    GroupScheduler scheduler;
    int attribute_attempts = 0;   // GetQueueAttributes calls that failed (retryable) so far
    std::string attribute_error;  // the last one's error
  };

  boost::asio::any_io_executor executor;
  SqsPublisherConfig config;
  DeliveryHandler on_delivery;
  FatalHandler on_fatal;
  RefusedHandler on_refused;
  std::unique_ptr<SqsClient> client;
  std::vector<Queue> queues;  // [0] the queue, [1] the dead-letter queue when given
  std::map<Seq, Held> held;   // by produce order
  Seq next_seq = 0;
  std::size_t calls_in_flight = 0;
  std::size_t calls = 0;
  bool stopped = false;
  bool pump_posted = false;
  std::uint64_t generation = 0;  // a stop makes every answer still due stale
  boost::asio::steady_timer retry_timer;
  std::optional<Clock::time_point> retry_at;
  std::mt19937_64 rng{std::random_device{}()};
  RetryLog retry_log;

  Impl(boost::asio::any_io_executor ex, SqsPublisherConfig c)
      : executor(ex), config(std::move(c)), retry_timer(ex) {}

  bool ready() const {
    return std::all_of(queues.begin(), queues.end(),
                       [](const Queue& q) { return q.attributes.has_value(); });
  }

  std::chrono::milliseconds backoff(int attempts) {
    return retry_delay(attempts, config.retry_base, config.retry_max, rng);
  }

  // ---- start: the queues' attributes ----
  void fetch_attributes(int q) {
    const std::uint64_t gen = generation;
    client->get_queue_attributes(queues[q].url,
                                 [w = weak_from_this(), q, gen](SqsQueueAttributesResult r) {
                                   auto self = w.lock();
                                   if (!self || self->generation != gen || self->stopped) return;
                                   self->on_attributes(q, std::move(r));
                                 });
  }

  void on_attributes(int q, SqsQueueAttributesResult r) {
    Queue& queue = queues[q];
    if (!r.error) {
      queue.attributes = r.attributes;
      publisher_logger()->info(
          "event=sqs_queue queue={} fifo={} content_based_deduplication={} "
          "maximum_message_size={} attempts={}",
          quoted(queue.url), r.attributes.fifo, r.attributes.content_based_deduplication,
          r.attributes.maximum_message_size, queue.attribute_attempts + 1);
      if (!r.attributes.fifo) {
        publisher_logger()->warn(
            "event=sqs_standard_queue queue={}: a standard queue keeps no order and may deliver "
            "a message more than once (docs/aws.md); use a FIFO queue for per-aggregate order",
            quoted(queue.url));
      }
      return;
    }
    switch (r.error->kind) {
      case FailureKind::kRetryable: {
        // No deadline, as for a Kafka or NATS server the relay cannot reach: each attempt is
        // logged; nothing is sent meanwhile (produce() answers kQueueFull).
        const auto delay = backoff(queue.attribute_attempts++);
        queue.attribute_error = r.error->message;
        publisher_logger()->warn(
            "event=sqs_unavailable queue={} attempt={} retry_in_ms={} error={}: nothing is sent "
            "until the queue answers GetQueueAttributes",
            quoted(queue.url), queue.attribute_attempts, delay.count(), quoted(r.error->message));
        auto timer = std::make_shared<boost::asio::steady_timer>(executor, delay);
        const std::uint64_t gen = generation;
        timer->async_wait([w = weak_from_this(), q, gen, timer](const boost::system::error_code&) {
          auto self = w.lock();
          if (!self || self->generation != gen || self->stopped) return;
          self->fetch_attributes(q);
        });
        return;
      }
      case FailureKind::kClient:
      case FailureKind::kFinal: {
        const std::string why =
            r.error->kind == FailureKind::kClient
                ? r.error->message
                : "SQS queue " + queue.url + " cannot be used: " + r.error->message;
        auto keep = shared_from_this();
        if (on_refused) on_refused(why);
        stop(why, {}, true);
        return;
      }
    }
  }

  // ---- sending ----
  void post_pump() {
    if (pump_posted || stopped) return;
    pump_posted = true;
    boost::asio::post(executor, [w = weak_from_this()]() {
      auto self = w.lock();
      if (!self) return;
      self->pump_posted = false;
      self->pump();
    });
  }

  void pump() {
    if (stopped || !ready()) return;
    const auto now = Clock::now();
    bool sent = true;
    while (sent && calls_in_flight < config.sqs.http.max_connections) {
      sent = false;
      for (int q = 0; q < static_cast<int>(queues.size()); ++q) {
        if (calls_in_flight >= config.sqs.http.max_connections) break;
        std::vector<Seq> batch =
            queues[q].scheduler.next_batch(kSqsMaxBatchEntries, kSqsMaxBatchBytes, now);
        if (batch.empty()) continue;
        send(q, std::move(batch));
        sent = true;
      }
    }
    arm_retry_timer();
  }

  void send(int q, std::vector<Seq> batch) {
    std::vector<SqsSendEntry> entries;
    entries.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      SqsSendEntry e = held.at(batch[i]).entry;
      e.id = "e" + std::to_string(i);
      entries.push_back(std::move(e));
    }
    ++calls_in_flight;
    ++calls;
    const std::uint64_t gen = generation;
    client->send_message_batch(
        queues[q].url, std::move(entries), queues[q].attributes->maximum_message_size,
        [w = weak_from_this(), q, gen, batch = std::move(batch)](SqsBatchResult r) {
          auto self = w.lock();
          if (!self || self->generation != gen) return;
          --self->calls_in_flight;
          self->on_batch(q, batch, std::move(r));
        });
  }

  void retry(int q, Seq seq, const std::string& why) {
    Held& h = held.at(seq);
    const auto delay = backoff(h.attempts++);
    queues[q].scheduler.retry(seq, Clock::now() + delay);
    if (const std::size_t entries = retry_log.count(Clock::now())) {
      publisher_logger()->warn(
          "event=sqs_retry queue={} entries={} attempt={} retry_in_ms={} error={}",
          quoted(queues[q].url), entries, h.attempts, delay.count(), quoted(why));
    }
  }

  void deliver_ok(Seq seq) {
    auto it = held.find(seq);
    if (it == held.end()) return;
    Held h = std::move(it->second);
    held.erase(it);
    queues[h.queue].scheduler.done(seq);
    on_delivery(h.delivered());
  }

  void deliver_failed(const Held& h, sink::ErrorKind kind, std::string_view name,
                      const std::string& text) {
    on_delivery(h.failed(kind, name, text));
  }

  // A final refusal of an entry sent alone: its report, and the publisher goes on.
  void deliver_final(Seq seq, sink::ErrorKind kind, const std::string& code,
                     const std::string& text) {
    auto it = held.find(seq);
    if (it == held.end()) return;
    Held h = std::move(it->second);
    held.erase(it);
    queues[h.queue].scheduler.done(seq);
    deliver_failed(h, kind, code, text);
  }

  struct Refusal {
    sink::ErrorKind kind;
    std::string code;
    std::string text;
  };

  void on_batch(int q, const std::vector<Seq>& batch, SqsBatchResult r) {
    auto keep = shared_from_this();
    const std::string& url = queues[q].url;
    if (r.error) {
      switch (r.error->kind) {
        case FailureKind::kRetryable:
          for (Seq s : batch) retry(q, s, r.error->message);
          post_pump();
          return;
        case FailureKind::kClient:
          if (on_refused) on_refused(r.error->message);
          stop(r.error->message, {}, true);
          return;
        case FailureKind::kFinal: {
          if (batch.size() == 1 && held.at(batch[0]).alone) {
            deliver_final(batch[0], final_kind(r.error->code), r.error->code,
                          "SQS refused the message for queue " + url + ": " + r.error->message);
            post_pump();
            return;
          }
          // Which entry made the call fail is not known: each goes alone after the rewind.
          std::map<Seq, Refusal> refused;
          const sink::ErrorKind kind =
              batch.size() == 1 ? final_kind(r.error->code) : sink::ErrorKind::kBatch;
          for (Seq s : batch) {
            refused[s] = {
                kind, r.error->code,
                "SQS refused a SendMessageBatch call to " + url + ": " + r.error->message};
          }
          stop("SQS refused a SendMessageBatch call to " + url + ": " + r.error->message,
               std::move(refused), true);
          return;
        }
      }
      return;
    }
    // Entries by their call's id ("e<index>").
    auto seq_of = [&batch](const std::string& id) -> std::optional<Seq> {
      if (id.size() < 2 || id[0] != 'e') return std::nullopt;
      std::size_t i = 0;
      const auto [end, ec] = std::from_chars(id.data() + 1, id.data() + id.size(), i);
      if (ec != std::errc() || end != id.data() + id.size() || i >= batch.size()) {
        return std::nullopt;
      }
      return batch[i];
    };
    std::map<Seq, Refusal> refused;
    std::optional<std::string> client_refused;
    for (const SqsEntryFailure& f : r.failed) {
      const auto seq = seq_of(f.id);
      if (!seq) continue;
      const std::string text = "SQS refused the message for queue " + url + ": " + f.code +
                               (f.message.empty() ? "" : ": " + f.message);
      switch (f.kind) {
        case FailureKind::kRetryable:
          retry(q, *seq, text);
          break;
        case FailureKind::kClient:
          client_refused = text;
          break;
        case FailureKind::kFinal:
          refused[*seq] = {final_kind(f.code), f.code, text};
          break;
      }
    }
    for (const SqsEntrySuccess& s : r.successful) {
      if (const auto seq = seq_of(s.id)) deliver_ok(*seq);
      if (stopped) return;  // a handler halted the publisher
    }
    if (client_refused) {
      if (on_refused) on_refused(*client_refused);
      stop(*client_refused, {}, true);
      return;
    }
    if (!refused.empty()) {
      const bool alone = refused.size() == 1 && batch.size() == 1 &&
                         held.count(refused.begin()->first) > 0 &&
                         held.at(refused.begin()->first).alone;
      if (alone) {
        const auto& [seq, why] = *refused.begin();
        deliver_final(seq, why.kind, why.code, why.text);
      } else {
        const std::string why = refused.begin()->second.text;
        stop(why, std::move(refused), true);
        return;
      }
    }
    post_pump();
  }

  void arm_retry_timer() {
    std::optional<Clock::time_point> next;
    for (const Queue& q : queues) {
      if (auto t = q.scheduler.next_retry(); t && (!next || *t < *next)) next = t;
    }
    if (!next || (retry_at && *retry_at <= *next)) return;
    retry_at = next;
    retry_timer.expires_at(*next);
    retry_timer.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      auto self = w.lock();
      if (!self || ec) return;
      self->retry_at.reset();
      self->pump();
    });
  }

  // Stops: nothing more is sent; every record held is reported failed in produce order, the
  // refused ones with their own kind, the others kTransient.
  void stop(const std::string& why, std::map<Seq, Refusal> refused, bool fatal) {
    if (stopped) return;
    stopped = true;
    ++generation;
    retry_timer.cancel();
    auto keep = shared_from_this();
    publisher_logger()->warn("event=sqs_publisher_stopped held={} reason={}", held.size(),
                             quoted(why));
    if (fatal && on_fatal) on_fatal(why);
    auto pending = std::move(held);
    held.clear();
    for (Queue& q : queues) q.scheduler.clear();
    for (auto& [seq, h] : pending) {
      if (auto it = refused.find(seq); it != refused.end()) {
        deliver_failed(h, it->second.kind, it->second.code, it->second.text);
      } else {
        deliver_failed(h, sink::ErrorKind::kTransient, "SQS_STOPPED", why);
      }
    }
  }
};

SqsPublisher::SqsPublisher(boost::asio::any_io_executor executor, SqsPublisherConfig config,
                           DeliveryHandler on_delivery, FatalHandler on_fatal,
                           RefusedHandler on_refused)
    : impl_(std::make_shared<Impl>(executor, std::move(config))) {
  Impl& im = *impl_;
  im.on_delivery = std::move(on_delivery);
  im.on_fatal = std::move(on_fatal);
  im.on_refused = std::move(on_refused);
  im.client = std::make_unique<SqsClient>(executor, im.config.sqs);
  im.queues.resize(im.config.dlq_queue_url.empty() ? 1 : 2);
  im.queues[0].url = im.config.queue_url;
  if (im.queues.size() > 1) im.queues[1].url = im.config.dlq_queue_url;
  for (int q = 0; q < static_cast<int>(im.queues.size()); ++q) im.fetch_attributes(q);
}

SqsPublisher::~SqsPublisher() {
  if (!impl_) return;
  ++impl_->generation;
  impl_->stopped = true;
  impl_->retry_timer.cancel();
}

sink::ProduceResult SqsPublisher::produce(const sink::Record& record, std::uint64_t opaque,
                                          bool alone) {
  Impl& im = *impl_;
  if (im.stopped) return {sink::ProduceStatus::kFailed, "SQS publisher stopped", false};
  if (!im.ready() || im.held.size() >= im.config.max_held || (alone && !im.held.empty())) {
    return {sink::ProduceStatus::kQueueFull, {}, false};
  }
  const int q =
      !im.config.dlq_topic.empty() && record.topic == im.config.dlq_topic && im.queues.size() > 1
          ? 1
          : 0;
  const QueueAttributes& attributes = *im.queues[q].attributes;
  MappedMessage m = map_record(record, attributes.fifo, attributes.maximum_message_size);
  if (!m.error.empty()) {
    return {sink::ProduceStatus::kFailed, m.error + " (queue " + im.queues[q].url + ")",
            m.size_error};
  }
  Impl::Held h{HeldRecord::of(record, opaque)};
  h.queue = q;
  h.alone = alone;
  h.entry = std::move(m.entry);
  const Impl::Seq seq = ++im.next_seq;
  const std::size_t size = message_size(h.entry);
  im.queues[q].scheduler.add(seq, h.entry.group_id, size);
  im.held.emplace(seq, std::move(h));
  im.post_pump();
  return {sink::ProduceStatus::kQueued, {}, false};
}

std::size_t SqsPublisher::queued() const { return impl_->held.size(); }
bool SqsPublisher::stopped() const { return impl_->stopped; }
bool SqsPublisher::ready() const { return impl_->ready(); }
std::optional<QueueAttributes> SqsPublisher::attributes() const {
  return impl_->queues[0].attributes;
}
void SqsPublisher::halt(const std::string& why) { impl_->stop(why, {}, false); }
std::size_t SqsPublisher::calls() const { return impl_->calls; }
std::size_t SqsPublisher::connections_opened() const {
  return impl_->client->http().connections_opened();
}

}  // namespace outbox::aws
