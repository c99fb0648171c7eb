// The topic admin of the producer: the compacted topic the relay keeps its progress in.
#include <string>

#include "producer_impl.hpp"

namespace outbox::kafka {
namespace {

// Whether the cluster's metadata lists `topic` (all topics asked: asking for one by name may make
// a broker with auto.create.topics.enable create it, uncompacted).
bool topic_listed(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout) {
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk, 1, nullptr, &md, timeout_ms(timeout)) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md == nullptr) {
    return false;
  }
  bool found = false;
  for (int i = 0; i < md->topic_cnt && !found; ++i) {
    found = md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && topic == md->topics[i].topic;
  }
  rd_kafka_metadata_destroy(md);
  return found;
}

std::string create_compacted(rd_kafka_t* rk, const std::string& topic,
                             std::chrono::milliseconds timeout) {
  // Made beforehand (by an operator whose relay may not create topics, or by an earlier start):
  // nothing to ask of the admin API.
  if (topic_listed(rk, topic, timeout)) return {};
  char errstr[512];
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), 1, -1, errstr, sizeof errstr);
  if (nt == nullptr) return std::string("topic ") + topic + ": " + errstr;
  rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
  rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(options, timeout_ms(timeout), errstr, sizeof errstr);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &nt, 1, options, queue);
  std::string error;
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, timeout_ms(timeout) + 1000);
  if (ev == nullptr) {
    error = "creating topic " + topic + ": no answer from the broker in time";
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    error = "creating topic " + topic + ": " + rd_kafka_event_error_string(ev);
  } else {
    std::size_t n = 0;
    const rd_kafka_topic_result_t** results =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    for (std::size_t i = 0; i < n; ++i) {
      const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        error = "creating topic " + topic + ": " + rd_kafka_err2name(err) + ": " +
                (rd_kafka_topic_result_error_string(results[i])
                     ? rd_kafka_topic_result_error_string(results[i])
                     : "");
      }
    }
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(queue);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_NewTopic_destroy(nt);
  return error;
}

}  // namespace

// GCC 12 destroys the init-captures of a lambda built inside `co_return co_await`
// twice: the callable is built first, as a local.
boost::asio::awaitable<std::string> Producer::create_compacted_topic(
    std::string topic, std::chrono::milliseconds timeout) {
  rd_kafka_t* rk = impl_->rk.get();
  auto call = [rk, name = topic, timeout] { return create_compacted(rk, name, timeout); };
  std::string error = co_await impl_->off_thread(std::move(call));
  co_return error;
}

}  // namespace outbox::kafka
