#include "outbox_test/kafka_reader.hpp"

#include <librdkafka/rdkafka.h>

#include <stdexcept>

#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const noexcept { rd_kafka_conf_destroy(conf); }
};
struct TopicDeleter {
  void operator()(rd_kafka_topic_t* topic) const noexcept { rd_kafka_topic_destroy(topic); }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* metadata) const noexcept {
    rd_kafka_metadata_destroy(metadata);
  }
};
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const noexcept {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
struct MessageDeleter {
  void operator()(rd_kafka_message_t* message) const noexcept { rd_kafka_message_destroy(message); }
};
struct ErrorDeleter {
  void operator()(rd_kafka_error_t* error) const noexcept { rd_kafka_error_destroy(error); }
};

void set(rd_kafka_conf_t* conf, const char* name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name, value.c_str(), errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
    throw std::runtime_error(std::string("librdkafka consumer config ") + name + ": " + errstr);
  }
}

constexpr auto kMetadataRetry = std::chrono::milliseconds(250);

}  // namespace

void KafkaReader::Deleter::operator()(rd_kafka_s* rk) const noexcept {
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
}

KafkaReader::KafkaReader(const std::string& brokers, std::vector<std::string> topics)
    : topics_(std::move(topics)) {
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  set(conf.get(), "bootstrap.servers", brokers);
  // A group.id of our own keeps us apart from anything else; we never join it (assign, not
  // subscribe) and never commit.
  set(conf.get(), "group.id", "outbox-it-reader-" + unique_suffix());
  set(conf.get(), "enable.auto.commit", "false");
  set(conf.get(), "auto.offset.reset", "earliest");
  set(conf.get(), "allow.auto.create.topics", "false");
  set(conf.get(), "topic.metadata.refresh.interval.ms", "1000");
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) throw std::runtime_error(std::string("rd_kafka_new: ") + errstr);
  conf.release();  // owned by rk from here on
  rk_.reset(rk);
  rd_kafka_poll_set_consumer(rk);
  next_metadata_ = Clock::now();
}

KafkaReader::~KafkaReader() = default;

std::optional<std::int32_t> KafkaReader::partition_count(const std::string& topic) const {
  auto it = partitions_.find(topic);
  if (it == partitions_.end()) return std::nullopt;
  return it->second;
}

void KafkaReader::assign_new_topics() {
  if (partitions_.size() == topics_.size() || Clock::now() < next_metadata_) return;
  next_metadata_ = Clock::now() + kMetadataRetry;
  for (const auto& name : topics_) {
    if (partitions_.count(name) != 0) continue;
    std::unique_ptr<rd_kafka_topic_t, TopicDeleter> topic(
        rd_kafka_topic_new(rk_.get(), name.c_str(), nullptr));
    if (!topic) continue;
    const rd_kafka_metadata_t* raw = nullptr;
    // A topic the relay has not created yet answers UNKNOWN_TOPIC_OR_PART (or a timeout while the
    // broker starts): try again on the next round.
    if (rd_kafka_metadata(rk_.get(), 0, topic.get(), &raw, 2000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      continue;
    }
    std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter> metadata(raw);
    if (metadata->topic_cnt != 1 || metadata->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
        metadata->topics[0].partition_cnt <= 0) {
      continue;
    }
    const auto& md_topic = metadata->topics[0];
    std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter> list(
        rd_kafka_topic_partition_list_new(md_topic.partition_cnt));
    for (int i = 0; i < md_topic.partition_cnt; ++i) {
      rd_kafka_topic_partition_list_add(list.get(), name.c_str(), md_topic.partitions[i].id)
          ->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    std::unique_ptr<rd_kafka_error_t, ErrorDeleter> error(
        rd_kafka_incremental_assign(rk_.get(), list.get()));
    if (error) {
      throw std::runtime_error("assigning " + name + ": " + rd_kafka_error_string(error.get()));
    }
    partitions_[name] = md_topic.partition_cnt;
  }
}

void KafkaReader::poll_once(std::chrono::milliseconds timeout) {
  assign_new_topics();
  if (partitions_.empty()) {
    // Nothing assigned yet: consumer_poll would return at once; pace the metadata retries.
    rd_kafka_poll(rk_.get(), static_cast<int>(timeout.count()));
    return;
  }
  for (int budget = 10000; budget > 0; --budget) {
    std::unique_ptr<rd_kafka_message_t, MessageDeleter> message(
        rd_kafka_consumer_poll(rk_.get(), budget == 10000 ? static_cast<int>(timeout.count()) : 0));
    if (!message) return;
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (message->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
          message->err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART &&
          message->err != RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
        errors_.push_back(rd_kafka_message_errstr(message.get()));
      }
      continue;
    }
    Record record;
    record.topic = rd_kafka_topic_name(message->rkt);
    record.partition = message->partition;
    record.offset = message->offset;
    if (message->key != nullptr) {
      record.key.emplace(static_cast<const char*>(message->key), message->key_len);
    }
    if (message->payload != nullptr && transform_) {
      record.value =
          transform_(std::string_view(static_cast<const char*>(message->payload), message->len));
    } else if (message->payload != nullptr && keep_values_) {
      record.value.assign(static_cast<const char*>(message->payload), message->len);
    }
    record.null_value = message->payload == nullptr;
    rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    record.timestamp_ms = rd_kafka_message_timestamp(message.get(), &type);
    record.create_time = type == RD_KAFKA_TIMESTAMP_CREATE_TIME;
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(message.get(), &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0;
           rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        record.headers[name] =
            value != nullptr ? std::string(static_cast<const char*>(value), size) : std::string();
        record.header_list.emplace_back(name, value != nullptr
                                                  ? std::optional<std::string>(std::string(
                                                        static_cast<const char*>(value), size))
                                                  : std::nullopt);
        if (value == nullptr) {
          record.null_headers.insert(name);
        } else {
          record.null_headers.erase(name);
        }
      }
    }
    records_.push_back(std::move(record));
  }
}

bool KafkaReader::read_until(const std::function<bool(const std::vector<Record>&)>& done,
                             std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done(records_)) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    poll_once(std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                       std::chrono::milliseconds(100)));
  }
  return true;
}

void KafkaReader::read_for(std::chrono::milliseconds duration) {
  read_until([](const std::vector<Record>&) { return false; }, duration);
}

bool KafkaReader::read_to_end(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  next_metadata_ = Clock::now();
  assign_new_topics();
  // The end of each assigned partition now; the consumer's position must reach it.
  std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter> ends(
      rd_kafka_topic_partition_list_new(0));
  for (const auto& [topic, count] : partitions_) {
    for (std::int32_t p = 0; p < count; ++p) {
      std::int64_t low = 0;
      std::int64_t high = 0;
      // A topic the relay has just made may have no leader yet (LEADER_NOT_AVAILABLE,
      // NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PART for a moment): asked again until the
      // deadline. It failed LargeTransaction's first read once, 0.5 s after the topic's creation.
      rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
      for (;;) {
        err = rd_kafka_query_watermark_offsets(rk_.get(), topic.c_str(), p, &low, &high, 10000);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR || Clock::now() >= deadline) break;
        poll_once(std::chrono::milliseconds(100));
      }
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        errors_.push_back("high watermark of " + topic + "/" + std::to_string(p) + ": " +
                          rd_kafka_err2str(err));
        return false;
      }
      if (high > low)
        rd_kafka_topic_partition_list_add(ends.get(), topic.c_str(), p)->offset = high;
    }
  }
  auto reached = [&] {
    std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter> positions(
        rd_kafka_topic_partition_list_copy(ends.get()));
    if (rd_kafka_position(rk_.get(), positions.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
    for (int i = 0; i < positions->cnt; ++i) {
      // The position is the next offset to read (after a transaction's control record too).
      if (positions->elems[i].offset < 0 || positions->elems[i].offset < ends->elems[i].offset) {
        return false;
      }
    }
    return true;
  };
  while (!reached()) {
    const auto now = Clock::now();
    if (now >= deadline) {
      errors_.push_back("high watermarks not reached within " + std::to_string(timeout.count()) +
                        " ms");
      return false;
    }
    poll_once(std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                       std::chrono::milliseconds(100)));
  }
  return true;
}

}  // namespace outbox_test
