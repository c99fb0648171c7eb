#include "progress_record.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <stdexcept>
#include <string_view>

#include "outbox/nats/progress_bucket.hpp"
#include "outbox/relay/progress_reader.hpp"

namespace outbox::relay {
namespace asio = boost::asio;
using asio::awaitable;
using pgoutput::Lsn;

// "LSN" (older relays) or "LSN timeline=N" into `out`; anything else is `bad`.
void parse_progress_value(std::string_view v, ProgressRead& out) {
  const std::size_t space = v.find(' ');
  out.last = Lsn::parse(v.substr(0, space));
  out.timeline.reset();
  if (out.last && space != std::string_view::npos) {
    const std::string_view t = v.substr(space + 1);
    std::uint32_t tli = 0;
    const auto [p, ec] = t.starts_with("timeline=")
                             ? std::from_chars(t.data() + 9, t.data() + t.size(), tli)
                             : std::from_chars_result{t.data(), std::errc::invalid_argument};
    if (ec == std::errc() && p == t.data() + t.size()) {
      out.timeline = tli;
    } else {
      out.last.reset();
    }
  }
  out.bad = out.last ? std::string() : std::string(v);
}

namespace {

// The blocking read: the topic to its end, the key's last value.
ProgressRead read_now(const kafka::ConsumerConfig& config, const std::string& topic,
                      const std::string& key, std::chrono::milliseconds timeout) {
  ProgressRead out;
  try {
    kafka::Consumer consumer(config);
    const kafka::TopicPlan plan = consumer.plan(topic, std::nullopt, timeout);
    consumer.read(
        plan.partitions,
        [&](const kafka::ConsumedRecord& r) {
          if (r.key && *r.key == key && r.value) {
            parse_progress_value(*r.value, out);
            out.written_ms.reset();
            if (r.timestamp_ms >= 0) out.written_ms = r.timestamp_ms;
          }
        },
        timeout);
  } catch (const kafka::RefusedError& e) {
    out.error = e.what();
    out.refused = true;
  } catch (const std::runtime_error& e) {
    out.error = e.what();
  }
  return out;
}

// read_now() as a coroutine of its own run on the worker (its parameters live in its frame: a
// lambda with init-captures here was destroyed twice by GCC 12, a double free).
awaitable<ProgressRead> read_blocking(kafka::ConsumerConfig config, std::string topic,
                                      std::string key, std::chrono::milliseconds timeout) {
  co_return read_now(config, topic, key, timeout);
}

}  // namespace

awaitable<ProgressRead> read_progress(asio::thread_pool& worker, kafka::ConsumerConfig config,
                                      std::string topic, std::string key,
                                      std::chrono::milliseconds timeout) {
  awaitable<ProgressRead> task =
      read_blocking(std::move(config), std::move(topic), std::move(key), timeout);
  ProgressRead read =
      co_await asio::co_spawn(worker.get_executor(), std::move(task), asio::use_awaitable);
  co_return read;
}

std::string progress_value(Lsn lsn, std::optional<std::uint32_t> timeline) {
  return timeline ? lsn.to_string() + " timeline=" + std::to_string(*timeline) : lsn.to_string();
}

std::string ProgressLocation::where() const {
  return brokers.empty() ? "JetStream key-value bucket " + nats_bucket
                         : "topic " + checkpoint_topic;
}

std::string progress_key(const std::string& system_id, const std::string& slot) {
  return system_id + "/" + slot;
}

StoredProgress read_stored_progress(const ProgressLocation& where, const std::string& system_id,
                                    const std::string& slot, std::chrono::milliseconds timeout) {
  StoredProgress out;
  out.key = progress_key(system_id, slot);
  ProgressRead read;
  if (!where.brokers.empty()) {
    kafka::ConsumerConfig consumer{where.brokers, where.properties};
    read = read_now(consumer, where.checkpoint_topic, out.key, timeout);
  } else {
    try {
      nats::ProgressBucket bucket(where.nats, where.nats_bucket, timeout);
      const nats::ProgressBucket::Result r = bucket.get(out.key);
      read.error = r.error;
      if (r.value) parse_progress_value(*r.value, read);
    } catch (const std::exception& e) {  // nats::ConfigError: a setting libnats refused
      read.error = e.what();
    }
  }
  out.lsn = read.last;
  out.timeline = read.timeline;
  out.written_ms = read.written_ms;
  out.bad = read.bad;
  out.error = read.error;
  return out;
}

}  // namespace outbox::relay
