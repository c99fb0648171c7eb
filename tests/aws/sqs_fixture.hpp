// The SQS tests' fixture against moto (tests/aws): a client's settings with the test key, and
// CreateQueue, ReceiveMessage (with DeleteMessageBatch), SendMessageBatch and GetQueueAttributes
// run to their answer on the test's io_context. Shared by sqs_client_test.cpp and
// sqs_publisher_test.cpp.
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <gtest/gtest.h>
#include <simdjson.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "outbox/aws/sqs_client.hpp"

namespace outbox_test {

namespace aws = outbox::aws;

inline constexpr std::string_view kSource = "test key of scripts/aws-up.sh (OUTBOX_AWS_*)";

struct Received {
  std::string body;
  std::string group_id;
  std::string deduplication_id;
  std::string sequence_number;
  std::map<std::string, std::string> attributes;  // name -> StringValue or BinaryValue (base64)
};

inline std::string unique_name(std::string_view prefix) {
  return std::string(prefix) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Calls to moto with the test key, each run to its answer on io_.
class SqsAdmin {
 public:
  boost::asio::io_context io_;

  aws::SqsConfig config(std::string secret_suffix = "") {
    aws::SqsConfig c;
    c.endpoint_url = moto().endpoint;
    c.region = moto().region;
    c.credentials.credentials = {moto().access_key_id, moto().secret_access_key + secret_suffix,
                                 ""};
    c.credentials.source = std::string(kSource);
    return c;
  }

  aws::SqsCallResult call(aws::SqsClient& client, const std::string& action, std::string body) {
    auto result =
        await_result<aws::SqsCallResult>(io_, [&](std::function<void(aws::SqsCallResult)> done) {
          client.call(action, std::move(body), std::move(done));
        });
    if (!result) throw std::runtime_error(action + ": no answer in time");
    return std::move(*result);
  }

  // CreateQueue with attributes ("FifoQueue": "true", ...); the queue's URL.
  std::string create_queue(aws::SqsClient& client, const std::string& name,
                           const std::map<std::string, std::string>& attributes) {
    std::string body = "{\"QueueName\":";
    aws::append_json_string(body, name);
    body += ",\"Attributes\":{";
    bool first = true;
    for (const auto& [k, v] : attributes) {
      if (!first) body += ',';
      first = false;
      aws::append_json_string(body, k);
      body += ':';
      aws::append_json_string(body, v);
    }
    body += "}}";
    auto answer = call(client, "CreateQueue", std::move(body));
    if (answer.error) throw std::runtime_error("CreateQueue: " + answer.error->message);
    simdjson::dom::parser parser;
    std::string_view url;
    if (parser.parse(answer.body).at_key("QueueUrl").get(url) != simdjson::SUCCESS) {
      throw std::runtime_error("CreateQueue answered no QueueUrl: " + answer.body);
    }
    return std::string(url);
  }

  // ReceiveMessage (then DeleteMessageBatch) until `count` messages came or 10 s passed.
  std::vector<Received> receive(aws::SqsClient& client, const std::string& url, std::size_t count,
                                std::chrono::milliseconds quiet = std::chrono::milliseconds(0),
                                std::chrono::seconds timeout = std::chrono::seconds(10)) {
    std::vector<Received> out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto quiet_end = std::chrono::steady_clock::now() + quiet;
    while (std::chrono::steady_clock::now() < deadline &&
           (out.size() < count || std::chrono::steady_clock::now() < quiet_end)) {
      std::string body = "{\"QueueUrl\":";
      aws::append_json_string(body, url);
      body +=
          ",\"MaxNumberOfMessages\":10,\"VisibilityTimeout\":60,\"WaitTimeSeconds\":0,"
          "\"AttributeNames\":[\"All\"],\"MessageSystemAttributeNames\":[\"All\"],"
          "\"MessageAttributeNames\":[\"All\"]}";
      auto answer = call(client, "ReceiveMessage", std::move(body));
      if (answer.error) throw std::runtime_error("ReceiveMessage: " + answer.error->message);
      simdjson::dom::parser parser;
      simdjson::dom::element doc = parser.parse(answer.body);
      simdjson::dom::array messages;
      if (doc["Messages"].get(messages) != simdjson::SUCCESS || messages.size() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      std::string del = "{\"QueueUrl\":";
      aws::append_json_string(del, url);
      del += ",\"Entries\":[";
      int n = 0;
      for (simdjson::dom::element m : messages) {
        Received r;
        r.body = std::string(std::string_view(m["Body"]));
        simdjson::dom::object system;
        if (m["Attributes"].get(system) == simdjson::SUCCESS) {
          std::string_view v;
          if (system["MessageGroupId"].get(v) == simdjson::SUCCESS) r.group_id = v;
          if (system["MessageDeduplicationId"].get(v) == simdjson::SUCCESS) {
            r.deduplication_id = v;
          }
          if (system["SequenceNumber"].get(v) == simdjson::SUCCESS) r.sequence_number = v;
        }
        simdjson::dom::object attributes;
        if (m["MessageAttributes"].get(attributes) == simdjson::SUCCESS) {
          for (auto [name, value] : attributes) {
            std::string_view v;
            if (value["StringValue"].get(v) == simdjson::SUCCESS ||
                value["BinaryValue"].get(v) == simdjson::SUCCESS) {
              r.attributes[std::string(name)] = std::string(v);
            }
          }
        }
        if (n > 0) del += ',';
        del += "{\"Id\":\"d" + std::to_string(n++) + "\",\"ReceiptHandle\":";
        aws::append_json_string(del, std::string_view(m["ReceiptHandle"]));
        del += '}';
        out.push_back(std::move(r));
      }
      del += "]}";
      auto deleted = call(client, "DeleteMessageBatch", std::move(del));
      if (deleted.error) throw std::runtime_error("DeleteMessageBatch: " + deleted.error->message);
    }
    return out;
  }

  aws::SqsBatchResult send(aws::SqsClient& client, const std::string& url,
                           std::vector<aws::SqsSendEntry> entries,
                           std::size_t max_message_size = 0) {
    auto result =
        await_result<aws::SqsBatchResult>(io_, [&](std::function<void(aws::SqsBatchResult)> done) {
          client.send_message_batch(url, std::move(entries), max_message_size, std::move(done));
        });
    if (!result) throw std::runtime_error("SendMessageBatch: no answer in time");
    return std::move(*result);
  }

  aws::SqsQueueAttributesResult attributes(aws::SqsClient& client, const std::string& url) {
    auto result = await_result<aws::SqsQueueAttributesResult>(
        io_, [&](std::function<void(aws::SqsQueueAttributesResult)> done) {
          client.get_queue_attributes(url, std::move(done));
        });
    if (!result) throw std::runtime_error("GetQueueAttributes: no answer in time");
    return std::move(*result);
  }
};

class SqsMoto : public ::testing::Test, public SqsAdmin {};

}  // namespace outbox_test
