#include "json_protocol.hpp"

#include <openssl/evp.h>
#include <simdjson.h>

#include <array>
#include <boost/asio/post.hpp>
#include <chrono>
#include <stdexcept>

#include "outbox/common/log_text.hpp"

namespace outbox::aws {

const char* to_string(FailureKind kind) {
  switch (kind) {
    case FailureKind::kRetryable:
      return "retryable";
    case FailureKind::kFinal:
      return "final";
    case FailureKind::kClient:
      return "client refused";
  }
  return "?";
}

namespace {

std::string xml_unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '&') {
      static constexpr std::array<std::pair<std::string_view, char>, 5> kEntities{
          {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}}};
      bool done = false;
      for (const auto& [entity, c] : kEntities) {
        if (text.substr(i).starts_with(entity)) {
          out += c;
          i += entity.size() - 1;
          done = true;
          break;
        }
      }
      if (done) continue;
    }
    out += text[i];
  }
  return out;
}

// One line: control characters as spaces, at most 500 bytes.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
  }
  if (text.size() > 500) text = text.substr(0, 500) + "...";
  return text;
}

}  // namespace

std::string xml_element(std::string_view body, std::string_view name) {
  const std::string open = "<" + std::string(name) + ">";
  const std::string close = "</" + std::string(name) + ">";
  const auto start = body.find(open);
  if (start == std::string_view::npos) return {};
  const auto end = body.find(close, start + open.size());
  if (end == std::string_view::npos) return {};
  return xml_unescape(body.substr(start + open.size(), end - start - open.size()));
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  common::append_escaped(out, text, common::Escape::kAll, common::BadByte::kEscapedReplacement);
  out += '"';
}

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

ErrorAnswer read_error_answer(std::string_view body, std::string_view query_error_header) {
  ErrorAnswer answer;
  std::size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && body[first] == '{') {
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (parser.parse(body.data(), body.size()).get(doc) == simdjson::SUCCESS && doc.is_object()) {
      std::string_view value;
      if (doc["__type"].get(value) == simdjson::SUCCESS ||
          doc["code"].get(value) == simdjson::SUCCESS ||
          doc["Code"].get(value) == simdjson::SUCCESS) {
        const auto hash = value.rfind('#');
        answer.code = std::string(hash == std::string_view::npos ? value : value.substr(hash + 1));
      }
      if (doc["message"].get(value) == simdjson::SUCCESS ||
          doc["Message"].get(value) == simdjson::SUCCESS) {
        answer.message = std::string(value);
      }
    }
  } else if (first != std::string_view::npos && body[first] == '<') {
    answer.code = xml_element(body, "Code");
    answer.message = xml_element(body, "Message");
  }
  if (answer.code.empty() && !query_error_header.empty()) {
    // "AWS.SimpleQueueService.NonExistentQueue;Sender"
    answer.code = std::string(query_error_header.substr(0, query_error_header.find(';')));
  }
  answer.message = one_line(std::move(answer.message));
  answer.code = one_line(std::move(answer.code));
  return answer;
}

FailureKind classify(std::string_view code, int http_status) {
  // The client's credentials, signature or access: nothing passes until they change.
  static constexpr std::string_view kClient[] = {"SignatureDoesNotMatch",
                                                 "InvalidSignatureException",
                                                 "IncompleteSignature",
                                                 "IncompleteSignatureException",
                                                 "InvalidClientTokenId",
                                                 "UnrecognizedClientException",
                                                 "MissingAuthenticationToken",
                                                 "MissingAuthenticationTokenException",
                                                 "AccessDenied",
                                                 "AccessDeniedException",
                                                 "ExpiredToken",
                                                 "ExpiredTokenException",
                                                 "InvalidAccessKeyId",
                                                 "AuthFailure",
                                                 "AuthorizationError",
                                                 "NotAuthorized",
                                                 "RequestExpired",
                                                 "InvalidSecurity",
                                                 "KMS.AccessDeniedException",
                                                 "KmsAccessDenied"};
  static constexpr std::string_view kRetryable[] = {"ThrottlingException",
                                                    "Throttling",
                                                    "ThrottledException",
                                                    "RequestThrottled",
                                                    "RequestThrottledException",
                                                    "TooManyRequestsException",
                                                    "RequestLimitExceeded",
                                                    "SlowDown",
                                                    "ProvisionedThroughputExceededException",
                                                    "ServiceUnavailable",
                                                    "ServiceUnavailableException",
                                                    "InternalError",
                                                    "InternalFailure",
                                                    "InternalServerError",
                                                    "InternalException",
                                                    "RequestTimeout",
                                                    "RequestTimeoutException",
                                                    "KMS.ThrottlingException",
                                                    "KmsThrottled",
                                                    "OverLimit",
                                                    "AWS.SimpleQueueService.RequestThrottled"};
  for (const auto c : kClient) {
    if (code == c) return FailureKind::kClient;
  }
  for (const auto c : kRetryable) {
    if (code == c) return FailureKind::kRetryable;
  }
  if (http_status == 401 || http_status == 403) return FailureKind::kClient;
  if (http_status == 429 || http_status >= 500 || http_status == 0) return FailureKind::kRetryable;
  return FailureKind::kFinal;
}

std::string scrub(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
    text.replace(at, secret.size(), "<redacted>");
  }
  return text;
}

ServiceError service_error(const JsonService& service, std::string_view endpoint,
                           const ResolvedCredentials& credentials, const HttpResponse& response) {
  ServiceError error;
  if (!response.error.empty()) {
    error.kind = FailureKind::kRetryable;
    error.code = "Transport";
    error.message = service.name + ": " + response.error;
    return error;
  }
  error.http_status = response.status;
  ErrorAnswer answer = read_error_answer(response.body, response.header("x-amzn-query-error"));
  error.code = answer.code.empty() ? "HTTP" + std::to_string(response.status) : answer.code;
  error.kind = classify(answer.code, response.status);
  std::string said =
      scrub(scrub(std::move(answer.message), credentials.credentials.secret_access_key),
            credentials.credentials.session_token);
  switch (error.kind) {
    case FailureKind::kClient:
      error.message = service.name + " at " + std::string(endpoint) + " refused the credentials (" +
                      to_string(credentials) + "): " + error.code + " (HTTP " +
                      std::to_string(response.status) + ")" + (said.empty() ? "" : ": " + said);
      break;
    case FailureKind::kRetryable:
    case FailureKind::kFinal:
      error.message = service.name + ": " + error.code + " (HTTP " +
                      std::to_string(response.status) + ")" + (said.empty() ? "" : ": " + said);
      break;
  }
  return error;
}

JsonServiceClient::JsonServiceClient(boost::asio::any_io_executor executor, JsonService service,
                                     const std::string& endpoint_url, std::string region,
                                     std::shared_ptr<CredentialsProvider> credentials,
                                     HttpClientConfig http)
    : executor_(executor),
      service_(std::move(service)),
      region_(std::move(region)),
      credentials_(std::move(credentials)),
      http_(std::move(executor), parse_endpoint(endpoint_url), std::move(http)) {
  if (region_.empty()) throw std::invalid_argument(service_.name + ": no region");
  if (!credentials_) throw std::invalid_argument(service_.name + ": no credentials provider");
}

JsonServiceClient::~JsonServiceClient() { *alive_ = false; }

void JsonServiceClient::call(std::string_view action, std::string body,
                             std::function<void(JsonCallResult)> handler) {
  credentials_->get([this, alive = alive_, action = std::string(action), body = std::move(body),
                     handler = std::move(handler)](const ResolvedCredentials* credentials,
                                                   const ServiceError* error) mutable {
    if (!*alive) return;
    if (credentials != nullptr) {
      send(action, std::move(body), *credentials, std::move(handler));
      return;
    }
    JsonCallResult result;
    result.error = *error;
    result.error->message = service_.name + ": " + result.error->message;
    // Never inside call(): a provider may answer at once.
    boost::asio::post(executor_, [alive = std::move(alive), handler = std::move(handler),
                                  result = std::move(result)]() mutable {
      if (*alive) handler(std::move(result));
    });
  });
}

void JsonServiceClient::send(const std::string& action, std::string body,
                             const ResolvedCredentials& credentials,
                             std::function<void(JsonCallResult)> handler) {
  SigningRequest signing;
  signing.method = "POST";
  signing.path = "/";
  signing.headers = {{"Host", http_.endpoint().host_header},
                     {"Content-Type", service_.content_type},
                     {"X-Amz-Target", service_.target_prefix + "." + action}};
  signing.payload_hash = payload_hash(body);
  SigningOptions options;
  options.region = region_;
  options.service = service_.signing_name;
  options.time = std::chrono::system_clock::now();
  SignedRequest signed_request = sign(signing, credentials.credentials, options);

  HttpRequest request;
  request.method = "POST";
  request.target = "/";
  request.headers = std::move(signing.headers);
  for (auto& h : signed_request.headers) request.headers.push_back(std::move(h));
  request.body = std::move(body);
  // The credentials this request was signed with: an error names them.
  http_.async_request(std::move(request), [this, used = credentials,
                                           handler = std::move(handler)](HttpResponse response) {
    JsonCallResult result;
    if (response.error.empty() && response.status >= 200 && response.status < 300) {
      result.body = std::move(response.body);
    } else {
      result.error = service_error(service_, http_.endpoint().url(), used, response);
    }
    handler(std::move(result));
  });
}

}  // namespace outbox::aws
