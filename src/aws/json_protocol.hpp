// AWS's JSON protocol, shared by the SQS (JSON 1.0) and EventBridge (JSON 1.1) clients: JSON text
// built by hand (escaping, base64), error answers read (JSON, or the query protocol's XML that
// some servers answer with), errors classified, and JsonServiceClient: one signed POST per call
// through an HttpClient. Private to src/aws; the pure functions are unit-tested
// (tests/unit/aws/json_protocol_test.cpp).
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/credentials_provider.hpp"
#include "outbox/aws/http_client.hpp"
#include "outbox/aws/service_error.hpp"

namespace outbox::aws {

// Appends `text` as a JSON string literal (quotes included). Bytes that are not valid UTF-8 are
// written as U+FFFD: JSON text must be Unicode.
void append_json_string(std::string& out, std::string_view text);
std::string base64(std::string_view bytes);

// The error code and message of an error answer: JSON's "__type" (the part after '#') or
// "code", and "message"/"Message"; or XML's <Code> and <Message>; else the header
// x-amzn-query-error's code. Empty code when none is found.
struct ErrorAnswer {
  std::string code;
  std::string message;
};
ErrorAnswer read_error_answer(std::string_view body, std::string_view query_error_header);

// The text of the first <name>...</name> in `body`, its entities unescaped; empty when none.
std::string xml_element(std::string_view body, std::string_view name);

// The one classification of a service's error (code and HTTP status; 0 for none).
FailureKind classify(std::string_view code, int http_status);

// Replaces every occurrence of `secret` (when not empty) in `text`: a server's message is put in
// logs and exit messages.
std::string scrub(std::string text, std::string_view secret);

struct JsonService {
  std::string name;           // "SQS", for messages
  std::string signing_name;   // "sqs", "events"
  std::string target_prefix;  // "AmazonSQS", "AWSEvents"
  std::string content_type;   // "application/x-amz-json-1.0" or 1.1
};

struct JsonCallResult {
  std::optional<ServiceError> error;
  std::string body;  // the answer's JSON when no error
};

// The ServiceError of an answer that is not 2xx, or of a transport failure.
ServiceError service_error(const JsonService& service, std::string_view endpoint,
                           const ResolvedCredentials& credentials, const HttpResponse& response);

// A client config's provider, else its fixed credentials.
template <class Config>
std::shared_ptr<CredentialsProvider> credentials_of(const Config& config) {
  return config.credentials_provider ? config.credentials_provider
                                     : fixed_credentials(config.credentials);
}

class JsonServiceClient {
 public:
  // `credentials`: asked at every call (fixed_credentials() for fixed ones).
  JsonServiceClient(boost::asio::any_io_executor executor, JsonService service,
                    const std::string& endpoint_url, std::string region,
                    std::shared_ptr<CredentialsProvider> credentials, HttpClientConfig http);
  ~JsonServiceClient();
  // POST / with X-Amz-Target: <prefix>.<action>, signed with the provider's current credentials
  // (when it has none yet: once it has; calls keep their order). The handler runs on the io
  // thread, never inside the call; a provider's error is the call's.
  void call(std::string_view action, std::string body, std::function<void(JsonCallResult)> handler);
  const JsonService& service() const { return service_; }
  const CredentialsProvider& credentials() const { return *credentials_; }
  HttpClient& http() { return http_; }
  const HttpClient& http() const { return http_; }

 private:
  void send(const std::string& action, std::string body, const ResolvedCredentials& credentials,
            std::function<void(JsonCallResult)> handler);

  boost::asio::any_io_executor executor_;
  JsonService service_;
  std::string region_;
  std::shared_ptr<CredentialsProvider> credentials_;
  HttpClient http_;
  // Expires with the client: a provider's handler that comes later does nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace outbox::aws
