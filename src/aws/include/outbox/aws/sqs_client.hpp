// Amazon SQS over AWS's JSON protocol (POST /, X-Amz-Target: AmazonSQS.<Action>, Content-Type:
// application/x-amz-json-1.0), each request signed with Signature Version 4 (service "sqs") and
// sent through an HttpClient on the caller's io_context. The calls the SQS sink needs:
// GetQueueAttributes (FIFO or not, content-based deduplication, the queue's maximum message
// size) and SendMessageBatch; call() sends any other action (CreateQueue, ReceiveMessage: tests,
// setup).
//
// Results reach the handler on the io thread, never inside the call. Errors are classified
// (service_error.hpp): throttling, 5xx and transport failures retryable; an entry or request the
// service refuses as invalid final for it; a refused signature, credentials or access final for
// the client, its message naming the credentials' source and never the secret. An error answer
// may come as JSON ({"__type": ..., "message": ...}) or, from some servers (moto's
// authentication), as the query protocol's XML (<Error><Code>..<Message>..): both are read.
//
// Not thread-safe: construct, call and destroy on the executor's thread. Destroying the client
// drops the handlers of calls not answered yet.
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/credentials_provider.hpp"
#include "outbox/aws/http_client.hpp"
#include "outbox/aws/service_error.hpp"

namespace outbox::aws {

struct SqsConfig {
  std::string endpoint_url;  // https://sqs.eu-west-1.amazonaws.com, or a local http:// one
  std::string region;        // signs the requests
  // Fixed credentials; not used when credentials_provider is set.
  ResolvedCredentials credentials;
  HttpClientConfig http;
  // Asked at every request (default_credentials_provider(): the SDKs' chain, refreshed).
  std::shared_ptr<CredentialsProvider> credentials_provider;
};

struct QueueAttributes {
  bool fifo = false;
  bool content_based_deduplication = false;
  // MaximumMessageSize as the queue answers it (the relay sends at most kSqsMaxMessageBytes);
  // 256 KiB, SQS's old limit, when the answer lacks it.
  std::size_t maximum_message_size = 262'144;
  // Read when asked for (setup asks for "All"); empty when the queue has none.
  std::string deduplication_scope;    // FIFO: messageQueue or messageGroup
  std::string fifo_throughput_limit;  // FIFO: perQueue or perMessageGroupId
  std::string kms_master_key_id;      // a KMS key (alias or id); empty: none or SQS-managed
};

struct SqsMessageAttribute {
  std::string name;
  std::string data_type = "String";  // "String", "Number", "Binary", or with a ".label"
  std::string value;                 // StringValue; the raw bytes of a Binary (sent as base64)
};

struct SqsSendEntry {
  std::string id;  // unique within the batch: 1-80 of [A-Za-z0-9_-]
  std::string body;
  std::string group_id;                         // MessageGroupId; empty: none (a standard queue)
  std::string deduplication_id;                 // MessageDeduplicationId; empty: none
  std::vector<SqsMessageAttribute> attributes;  // at most 10 (SQS's limit)
  std::optional<int> delay_seconds;             // standard queues only
};

// SQS's size of a message: its body plus each attribute's name, data type and value.
std::size_t message_size(const SqsSendEntry& entry);

// SQS's limits (since August 2025; 256 KiB before): a message of at most 1 MiB (a queue's
// MaximumMessageSize may be lower: 1,024 to 1,048,576 bytes), and a SendMessageBatch call of at
// most 10 entries whose sizes add up to at most 1 MiB (the API reference of SendMessageBatch:
// "the maximum total payload size ... 1 MiB 1,048,576 bytes").
inline constexpr std::size_t kSqsMaxMessageBytes = 1'048'576;
inline constexpr std::size_t kSqsMaxBatchEntries = 10;
inline constexpr std::size_t kSqsMaxBatchBytes = 1'048'576;
inline constexpr std::size_t kSqsMaxMessageAttributes = 10;

struct SqsEntrySuccess {
  std::string id;
  std::string message_id;
  std::string sequence_number;  // FIFO queues only
  std::string md5_of_body;
};

struct SqsEntryFailure {
  std::string id;
  FailureKind kind = FailureKind::kFinal;  // kFinal: SenderFault; kRetryable: the service's fault
  bool sender_fault = true;
  std::string code;
  std::string message;
};

struct SqsBatchResult {
  // The call failed as a whole: no entry sent was taken (or, when retryable, it is not known
  // which); `successful` is empty and `failed` holds only the entries refused before sending.
  std::optional<ServiceError> error;
  std::vector<SqsEntrySuccess> successful;
  // Refused entries: by the service, or before sending (over `max_message_size`, code
  // "MessageTooLong", SenderFault: the other entries are sent without them).
  std::vector<SqsEntryFailure> failed;
};

struct SqsQueueAttributesResult {
  std::optional<ServiceError> error;
  QueueAttributes attributes;
};

struct SqsCallResult {
  std::optional<ServiceError> error;
  std::string body;  // the JSON answer when no error
};

class SqsClient {
 public:
  // Throws std::invalid_argument for a bad endpoint URL or an empty region, std::runtime_error
  // when the TLS context cannot be made.
  SqsClient(boost::asio::any_io_executor executor, SqsConfig config);
  ~SqsClient();
  SqsClient(const SqsClient&) = delete;
  SqsClient& operator=(const SqsClient&) = delete;

  void get_queue_attributes(const std::string& queue_url,
                            std::function<void(SqsQueueAttributesResult)> handler);

  // Sends up to 10 entries, at most 1 MiB together. An entry over `max_message_size` (the
  // queue's MaximumMessageSize, at most SQS's 1 MiB; 0: 1 MiB) is refused here, alone: the others
  // go. Throws std::invalid_argument for a batch SQS would refuse whole (no entry, more than 10,
  // ids not distinct or malformed, more than 1 MiB, more than 10 attributes on an entry): batching
  // is the caller's job.
  void send_message_batch(const std::string& queue_url, std::vector<SqsSendEntry> entries,
                          std::size_t max_message_size,
                          std::function<void(SqsBatchResult)> handler);

  // Any action with a JSON body built by the caller ("CreateQueue", {"QueueName": ...}).
  void call(const std::string& action, std::string json_body,
            std::function<void(SqsCallResult)> handler);

  // Calls queued or in flight.
  std::size_t pending() const;
  const HttpClient& http() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::aws
