#include "outbox/aws/setup_check.hpp"

#include <simdjson.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <optional>
#include <thread>

#include "json_protocol.hpp"
#include "outbox/aws/credentials_provider.hpp"
#include "outbox/aws/eventbridge_client.hpp"
#include "outbox/aws/sqs_client.hpp"
#include "sqs_protocol.hpp"

namespace outbox::aws {

namespace {

using Clock = std::chrono::steady_clock;

struct Answer {
  std::optional<ServiceError> error;
  std::string body;
};

// `start` run until it answered without a retryable error, or `deadline` passed (then the last
// answer, or none when not even one came). Throttling, 5xx and transport failures are tried
// again after 200 ms doubling to 2 s.
std::optional<Answer> call_until(boost::asio::io_context& io,
                                 const std::function<void(std::function<void(Answer)>)>& start,
                                 Clock::time_point deadline) {
  std::optional<Answer> last;
  std::chrono::milliseconds pause{200};
  for (;;) {
    std::optional<Answer> answer;
    start([&answer](Answer a) { answer = std::move(a); });
    while (!answer && Clock::now() < deadline) {
      io.restart();
      io.run_one_for(std::chrono::milliseconds(50));
    }
    if (!answer) return last;
    last = std::move(answer);
    if (!last->error || last->error->kind != FailureKind::kRetryable) return last;
    const auto now = Clock::now();
    if (now + pause >= deadline) return last;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(2'000));
  }
}

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
  return std::to_string(d.count()) + "ms";
}

// " --endpoint-url URL" unless the endpoint is AWS's own.
std::string endpoint_option(const std::string& endpoint) {
  std::string host = parse_endpoint(endpoint).host;
  const bool aws = host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn");
  return aws ? std::string() : " --endpoint-url " + endpoint;
}

bool missing_queue(const ServiceError& e) {
  return e.code == "QueueDoesNotExist" || e.code == "AWS.SimpleQueueService.NonExistentQueue" ||
         e.code == "NonExistentQueue";
}

// The words of a call that failed for good, or did not answer in time.
std::string failure_words(const std::optional<Answer>& answer, const std::string& service,
                          const std::string& endpoint, std::chrono::milliseconds timeout) {
  if (!answer) {
    return service + " at " + endpoint + " did not answer within " + seconds_text(timeout);
  }
  if (answer->error->kind == FailureKind::kRetryable) {
    return service + " at " + endpoint + " could not be used within " + seconds_text(timeout) +
           ": " + answer->error->message;
  }
  return answer->error->message;
}

// The relay's checks of one queue: `what` is "queue" or "dead-letter queue".
std::optional<QueueAttributes> check_queue(boost::asio::io_context& io, SqsClient& client,
                                           const SqsPublisherConfig& c, const std::string& url,
                                           const std::string& what, Clock::time_point deadline,
                                           std::chrono::milliseconds timeout, SetupCheck& out) {
  std::string body = "{\"QueueUrl\":";
  append_json_string(body, url);
  body += ",\"AttributeNames\":[\"All\"]}";
  const std::optional<Answer> answer = call_until(
      io,
      [&](std::function<void(Answer)> done) {
        client.call("GetQueueAttributes", body, [done = std::move(done)](SqsCallResult r) {
          done({std::move(r.error), std::move(r.body)});
        });
      },
      deadline);
  if (answer && answer->error && answer->error->kind == FailureKind::kFinal &&
      missing_queue(*answer->error)) {
    const std::string name = url.substr(url.find_last_of('/') + 1);
    const bool fifo = name.ends_with(".fifo");
    out.error = "SQS " + what + " " + url + " does not exist (region " + c.sqs.region +
                ", endpoint " + c.sqs.endpoint_url +
                "); setup creates nothing in the account: create it, e.g. `aws sqs create-queue "
                "--queue-name " +
                name + (fifo ? " --attributes FifoQueue=true" : "") + " --region " + c.sqs.region +
                endpoint_option(c.sqs.endpoint_url) + "`, then run setup again";
    return std::nullopt;
  }
  if (!answer || answer->error) {
    out.error = failure_words(answer, "SQS", c.sqs.endpoint_url, timeout);
    if (answer && answer->error->kind == FailureKind::kClient) {
      out.error += "; setup needs sqs:GetQueueAttributes on " + url +
                   " (the relay needs it with sqs:SendMessage: docs/aws.md#least-iam-policy)";
    } else if (answer && answer->error->kind == FailureKind::kFinal) {
      out.error = "SQS " + what + " " + url + " cannot be used: " + out.error;
    }
    return std::nullopt;
  }
  SqsQueueAttributesResult parsed = parse_get_queue_attributes(answer->body);
  if (parsed.error) {
    out.error = "SQS " + what + " " + url + ": " + parsed.error->message;
    return std::nullopt;
  }
  const QueueAttributes& a = parsed.attributes;
  const std::string head = what + " " + url + ": ";
  if (a.fifo) {
    std::string line = head +
                       "exists, FIFO: each aggregate's events in commit order (MessageGroupId = "
                       "the key), an event sent again within 5 minutes dropped "
                       "(MessageDeduplicationId = the event id)";
    if (!a.deduplication_scope.empty() || !a.fifo_throughput_limit.empty()) {
      line +=
          "; deduplication scope " +
          (a.deduplication_scope.empty() ? std::string("messageQueue") : a.deduplication_scope) +
          ", throughput limit " +
          (a.fifo_throughput_limit.empty() ? std::string("perQueue") : a.fifo_throughput_limit);
    }
    out.lines.push_back(std::move(line));
    out.lines.push_back(
        head + "content-based deduplication " +
        (a.content_based_deduplication
             ? std::string("on: harmless, the relay sends MessageDeduplicationId = the event id "
                           "with every message, and SQS uses an explicit id instead of the "
                           "body's hash")
             : std::string("off (the relay sends MessageDeduplicationId = the event id)")));
  } else {
    out.lines.push_back(head + "exists, standard: at-least-once, no order");
    out.warnings.push_back(
        what + " " + url +
        " is a standard queue: every event is stored at least once, in no order (SQS may "
        "deliver a message twice, and an aggregate's events in any order); for per-aggregate "
        "order use a FIFO queue (a name ending in .fifo, FifoQueue=true)");
  }
  const std::size_t limit = std::min(a.maximum_message_size, kSqsMaxMessageBytes);
  out.lines.push_back(head + "MaximumMessageSize " + std::to_string(a.maximum_message_size) +
                      " bytes; the relay sends messages of up to " + std::to_string(limit) +
                      " bytes (body and attributes), a larger event is poison (--on-error)");
  if (!a.kms_master_key_id.empty()) {
    out.lines.push_back(head + "encrypted with KMS key " + a.kms_master_key_id +
                        ": the relay also needs kms:GenerateDataKey and kms:Decrypt on it");
  }
  return a;
}

}  // namespace

SetupCheck check_sqs_setup(const SqsSinkOptions& options, const EnvLookup& env,
                           std::chrono::milliseconds timeout) {
  SqsPublisherConfig c = resolve_sqs_config(options, env);
  boost::asio::io_context io;  // declared first: destroyed after the client and the provider
  c.sqs.credentials_provider = default_credentials_provider(io.get_executor(), env);
  c.sqs.http.max_connections = 1;
  c.sqs.http.request_timeout = timeout;
  c.sqs.http.connect_timeout = std::min(timeout, std::chrono::milliseconds(5'000));
  SetupCheck out;
  const auto deadline = Clock::now() + timeout;
  std::optional<QueueAttributes> queue, dlq;
  {
    SqsClient client(io.get_executor(), c.sqs);
    queue = check_queue(io, client, c, c.queue_url, "queue", deadline, timeout, out);
    if (queue && !c.dlq_queue_url.empty()) {
      dlq =
          check_queue(io, client, c, c.dlq_queue_url, "dead-letter queue", deadline, timeout, out);
    }
  }
  if (!out.error.empty()) return out;
  if (queue->fifo && dlq && !dlq->fifo) {
    out.warnings.push_back("dead-letter queue " + c.dlq_queue_url +
                           " is a standard queue: an aggregate's dead letters may arrive out of "
                           "order (a FIFO dead-letter queue keeps them in order)");
  }
  out.lines.push_back(std::string("SQS: credentials from ") + c.sqs.credentials_provider->source() +
                      ", region " + c.sqs.region + ", endpoint " + c.sqs.endpoint_url +
                      "; sqs:SendMessage is not checked (setup sends nothing)");
  return out;
}

SetupCheck check_eventbridge_setup(const EventBridgeSinkOptions& options, const EnvLookup& env,
                                   std::chrono::milliseconds timeout) {
  EventBridgePublisherConfig c = resolve_eventbridge_config(options, env);
  boost::asio::io_context io;
  c.events.credentials_provider = default_credentials_provider(io.get_executor(), env);
  c.events.http.max_connections = 1;
  c.events.http.request_timeout = timeout;
  c.events.http.connect_timeout = std::min(timeout, std::chrono::milliseconds(5'000));
  SetupCheck out;
  const auto deadline = Clock::now() + timeout;
  {
    EventBridgeClient client(io.get_executor(), c.events);
    std::vector<std::pair<std::string, std::string>> buses = {{"event bus", c.bus}};
    if (!c.dlq_bus.empty()) buses.emplace_back("dead-letter bus", c.dlq_bus);
    for (const auto& [what, bus] : buses) {
      std::string body = "{\"Name\":";
      append_json_string(body, bus);
      body += '}';
      const std::optional<Answer> answer = call_until(
          io,
          [&](std::function<void(Answer)> done) {
            client.call("DescribeEventBus", body,
                        [done = std::move(done)](EventBridgeCallResult r) {
                          done({std::move(r.error), std::move(r.body)});
                        });
          },
          deadline);
      if (answer && answer->error && answer->error->kind == FailureKind::kFinal &&
          answer->error->code == "ResourceNotFoundException") {
        const auto slash = bus.find("event-bus/");
        const std::string name = slash == std::string::npos ? bus : bus.substr(slash + 10);
        out.error = "EventBridge " + what + " " + bus + " does not exist (region " +
                    c.events.region + ", endpoint " + c.events.endpoint_url +
                    "); setup creates nothing in the account: create it, e.g. `aws events "
                    "create-event-bus --name " +
                    name + " --region " + c.events.region + endpoint_option(c.events.endpoint_url) +
                    "`, then run setup again";
        return out;
      }
      if (!answer || answer->error) {
        out.error = failure_words(answer, "EventBridge", c.events.endpoint_url, timeout);
        if (answer && answer->error->kind == FailureKind::kClient) {
          out.error += "; setup needs events:DescribeEventBus on " + bus +
                       " (the relay needs events:PutEvents: docs/aws.md#the-least-iam-policy)";
        } else if (answer && answer->error->kind == FailureKind::kFinal) {
          out.error = "EventBridge " + what + " " + bus + " cannot be used: " + out.error;
        }
        return out;
      }
      std::string arn;
      simdjson::dom::parser parser;
      std::string_view v;
      if (parser.parse(answer->body).at_key("Arn").get(v) == simdjson::SUCCESS) arn = v;
      out.lines.push_back(what + " " + bus + ": exists" + (arn.empty() ? "" : " (" + arn + ")"));
    }
  }
  out.lines.push_back(std::string("EventBridge: credentials from ") +
                      c.events.credentials_provider->source() + ", region " + c.events.region +
                      ", endpoint " + c.events.endpoint_url +
                      "; events:PutEvents is not checked (setup sends nothing); EventBridge "
                      "keeps no order and does not deduplicate: consumers deduplicate by "
                      "detail.id");
  return out;
}

}  // namespace outbox::aws
