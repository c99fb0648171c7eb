// librdkafka's mock cluster hosted in the test process: brokers speaking the Kafka protocol on
// localhost, with faults on demand (request errors, brokers down, round-trip times), for what a
// real broker cannot do when asked. Header-only: a target that includes it links librdkafka
// (PkgConfig::RDKAFKA). Thread-safety: the mock cluster runs its own thread; its rd_kafka_mock_*
// calls may come from any thread.
#pragma once

#include <librdkafka/rdkafka.h>
// Must come after rdkafka.h.
#include <librdkafka/rdkafka_mock.h>

#include <stdexcept>
#include <string>

namespace outbox_test {

// Kafka API keys the tests inject errors into or hold answers of.
inline constexpr std::int16_t kProduceApiKey = 0;
inline constexpr std::int16_t kInitProducerIdApiKey = 22;
inline constexpr std::int16_t kAddPartitionsToTxnApiKey = 24;
inline constexpr std::int16_t kEndTxnApiKey = 26;

class MockKafka {
 public:
  // A cluster of `brokers` brokers, held by a throwaway client handle of this process. Throws
  // std::runtime_error when librdkafka cannot make it.
  explicit MockKafka(int brokers) {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk_ == nullptr) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(std::string("mock cluster's client handle: ") + errstr);
    }
    cluster_ = rd_kafka_mock_cluster_new(rk_, brokers);
    if (cluster_ == nullptr) {
      rd_kafka_destroy(rk_);
      throw std::runtime_error("rd_kafka_mock_cluster_new failed");
    }
  }
  ~MockKafka() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(rk_);
  }
  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;

  rd_kafka_mock_cluster_t* get() const { return cluster_; }
  std::string bootstraps() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }

  // Throws std::runtime_error naming the topic when the mock refuses it.
  void create_topic(const std::string& topic, int partitions, int replication_factor = 1) {
    const rd_kafka_resp_err_t err =
        rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, replication_factor);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("mock topic " + topic + ": " + rd_kafka_err2name(err));
    }
  }

 private:
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

}  // namespace outbox_test
