// AWS Signature Version 4 (header-based, AWS4-HMAC-SHA256) for the requests of the SQS and
// EventBridge sinks: the canonical request, the string to sign, the signature and the headers
// that carry them. Pure functions of their arguments (OpenSSL's libcrypto for SHA-256 and HMAC);
// thread-safe. Nothing here sends a request or reads a clock.
//
// Secrets: the secret access key only ever enters the HMAC; no result and no error message holds
// it. The session token is not a signing secret but grants access: it is in `headers` (the
// request must carry it) and in the canonical request when signed, so neither is logged whole.
#pragma once

#include <array>
#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::aws {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: long-term keys, no X-Amz-Security-Token
};

struct HttpHeader {
  std::string name;
  std::string value;
};

struct QueryParameter {
  std::string name;  // decoded: sign() percent-encodes names and values itself
  std::string value;
};

struct SigningRequest {
  std::string method;  // "GET", "POST", ...
  // The path as it goes on the wire (already percent-encoded where it needs to be), without the
  // query; starts with '/'.
  std::string path = "/";
  std::vector<QueryParameter> query;
  // The headers to sign, all of them sent as given; Host is required. A name may repeat (its
  // values are signed in this order, joined by ','). X-Amz-Date, Authorization, and
  // X-Amz-Security-Token and x-amz-content-sha256 when sign() adds them, must not be here.
  std::vector<HttpHeader> headers;
  // The hex SHA-256 of the body (payload_hash()); the empty body's hash when left empty.
  std::string payload_hash;
};

struct SigningOptions {
  std::string region;                          // "eu-west-1"
  std::string service;                         // the signing name: "sqs", "events"
  std::chrono::system_clock::time_point time;  // becomes X-Amz-Date, whole seconds (UTC)
  // Adds x-amz-content-sha256 (the payload hash) to the signed headers.
  bool add_content_sha256 = false;
  // false: X-Amz-Security-Token is sent but left out of the signature (the services that want it
  // added after signing); SQS and EventBridge sign it.
  bool sign_session_token = true;
};

struct SignedRequest {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // lowercase hex
  std::string authorization;  // the Authorization header's value
  std::string amz_date;       // YYYYMMDD'T'HHMMSS'Z'
  // What the request must carry besides its own headers, in this order: X-Amz-Date,
  // X-Amz-Security-Token (with a session token), x-amz-content-sha256 (when asked), Authorization.
  std::vector<HttpHeader> headers;
};

// Signs `request`. Throws std::invalid_argument naming what is wrong with the request, the options
// or the credentials (never a secret's value).
SignedRequest sign(const SigningRequest& request, const Credentials& credentials,
                   const SigningOptions& options);

// The hex SHA-256 of a body, for SigningRequest::payload_hash.
std::string payload_hash(std::string_view body);

// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request"),
// `date` as YYYYMMDD.
std::array<unsigned char, 32> signing_key(std::string_view secret, std::string_view date,
                                          std::string_view region, std::string_view service);

// The parts of sign(), for tests and for diagnosing a refused signature.

// RFC 3986 percent-encoding as SigV4 wants it: the unreserved characters (A-Z a-z 0-9 - . _ ~)
// kept, every other byte as %XY in upper case; '/' kept only when `keep_slash`.
std::string uri_encode(std::string_view text, bool keep_slash);
// The canonical URI of a wire path: "." and ".." segments resolved and empty segments dropped (a
// trailing '/' kept), then every segment percent-encoded once more.
std::string canonical_uri(std::string_view path);
std::string to_hex(std::span<const unsigned char> bytes);
std::string amz_date(std::chrono::system_clock::time_point time);

}  // namespace outbox::aws
