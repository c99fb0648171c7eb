#include "outbox/kafka/consumer.hpp"

#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "outbox/common/c_handle.hpp"
#include "security.hpp"

namespace outbox::kafka {
namespace {

using common::CHandle;

void destroy_consumer(rd_kafka_t* rk) {
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
}
void destroy_metadata(const rd_kafka_metadata_t* md) { rd_kafka_metadata_destroy(md); }

using ConfHandle = CHandle<rd_kafka_conf_t, rd_kafka_conf_destroy>;
using KafkaHandle = CHandle<rd_kafka_t, destroy_consumer>;
using TopicHandle = CHandle<rd_kafka_topic_t, rd_kafka_topic_destroy>;
using ListHandle = CHandle<rd_kafka_topic_partition_list_t, rd_kafka_topic_partition_list_destroy>;
using MessageHandle = CHandle<rd_kafka_message_t, rd_kafka_message_destroy>;
using MetadataHandle = CHandle<const rd_kafka_metadata_t, destroy_metadata>;

using Clock = std::chrono::steady_clock;

constexpr int kMetadataTryMs = 1000;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

std::string where(const std::string& topic, std::int32_t partition) {
  return topic + " partition " + std::to_string(partition);
}

// Stops fetching a partition that has been read to its end.
void pause(rd_kafka_t* rk, const std::pair<std::string, std::int32_t>& tp) {
  ListHandle list(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(list.get(), tp.first.c_str(), tp.second);
  rd_kafka_pause_partitions(rk, list.get());
}

}  // namespace

struct Consumer::Impl {
  // Set by error_cb (served on the caller's thread, inside rd_kafka_consumer_poll) when a broker
  // refused the client's login or certificate: librdkafka would retry it for ever, so the
  // command ends at once, naming the broker.
  std::string refused;
  // After `refused`: destroying the handle (consumer_close) may still serve error_cb.
  KafkaHandle rk;

  static void error_cb(rd_kafka_t*, int err, const char* reason, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    const ClientError kind = classify_client_error(err, reason);
    if (kind == ClientError::kOther) {
      // What librdkafka prints without an error callback; it retries these by itself.
      std::fprintf(stderr, "kafka: %s: %s\n",
                   rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
      return;
    }
    if (!self->refused.empty()) return;
    self->refused = std::string("Kafka broker ") +
                    (kind == ClientError::kAuthentication ? "authentication refused"
                                                          : "TLS certificate refused") +
                    " (" + rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)) +
                    "): " + reason;
  }

  void throw_if_refused() const {
    if (!refused.empty()) throw RefusedError(refused);
  }
};

Consumer::Consumer(const ConsumerConfig& config) : impl_(std::make_unique<Impl>()) {
  ConfHandle conf(rd_kafka_conf_new());
  auto set = [&](const std::string& k, const std::string& v) { set_property(conf.get(), k, v); };
  set("bootstrap.servers", config.brokers);
  // A group of our own that is never joined (assign, not subscribe) and never committed to.
  set("group.id", "outbox-relay-reconcile-" + std::to_string(::getpid()));
  set("enable.auto.commit", "false");
  set("enable.auto.offset.store", "false");
  set("enable.partition.eof", "true");
  set("allow.auto.create.topics", "false");
  // What a consumer of the topics sees: records of aborted transactions do not count.
  set("isolation.level", config.read_committed ? "read_committed" : "read_uncommitted");
  // Records removed by retention between planning and reading: go on from the log start.
  set("auto.offset.reset", "earliest");
  // Bounds librdkafka's prefetch, per partition in librdkafka 2.0 (the default is 64 MiB). Smaller
  // is slower there: a partition whose queue is full is not fetched again for a second.
  set("queued.max.messages.kbytes", std::to_string(kQueuedKiBPerPartition));
  set("log.connection.close", "false");
  for (const auto& [k, v] : config.properties) set(k, v);
  refuse_unsupported_sasl(conf.get());
  rd_kafka_conf_set_opaque(conf.get(), impl_.get());
  rd_kafka_conf_set_error_cb(conf.get(), &Impl::error_cb);
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) throw ConfigError(std::string("Kafka consumer: ") + errstr);
  conf.release();  // owned by rk from here on
  impl_->rk.reset(rk);
  rd_kafka_poll_set_consumer(rk);
}

Consumer::~Consumer() = default;

TopicPlan Consumer::plan(const std::string& topic, std::optional<std::int64_t> from_ms,
                         std::chrono::milliseconds timeout) {
  rd_kafka_t* rk = impl_->rk.get();
  const auto deadline = Clock::now() + timeout;
  TopicPlan plan;
  plan.topic = topic;
  TopicHandle handle(rd_kafka_topic_new(rk, topic.c_str(), nullptr));
  if (!handle) {
    throw std::runtime_error("topic " + topic + ": " + rd_kafka_err2str(rd_kafka_last_error()));
  }
  // Metadata: a topic being created may answer LEADER_NOT_AVAILABLE for a moment; retry those.
  MetadataHandle metadata;
  for (;;) {
    const rd_kafka_metadata_t* raw = nullptr;
    const rd_kafka_resp_err_t err =
        // At most a second a try, so that a refused login (served between tries) ends it early.
        rd_kafka_metadata(rk, 0, handle.get(), &raw,
                          std::clamp(remaining_ms(deadline), 1, kMetadataTryMs));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      metadata.reset(raw);
      const rd_kafka_resp_err_t topic_err = metadata->topics[0].err;
      if (topic_err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
          topic_err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
        return plan;  // exists = false
      }
      if (topic_err == RD_KAFKA_RESP_ERR_NO_ERROR && metadata->topics[0].partition_cnt > 0) break;
      if (Clock::now() >= deadline) {
        throw std::runtime_error("metadata of topic " + topic + ": " +
                                 rd_kafka_err2name(topic_err));
      }
    } else if (Clock::now() >= deadline) {
      throw std::runtime_error("metadata of topic " + topic + ": " + rd_kafka_err2name(err) +
                               " (no answer from the brokers in time)");
    }
    // Between metadata retries; serves the client's error events meanwhile (nothing is assigned
    // yet, so no record comes).
    MessageHandle event(rd_kafka_consumer_poll(rk, 100));
    impl_->throw_if_refused();
  }
  plan.exists = true;
  const auto& md = metadata->topics[0];
  ListHandle times(rd_kafka_topic_partition_list_new(md.partition_cnt));
  for (int i = 0; i < md.partition_cnt; ++i) {
    PartitionRange range;
    range.topic = topic;
    range.partition = md.partitions[i].id;
    std::int64_t low = 0, high = 0;
    const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        rk, topic.c_str(), range.partition, &low, &high, std::max(1, remaining_ms(deadline)));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("offsets of " + where(topic, range.partition) + ": " +
                               rd_kafka_err2name(err));
    }
    range.start = low;
    range.end = high;
    plan.partitions.push_back(range);
    if (from_ms)
      rd_kafka_topic_partition_list_add(times.get(), topic.c_str(), range.partition)->offset =
          *from_ms;
  }
  if (from_ms) {
    const rd_kafka_resp_err_t err =
        rd_kafka_offsets_for_times(rk, times.get(), std::max(1, remaining_ms(deadline)));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("offsets for times of topic " + topic + ": " +
                               rd_kafka_err2name(err));
    }
    for (int i = 0; i < times->cnt; ++i) {
      const auto& e = times->elems[i];
      if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        throw std::runtime_error("offsets for times of " + where(topic, e.partition) + ": " +
                                 rd_kafka_err2name(e.err));
      }
      for (auto& range : plan.partitions) {
        if (range.partition != e.partition) continue;
        // -1: no record at or after that time, so nothing to read.
        range.start = e.offset < 0 ? range.end : std::clamp(e.offset, range.start, range.end);
      }
    }
  }
  return plan;
}

std::uint64_t Consumer::read(const std::vector<PartitionRange>& ranges,
                             const std::function<void(const ConsumedRecord&)>& on_record,
                             std::chrono::milliseconds idle_timeout) {
  std::uint64_t count = 0;
  for (std::size_t first = 0; first < ranges.size(); first += kMaxAssigned) {
    const std::size_t last = std::min(ranges.size(), first + kMaxAssigned);
    count += read_group(std::span<const PartitionRange>(ranges.data() + first, last - first),
                        on_record, idle_timeout);
  }
  return count;
}

std::uint64_t Consumer::read_group(std::span<const PartitionRange> ranges,
                                   const std::function<void(const ConsumedRecord&)>& on_record,
                                   std::chrono::milliseconds idle_timeout) {
  rd_kafka_t* rk = impl_->rk.get();
  // Partitions still being read, by (topic, partition): their end offset.
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> open;
  ListHandle assignment(rd_kafka_topic_partition_list_new(static_cast<int>(ranges.size())));
  for (const auto& r : ranges) {
    if (r.start >= r.end) continue;
    rd_kafka_topic_partition_list_add(assignment.get(), r.topic.c_str(), r.partition)->offset =
        r.start;
    open[{r.topic, r.partition}] = r.end;
  }
  if (open.empty()) return 0;
  if (rd_kafka_resp_err_t err = rd_kafka_assign(rk, assignment.get());
      err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error(std::string("assign partitions: ") + rd_kafka_err2name(err));
  }
  std::uint64_t count = 0;
  auto last_progress = Clock::now();
  std::pair<std::string, std::int32_t> key;
  while (!open.empty()) {
    MessageHandle msg(rd_kafka_consumer_poll(rk, 100));
    impl_->throw_if_refused();
    if (!msg) {
      if (Clock::now() - last_progress >= idle_timeout) {
        const auto& [tp, end] = *open.begin();
        rd_kafka_assign(rk, nullptr);
        throw std::runtime_error("no record from " + where(tp.first, tp.second) + " (and " +
                                 std::to_string(open.size() - 1) + " other partitions) for " +
                                 std::to_string(idle_timeout.count()) +
                                 " ms before its end offset " + std::to_string(end));
      }
      continue;
    }
    last_progress = Clock::now();
    key.first = msg->rkt ? rd_kafka_topic_name(msg->rkt) : "";
    key.second = msg->partition;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (open.erase(key) != 0) pause(rk, key);
      continue;
    }
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR && msg->rkt == nullptr) {
      // A client-wide error (broker connection lost...): librdkafka retries by itself, and the
      // idle timeout reports an outage that lasts; a refused login or certificate ends it.
      continue;
    }
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_assign(rk, nullptr);
      throw std::runtime_error("reading " + where(key.first, key.second) + ": " +
                               rd_kafka_err2name(msg->err) + ": " +
                               rd_kafka_message_errstr(msg.get()));
    }
    auto it = open.find(key);
    if (it == open.end()) continue;  // a partition already done (prefetched beyond its end)
    if (msg->offset >= it->second) {
      open.erase(it);
      pause(rk, key);
      continue;
    }
    ++count;
    ConsumedRecord record;
    record.topic = key.first;
    record.partition = msg->partition;
    record.offset = msg->offset;
    rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    record.timestamp_ms = rd_kafka_message_timestamp(msg.get(), &type);
    if (msg->key != nullptr) {
      record.key.emplace(static_cast<const char*>(msg->key), msg->key_len);
    }
    if (msg->payload != nullptr) {
      record.value.emplace(static_cast<const char*>(msg->payload), msg->len);
    }
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(msg.get(), &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const void* value = nullptr;
      size_t size = 0;
      if (rd_kafka_header_get_last(headers, "id", &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          value != nullptr) {
        record.id_header.emplace(static_cast<const char*>(value), size);
      }
    }
    on_record(record);
    if (msg->offset + 1 >= it->second) {
      open.erase(it);
      pause(rk, key);
    }
  }
  rd_kafka_assign(rk, nullptr);
  return count;
}

}  // namespace outbox::kafka
