// The classification of librdkafka's error codes: the one place that says what a failed delivery
// means, and from which Delivery's size_error and batch_error are derived.
#include "kafka/errors.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <ostream>
#include <string>

namespace outbox::kafka {

// Readable failure messages.
void PrintTo(ErrorKind kind, std::ostream* os) {
  static constexpr const char* kNames[] = {"kNone", "kTransient",     "kRecord", "kBatch",
                                           "kSize", "kAuthorization", "kFatal"};
  *os << kNames[static_cast<int>(kind)];
}

namespace {

struct Case {
  rd_kafka_resp_err_t err;
  ErrorKind kind;
};

std::string name(rd_kafka_resp_err_t err) { return rd_kafka_err2name(err); }

// The codes a produce meets, with what each means for the record.
constexpr Case kProduceCases[] = {
    {RD_KAFKA_RESP_ERR_NO_ERROR, ErrorKind::kNone},
    // The broker or the network is away: librdkafka retries without a deadline by default.
    {RD_KAFKA_RESP_ERR__TRANSPORT, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR__TIMED_OUT, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR__QUEUE_FULL, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR, ErrorKind::kTransient},
    // No answer within message.timeout.ms: the broker's state, sent again after a rewind.
    {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, ErrorKind::kTransient},
    // Purged by the relay at a rewind: never sent, or its answer voided.
    {RD_KAFKA_RESP_ERR__PURGE_QUEUE, ErrorKind::kTransient},
    {RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, ErrorKind::kTransient},
    // Too large: the broker rejects the batch; the client rejects the record at produce().
    {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, ErrorKind::kSize},
    {RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, ErrorKind::kSize},
    {RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE, ErrorKind::kSize},
    // The broker rejects the batch for one bad record.
    {RD_KAFKA_RESP_ERR_INVALID_RECORD, ErrorKind::kBatch},
    {RD_KAFKA_RESP_ERR_INVALID_MSG, ErrorKind::kBatch},
    // Final for the record.
    {RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorKind::kRecord},
    {RD_KAFKA_RESP_ERR_POLICY_VIOLATION, ErrorKind::kRecord},
    // Refused access: final until an operator changes the ACLs or the credentials.
    {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, ErrorKind::kAuthorization},
    {RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, ErrorKind::kAuthorization},
    {RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, ErrorKind::kAuthorization},
    {RD_KAFKA_RESP_ERR__AUTHENTICATION, ErrorKind::kAuthorization},
    // The idempotent producer's sequence is broken: nothing more can go out in order.
    {RD_KAFKA_RESP_ERR__FATAL, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR__INCONSISTENT, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID, ErrorKind::kFatal},
    {RD_KAFKA_RESP_ERR_PRODUCER_FENCED, ErrorKind::kFatal},
};

TEST(ErrorKind, ProduceErrorsMeanWhatTheRelayExpects) {
  for (const Case& c : kProduceCases) {
    EXPECT_EQ(classify(c.err), c.kind) << name(c.err);
  }
}

// Delivery::size_error and batch_error as they were before the classification existed: the relay
// isolates the records of a rejected batch and leaves an oversized value out of its dead letter.
bool legacy_size_error(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
         err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
         err == RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE;
}
bool legacy_batch_error(rd_kafka_resp_err_t err) {
  return legacy_size_error(err) || err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
         err == RD_KAFKA_RESP_ERR_INVALID_MSG;
}

TEST(ErrorKind, SizeAndBatchFlagsUnchangedForEveryCode) {
  const rd_kafka_err_desc* descs = nullptr;
  size_t n = 0;
  rd_kafka_get_err_descs(&descs, &n);
  int checked = 0;
  for (size_t i = 0; i < n; ++i) {
    if (descs[i].name == nullptr) continue;  // gaps in librdkafka's table
    const ErrorKind kind = classify(descs[i].code);
    EXPECT_EQ(kind == ErrorKind::kSize, legacy_size_error(descs[i].code)) << descs[i].name;
    EXPECT_EQ(rejects_batch(kind), legacy_batch_error(descs[i].code)) << descs[i].name;
    ++checked;
  }
  EXPECT_GT(checked, 150) << "librdkafka's error table was not read";
}

TEST(ErrorKind, OnlyNoErrorIsNone) {
  const rd_kafka_err_desc* descs = nullptr;
  size_t n = 0;
  rd_kafka_get_err_descs(&descs, &n);
  for (size_t i = 0; i < n; ++i) {
    if (descs[i].name == nullptr || descs[i].code == RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    EXPECT_NE(classify(descs[i].code), ErrorKind::kNone) << descs[i].name;
  }
}

TEST(ErrorKind, CodeUnknownToThisLibrdkafkaIsFinalForTheRecord) {
  // A broker newer than the client may answer with a code the enum does not have.
  const auto unknown = static_cast<rd_kafka_resp_err_t>(RD_KAFKA_RESP_ERR_END_ALL + 1);
  EXPECT_EQ(classify(unknown), ErrorKind::kRecord);
}

}  // namespace
}  // namespace outbox::kafka
