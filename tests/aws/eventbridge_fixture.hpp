// What the EventBridge tests read back through: an event bus on moto with a rule whose target is
// an SQS queue (moto delivers a matching PutEvents entry to the queue as EventBridge's envelope:
// {"version","id","detail-type","source","account","time","region","resources","detail"}), and a
// reader of that queue. Blocking calls on an io_context of its own; header-only over the aws
// module's clients.
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <simdjson.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "outbox/aws/eventbridge_client.hpp"
#include "outbox/aws/sqs_client.hpp"

namespace outbox_test {

inline std::string unique_aws_name(std::string_view prefix) {
  return std::string(prefix) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline outbox::aws::ResolvedCredentials moto_credentials(const std::string& secret_suffix = "") {
  outbox::aws::ResolvedCredentials c;
  c.credentials = {moto().access_key_id, moto().secret_access_key + secret_suffix, ""};
  c.source = "test key of scripts/aws-up.sh (OUTBOX_AWS_*)";
  return c;
}

inline outbox::aws::EventBridgeConfig moto_events_config(const std::string& endpoint) {
  outbox::aws::EventBridgeConfig c;
  c.endpoint_url = endpoint;
  c.region = moto().region;
  c.credentials = moto_credentials();
  return c;
}

// An event as the rule's SQS target received it.
struct ReceivedEvent {
  std::string source;
  std::string detail_type;
  std::string detail;  // the Detail object's JSON text, minified
  std::string id;      // detail.id
};

class EventBridgeToQueue {
 public:
  // A bus of its own (or `bus` when it exists already: "default"), a queue, and a rule on the bus
  // sending every event whose source is one of `sources` to the queue.
  EventBridgeToQueue(std::string_view prefix, const std::vector<std::string>& sources)
      : bus_(unique_aws_name(prefix)), queue_name_(unique_aws_name(prefix)) {
    call_events("CreateEventBus", "{\"Name\":\"" + bus_ + "\"}");
    outbox::aws::SqsConfig sc;
    sc.endpoint_url = moto().endpoint;
    sc.region = moto().region;
    sc.credentials = moto_credentials();
    sqs_.emplace(io_.get_executor(), sc);
    simdjson::dom::parser parser;
    queue_url_ = std::string(std::string_view(parser.parse(
        call_sqs("CreateQueue", "{\"QueueName\":\"" + queue_name_ + "\"}"))["QueueUrl"]));
    std::string arn_request = "{\"QueueUrl\":";
    outbox::aws::append_json_string(arn_request, queue_url_);
    arn_request += ",\"AttributeNames\":[\"QueueArn\"]}";
    const std::string arn_answer = call_sqs("GetQueueAttributes", arn_request);
    const std::string queue_arn(
        std::string_view(parser.parse(arn_answer)["Attributes"]["QueueArn"]));
    std::string pattern = "{\"source\":[";
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (i > 0) pattern += ',';
      outbox::aws::append_json_string(pattern, sources[i]);
    }
    pattern += "]}";
    std::string rule = "{\"Name\":\"to-queue\",\"EventBusName\":\"" + bus_ + "\",\"EventPattern\":";
    outbox::aws::append_json_string(rule, pattern);
    rule += '}';
    call_events("PutRule", rule);
    std::string targets = "{\"Rule\":\"to-queue\",\"EventBusName\":\"" + bus_ +
                          "\",\"Targets\":[{\"Id\":\"queue\",\"Arn\":";
    outbox::aws::append_json_string(targets, queue_arn);
    targets += "}]}";
    call_events("PutTargets", targets);
  }

  const std::string& bus() const { return bus_; }
  const std::string& queue_url() const { return queue_url_; }

  // Receives (and deletes) until `count` events came and then `quiet` passed without more, or
  // `timeout` passed.
  std::vector<ReceivedEvent> receive(std::size_t count,
                                     std::chrono::milliseconds quiet = std::chrono::milliseconds(0),
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::vector<ReceivedEvent> out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto last_new = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline &&
           (out.size() < count || std::chrono::steady_clock::now() - last_new < quiet)) {
      std::string body = "{\"QueueUrl\":";
      outbox::aws::append_json_string(body, queue_url_);
      body += ",\"MaxNumberOfMessages\":10,\"VisibilityTimeout\":60,\"WaitTimeSeconds\":0}";
      simdjson::dom::parser parser;
      const std::string answer = call_sqs("ReceiveMessage", body);
      simdjson::dom::array messages;
      if (parser.parse(answer)["Messages"].get(messages) != simdjson::SUCCESS ||
          messages.size() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      last_new = std::chrono::steady_clock::now();
      std::string del = "{\"QueueUrl\":";
      outbox::aws::append_json_string(del, queue_url_);
      del += ",\"Entries\":[";
      int n = 0;
      for (simdjson::dom::element m : messages) {
        const std::string envelope_text{std::string_view(m["Body"])};
        simdjson::dom::parser envelope_parser;
        simdjson::dom::element envelope = envelope_parser.parse(envelope_text);
        ReceivedEvent e;
        e.source = std::string(std::string_view(envelope["source"]));
        e.detail_type = std::string(std::string_view(envelope["detail-type"]));
        e.detail = simdjson::minify(envelope["detail"]);
        std::string_view id;
        if (envelope["detail"]["id"].get(id) == simdjson::SUCCESS) e.id = std::string(id);
        out.push_back(std::move(e));
        if (n > 0) del += ',';
        del += "{\"Id\":\"d" + std::to_string(n++) + "\",\"ReceiptHandle\":";
        outbox::aws::append_json_string(del, std::string_view(m["ReceiptHandle"]));
        del += '}';
      }
      del += "]}";
      call_sqs("DeleteMessageBatch", del);
    }
    return out;
  }

 private:
  template <class Result, class Start>
  Result await(const std::string& what, Start start) {
    std::optional<Result> result;
    start([&result](Result r) { result = std::move(r); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    io_.restart();
    while (!result && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(50));
    }
    if (!result) throw std::runtime_error(what + ": no answer in time");
    if (result->error) throw std::runtime_error(what + ": " + result->error->message);
    return std::move(*result);
  }

  std::string call_events(const std::string& action, const std::string& body) {
    return await<outbox::aws::EventBridgeCallResult>(
               action, [&](auto done) { events_.call(action, body, std::move(done)); })
        .body;
  }
  std::string call_sqs(const std::string& action, const std::string& body) {
    return await<outbox::aws::SqsCallResult>(
               action, [&](auto done) { sqs_->call(action, body, std::move(done)); })
        .body;
  }

  boost::asio::io_context io_;
  outbox::aws::EventBridgeClient events_{io_.get_executor(), moto_events_config(moto().endpoint)};
  std::optional<outbox::aws::SqsClient> sqs_;
  std::string bus_;
  std::string queue_name_;
  std::string queue_url_;
};

}  // namespace outbox_test
