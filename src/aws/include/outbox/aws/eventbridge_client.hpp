// Amazon EventBridge over AWS's JSON protocol (POST /, X-Amz-Target: AWSEvents.<Action>,
// Content-Type: application/x-amz-json-1.1), signed with Signature Version 4 (service "events")
// and sent through an HttpClient on the caller's io_context: PutEvents, and call() for any other
// action (CreateEventBus, PutRule, PutTargets: tests, setup).
//
// EventBridge answers per entry, in request order; an entry's failure is classified as SQS's are
// (service_error.hpp). EventBridge keeps no order and does not deduplicate: consumers deduplicate
// by an id the caller puts in Detail. Results reach the handler on the io thread, never inside
// the call. Not thread-safe: construct, call and destroy on the executor's thread; destroying the
// client drops the handlers of calls not answered yet.
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

struct EventBridgeConfig {
  std::string endpoint_url;  // https://events.eu-west-1.amazonaws.com, or a local http:// one
  std::string region;
  // Fixed credentials; not used when credentials_provider is set.
  ResolvedCredentials credentials;
  HttpClientConfig http;
  // Asked at every request (default_credentials_provider(): the SDKs' chain, refreshed).
  std::shared_ptr<CredentialsProvider> credentials_provider;
};

struct PutEventsEntry {
  std::string source;
  std::string detail_type;
  std::string detail;          // a JSON object's text, sent as a string (EventBridge's rule)
  std::string event_bus_name;  // a name or an ARN; empty: the default bus
  std::vector<std::string> resources;
};

// EventBridge's size of an entry: Source, DetailType, Detail and Resources (and 14 bytes for
// Time, which this client never sets: the service stamps it).
std::size_t entry_size(const PutEventsEntry& entry);
inline constexpr std::size_t kPutEventsMaxEntries = 10;
inline constexpr std::size_t kPutEventsMaxBytes = 262'144;

struct PutEventsEntryResult {
  std::string event_id;                    // set when the entry was taken
  FailureKind kind = FailureKind::kFinal;  // when not taken
  std::string error_code;
  std::string error_message;
  bool ok() const { return !event_id.empty(); }
};

struct PutEventsResult {
  // The call failed as a whole: no entry was taken (or, when retryable, it is not known which).
  std::optional<ServiceError> error;
  std::vector<PutEventsEntryResult> entries;  // one per entry sent, in the same order
};

struct EventBridgeCallResult {
  std::optional<ServiceError> error;
  std::string body;
};

class EventBridgeClient {
 public:
  // Throws std::invalid_argument for a bad endpoint URL or an empty region.
  EventBridgeClient(boost::asio::any_io_executor executor, EventBridgeConfig config);
  ~EventBridgeClient();
  EventBridgeClient(const EventBridgeClient&) = delete;
  EventBridgeClient& operator=(const EventBridgeClient&) = delete;

  // Up to 10 entries, at most 256 KiB together; throws std::invalid_argument beyond (batching is
  // the caller's job) or for an entry without Source, DetailType or Detail.
  void put_events(std::vector<PutEventsEntry> entries,
                  std::function<void(PutEventsResult)> handler);
  void call(const std::string& action, std::string json_body,
            std::function<void(EventBridgeCallResult)> handler);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox::aws
