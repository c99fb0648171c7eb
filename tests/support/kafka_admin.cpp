#include "outbox_test/kafka_admin.hpp"

#include <librdkafka/rdkafka.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace outbox_test {
namespace {

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const noexcept { rd_kafka_conf_destroy(conf); }
};
struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
};
struct NewTopicDeleter {
  void operator()(rd_kafka_NewTopic_t* topic) const noexcept { rd_kafka_NewTopic_destroy(topic); }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* queue) const noexcept { rd_kafka_queue_destroy(queue); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* event) const noexcept { rd_kafka_event_destroy(event); }
};
struct OptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* options) const noexcept {
    rd_kafka_AdminOptions_destroy(options);
  }
};
struct TopicDeleter {
  void operator()(rd_kafka_topic_t* topic) const noexcept { rd_kafka_topic_destroy(topic); }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* metadata) const noexcept {
    rd_kafka_metadata_destroy(metadata);
  }
};

using Handle = std::unique_ptr<rd_kafka_t, HandleDeleter>;

Handle make_handle(const std::string& brokers, rd_kafka_type_t type) {
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  char errstr[512];
  if (rd_kafka_conf_set(conf.get(), "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr) !=
      RD_KAFKA_CONF_OK) {
    throw std::runtime_error(std::string("librdkafka bootstrap.servers: ") + errstr);
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) throw std::runtime_error(std::string("rd_kafka_new: ") + errstr);
  conf.release();  // owned by rk from here on
  return Handle(rk);
}

}  // namespace

void produce_record(const std::string& brokers, const std::string& topic, const std::string& key,
                    const std::string& value, std::chrono::milliseconds timeout) {
  Handle rk = make_handle(brokers, RD_KAFKA_PRODUCER);
  const rd_kafka_resp_err_t err =
      rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                        RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("producing to " + topic + ": " + rd_kafka_err2str(err));
  }
  const rd_kafka_resp_err_t flushed = rd_kafka_flush(rk.get(), static_cast<int>(timeout.count()));
  if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR || rd_kafka_outq_len(rk.get()) > 0) {
    throw std::runtime_error("producing to " + topic + ": not acknowledged within " +
                             std::to_string(timeout.count()) + " ms: " + rd_kafka_err2str(flushed));
  }
}

struct OpenTransaction::Impl {
  Handle rk;
};

OpenTransaction::OpenTransaction(const std::string& brokers, const std::string& topic,
                                 const std::string& key, const std::string& value,
                                 std::chrono::milliseconds transaction_timeout)
    : impl_(std::make_unique<Impl>()) {
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  char errstr[512];
  const std::string id = "outbox-test-open-" + topic + "-" + key;
  const std::string timeout = std::to_string(transaction_timeout.count());
  for (const auto& [k, v] :
       {std::pair<const char*, const char*>{"bootstrap.servers", brokers.c_str()},
        {"transactional.id", id.c_str()},
        {"transaction.timeout.ms", timeout.c_str()}}) {
    if (rd_kafka_conf_set(conf.get(), k, v, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      throw std::runtime_error(std::string("librdkafka ") + k + ": " + errstr);
    }
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) throw std::runtime_error(std::string("rd_kafka_new: ") + errstr);
  conf.release();
  impl_->rk.reset(rk);
  auto check = [&](rd_kafka_error_t* error, const char* what) {
    if (error == nullptr) return;
    const std::string text = rd_kafka_error_string(error);
    rd_kafka_error_destroy(error);
    throw std::runtime_error(std::string(what) + " on " + topic + ": " + text);
  };
  check(rd_kafka_init_transactions(rk, 30000), "init_transactions");
  check(rd_kafka_begin_transaction(rk), "begin_transaction");
  const rd_kafka_resp_err_t err =
      rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()),
                        RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("producing to " + topic + ": " + rd_kafka_err2str(err));
  }
  if (rd_kafka_flush(rk, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR || rd_kafka_outq_len(rk) > 0) {
    throw std::runtime_error("producing to " + topic + ": not acknowledged within 30 s");
  }
}

OpenTransaction::~OpenTransaction() {
  if (impl_ && impl_->rk) {
    if (rd_kafka_error_t* error = rd_kafka_abort_transaction(impl_->rk.get(), 30000)) {
      rd_kafka_error_destroy(error);
    }
  }
}

void create_topic(const std::string& brokers, const std::string& topic, int partitions,
                  int replication_factor, const std::map<std::string, std::string>& configs,
                  std::chrono::milliseconds timeout) {
  Handle rk = make_handle(brokers, RD_KAFKA_PRODUCER);
  char errstr[512];
  std::unique_ptr<rd_kafka_NewTopic_t, NewTopicDeleter> new_topic(
      rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, errstr, sizeof errstr));
  if (!new_topic) throw std::runtime_error("NewTopic " + topic + ": " + errstr);
  for (const auto& [name, value] : configs) {
    if (rd_kafka_NewTopic_set_config(new_topic.get(), name.c_str(), value.c_str()) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("NewTopic " + topic + ": cannot set " + name + "=" + value);
    }
  }
  std::unique_ptr<rd_kafka_AdminOptions_t, OptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_CREATETOPICS));
  rd_kafka_AdminOptions_set_operation_timeout(options.get(), static_cast<int>(timeout.count()),
                                              errstr, sizeof errstr);
  rd_kafka_AdminOptions_set_request_timeout(options.get(), static_cast<int>(timeout.count()),
                                            errstr, sizeof errstr);
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_NewTopic_t* list[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk.get(), list, 1, options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> event(
      rd_kafka_queue_poll(queue.get(), static_cast<int>(timeout.count()) + 5000));
  if (!event) throw std::runtime_error("CreateTopics " + topic + ": no answer in time");
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("CreateTopics " + topic + ": " +
                             rd_kafka_event_error_string(event.get()));
  }
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(result, &count);
  if (count != 1) throw std::runtime_error("CreateTopics " + topic + ": unexpected result count");
  if (rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("CreateTopics " + topic + ": " +
                             rd_kafka_err2name(rd_kafka_topic_result_error(results[0])) + " " +
                             (rd_kafka_topic_result_error_string(results[0])
                                  ? rd_kafka_topic_result_error_string(results[0])
                                  : ""));
  }
}

std::int64_t topic_end_offset_sum(const std::string& brokers, const std::string& topic,
                                  std::chrono::milliseconds timeout) {
  Handle rk = make_handle(brokers, RD_KAFKA_PRODUCER);
  std::unique_ptr<rd_kafka_topic_t, TopicDeleter> handle(
      rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr));
  const rd_kafka_metadata_t* raw = nullptr;
  rd_kafka_resp_err_t err =
      rd_kafka_metadata(rk.get(), 0, handle.get(), &raw, static_cast<int>(timeout.count()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("metadata of " + topic + ": " + rd_kafka_err2name(err));
  }
  std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter> metadata(raw);
  if (metadata->topic_cnt != 1 || metadata->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("metadata of " + topic + ": topic not found");
  }
  std::int64_t sum = 0;
  for (int i = 0; i < metadata->topics[0].partition_cnt; ++i) {
    std::int64_t low = 0;
    std::int64_t high = 0;
    err = rd_kafka_query_watermark_offsets(rk.get(), topic.c_str(),
                                           metadata->topics[0].partitions[i].id, &low, &high,
                                           static_cast<int>(timeout.count()));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("offsets of " + topic + ": " + rd_kafka_err2name(err));
    }
    sum += high;
  }
  return sum;
}

int librdkafka_version() { return rd_kafka_version(); }
std::string librdkafka_version_text() { return rd_kafka_version_str(); }

}  // namespace outbox_test
