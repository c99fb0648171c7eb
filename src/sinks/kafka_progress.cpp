#include "kafka_progress.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <stdexcept>

namespace outbox::sinks {
namespace asio = boost::asio;
using asio::awaitable;
using relay::ProgressRead;

ProgressRead read_kafka_progress(const kafka::ConsumerConfig& config, const std::string& topic,
                                 const std::string& key, std::chrono::milliseconds timeout) {
  ProgressRead out;
  try {
    kafka::Consumer consumer(config);
    const kafka::TopicPlan plan = consumer.plan(topic, std::nullopt, timeout);
    consumer.read(
        plan.partitions,
        [&](const kafka::ConsumedRecord& r) {
          if (r.key && *r.key == key && r.value) {
            relay::parse_progress_value(*r.value, out);
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

namespace {

// read_kafka_progress() as a coroutine of its own run on the worker (its parameters live in its
// frame: a lambda with init-captures here was destroyed twice by GCC 12, a double free).
awaitable<ProgressRead> read_blocking(kafka::ConsumerConfig config, std::string topic,
                                      std::string key, std::chrono::milliseconds timeout) {
  co_return read_kafka_progress(config, topic, key, timeout);
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

}  // namespace outbox::sinks
