#include "outbox/aws/sqs_client.hpp"

#include <boost/asio/post.hpp>

#include "json_protocol.hpp"
#include "sqs_protocol.hpp"

namespace outbox::aws {

namespace {

JsonService sqs_service() { return {"SQS", "sqs", "AmazonSQS", "application/x-amz-json-1.0"}; }

}  // namespace

struct SqsClient::Impl {
  boost::asio::any_io_executor executor;
  JsonServiceClient client;

  Impl(boost::asio::any_io_executor ex, SqsConfig config)
      : executor(ex),
        client(std::move(ex), sqs_service(), config.endpoint_url, std::move(config.region),
               credentials_of(config), std::move(config.http)) {}
};

SqsClient::SqsClient(boost::asio::any_io_executor executor, SqsConfig config)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(config))) {}

SqsClient::~SqsClient() = default;

void SqsClient::get_queue_attributes(const std::string& queue_url,
                                     std::function<void(SqsQueueAttributesResult)> handler) {
  impl_->client.call("GetQueueAttributes", build_get_queue_attributes(queue_url),
                     [handler = std::move(handler)](JsonCallResult answer) {
                       if (answer.error) {
                         SqsQueueAttributesResult result;
                         result.error = std::move(answer.error);
                         handler(std::move(result));
                         return;
                       }
                       handler(parse_get_queue_attributes(answer.body));
                     });
}

void SqsClient::send_message_batch(const std::string& queue_url, std::vector<SqsSendEntry> entries,
                                   std::size_t max_message_size,
                                   std::function<void(SqsBatchResult)> handler) {
  check_batch(entries);
  if (max_message_size == 0 || max_message_size > kSqsMaxMessageBytes) {
    max_message_size = kSqsMaxMessageBytes;
  }
  // Entries over the queue's limit are refused here, alone: SQS (and moto) would refuse the
  // whole batch for one of them.
  std::vector<SqsEntryFailure> refused;
  std::vector<SqsSendEntry> sent;
  sent.reserve(entries.size());
  for (auto& e : entries) {
    const std::size_t size = message_size(e);
    if (size > max_message_size) {
      refused.push_back({e.id, FailureKind::kFinal, true, "MessageTooLong",
                         "the message is " + std::to_string(size) +
                             " bytes (body and attributes), the queue takes at most " +
                             std::to_string(max_message_size)});
    } else {
      sent.push_back(std::move(e));
    }
  }
  if (sent.empty()) {
    SqsBatchResult result;
    result.failed = std::move(refused);
    boost::asio::post(impl_->executor,
                      [handler = std::move(handler), result = std::move(result)]() mutable {
                        handler(std::move(result));
                      });
    return;
  }
  std::string body = build_send_message_batch(queue_url, sent);
  impl_->client.call("SendMessageBatch", std::move(body),
                     [handler = std::move(handler), sent = std::move(sent),
                      refused = std::move(refused)](JsonCallResult answer) mutable {
                       SqsBatchResult result;
                       if (answer.error) {
                         result.error = std::move(answer.error);
                       } else {
                         result = parse_send_message_batch(answer.body, sent);
                       }
                       for (auto& r : refused) result.failed.push_back(std::move(r));
                       handler(std::move(result));
                     });
}

void SqsClient::call(const std::string& action, std::string json_body,
                     std::function<void(SqsCallResult)> handler) {
  impl_->client.call(action, std::move(json_body),
                     [handler = std::move(handler)](JsonCallResult answer) {
                       handler(SqsCallResult{std::move(answer.error), std::move(answer.body)});
                     });
}

std::size_t SqsClient::pending() const { return impl_->client.http().pending(); }

const HttpClient& SqsClient::http() const { return impl_->client.http(); }

}  // namespace outbox::aws
