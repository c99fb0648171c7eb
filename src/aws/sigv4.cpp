// Signature Version 4 as AWS's "Create a signed AWS API request" describes it, checked against
// AWS's published test suite (tests/unit/aws/sigv4_test.cpp).
#include "outbox/aws/sigv4.hpp"

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace outbox::aws {
namespace {

using Digest = std::array<unsigned char, 32>;

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

Digest sha256(std::string_view data) {
  Digest out;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data());
  return out;
}

Digest hmac(std::span<const unsigned char> key, std::string_view data) {
  Digest out;
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(),
           &length) == nullptr ||
      length != out.size()) {
    throw std::runtime_error("aws: HMAC-SHA256 failed in OpenSSL");
  }
  return out;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// RFC 7230's token characters: what a header name may hold.
bool is_token_char(unsigned char c) {
  return is_unreserved(c) ||
         std::string_view("!#$%&'*+^`|").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), to_lower);
  return out;
}

// Leading and trailing whitespace dropped, every inner run of it one space. A folded value (a
// line break and indentation inside it) reads as one line so.
std::string canonical_header_value(std::string_view value) {
  std::string out;
  bool pending_space = false;
  for (const char c : value) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

bool is_payload_hash(std::string_view hash) {
  if (hash == kUnsignedPayload) return true;
  return hash.size() == 64 && std::all_of(hash.begin(), hash.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool is_scope_field(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return is_unreserved(static_cast<unsigned char>(c)) && c != '.' && c != '~';
  });
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("aws: cannot sign the request: " + what);
}

std::string canonical_query(const std::vector<QueryParameter>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& parameter : query) {
    encoded.emplace_back(uri_encode(parameter.name, false), uri_encode(parameter.value, false));
  }
  // By encoded name, then encoded value (byte order).
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

}  // namespace

std::string uri_encode(std::string_view text, bool keep_slash) {
  constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::string canonical_uri(std::string_view path) {
  // RFC 3986's dot-segment removal, and empty segments ("//") dropped as the SDKs do for every
  // service but S3 (whose object keys may hold them).
  std::vector<std::string_view> segments;
  bool trailing_slash = false;
  std::size_t start = 1;  // past the leading '/'
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view segment = path.substr(start, end - start);
    const bool last = end == path.size();
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!segment.empty() && segment != ".") {
      segments.push_back(segment);
    }
    if (last) trailing_slash = segment.empty() || segment == "." || segment == "..";
    start = end + 1;
  }
  // The path arrives encoded once for the wire; SigV4 encodes it again ("double-encoding") for
  // every service except S3, so the SQS and EventBridge paths are always encoded here.
  std::string out = "/";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) out += '/';
    out += uri_encode(segments[i], false);
  }
  if (trailing_slash && !segments.empty()) out += '/';
  return out;
}

std::string to_hex(std::span<const unsigned char> bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
  }
  return out;
}

std::string amz_date(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto seconds = floor<std::chrono::seconds>(time);
  const auto day = floor<days>(seconds);
  const year_month_day date{day};
  const hh_mm_ss clock{seconds - day};
  const int year = static_cast<int>(date.year());
  if (year < 1000 || year > 9999) {
    throw std::invalid_argument(
        "aws: cannot sign the request: the time is outside years 1000-9999");
  }
  char out[32];  // 16 and the NUL; more than enough for the compiler's range check
  std::snprintf(out, sizeof out, "%04d%02u%02uT%02d%02d%02dZ", year,
                static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                static_cast<int>(clock.hours().count()), static_cast<int>(clock.minutes().count()),
                static_cast<int>(clock.seconds().count()));
  return out;
}

std::string payload_hash(std::string_view body) { return to_hex(sha256(body)); }

std::array<unsigned char, 32> signing_key(std::string_view secret, std::string_view date,
                                          std::string_view region, std::string_view service) {
  std::string k_secret = "AWS4";
  k_secret += secret;
  const auto k_date =
      hmac({reinterpret_cast<const unsigned char*>(k_secret.data()), k_secret.size()}, date);
  std::fill(k_secret.begin(), k_secret.end(), '\0');
  const auto k_region = hmac(k_date, region);
  const auto k_service = hmac(k_region, service);
  return hmac(k_service, "aws4_request");
}

SignedRequest sign(const SigningRequest& request, const Credentials& credentials,
                   const SigningOptions& options) {
  check(!request.method.empty(), "the method is empty");
  check(std::all_of(request.method.begin(), request.method.end(),
                    [](char c) { return is_token_char(static_cast<unsigned char>(c)); }),
        "the method is not an HTTP token");
  check(!request.path.empty() && request.path.front() == '/', "the path does not start with '/'");
  check(request.path.find_first_of("?#") == std::string::npos,
        "the path holds '?' or '#' (pass the query as query parameters)");
  // These three go into the credential scope, whose fields '/' separates.
  check(is_scope_field(options.region), "the region is empty or not letters, digits, '-', '_'");
  check(is_scope_field(options.service), "the service is empty or not letters, digits, '-', '_'");
  check(is_scope_field(credentials.access_key_id),
        "the access key id is empty or not letters, digits, '-', '_'");
  check(!credentials.secret_access_key.empty(), "the secret access key is empty");
  const std::string body_hash =
      request.payload_hash.empty() ? payload_hash("") : request.payload_hash;
  check(is_payload_hash(body_hash),
        "the payload hash is neither 64 lowercase hex digits nor UNSIGNED-PAYLOAD");

  SignedRequest out;
  out.amz_date = amz_date(options.time);
  const bool with_token = !credentials.session_token.empty();

  // The headers this adds, in the order they are sent.
  out.headers.push_back({"X-Amz-Date", out.amz_date});
  if (with_token) out.headers.push_back({"X-Amz-Security-Token", credentials.session_token});
  if (options.add_content_sha256) out.headers.push_back({"x-amz-content-sha256", body_hash});

  std::vector<std::pair<std::string, std::string>> headers;  // lowercase name, canonical value
  bool has_host = false;
  for (const auto& header : request.headers) {
    check(!header.name.empty() &&
              std::all_of(header.name.begin(), header.name.end(),
                          [](char c) { return is_token_char(static_cast<unsigned char>(c)); }),
          "a header name is empty or not an HTTP token");
    std::string name = lowercase(header.name);
    check(name != "authorization", "the request already has an Authorization header");
    for (const auto& added : out.headers) {
      check(name != lowercase(added.name), "the request already has a " + added.name + " header");
    }
    has_host = has_host || name == "host";
    headers.emplace_back(std::move(name), canonical_header_value(header.value));
  }
  check(has_host, "the request has no Host header");
  for (const auto& added : out.headers) {
    if (added.name == "X-Amz-Security-Token" && !options.sign_session_token) continue;
    headers.emplace_back(lowercase(added.name), added.value);
  }
  // By name; a repeated name's values stay in the order given.
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  std::string canonical_headers;
  std::string signed_headers;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const bool repeat = i > 0 && headers[i].first == headers[i - 1].first;
    if (repeat) {
      canonical_headers += ',';
    } else {
      if (i > 0) {
        canonical_headers += '\n';
        signed_headers += ';';
      }
      canonical_headers += headers[i].first;
      canonical_headers += ':';
      signed_headers += headers[i].first;
    }
    canonical_headers += headers[i].second;
  }
  canonical_headers += '\n';

  out.canonical_request = request.method + '\n' + canonical_uri(request.path) + '\n' +
                          canonical_query(request.query) + '\n' + canonical_headers + '\n' +
                          signed_headers + '\n' + body_hash;

  const std::string date = out.amz_date.substr(0, 8);
  const std::string scope = date + '/' + options.region + '/' + options.service + "/aws4_request";
  out.string_to_sign = std::string(kAlgorithm) + '\n' + out.amz_date + '\n' + scope + '\n' +
                       to_hex(sha256(out.canonical_request));

  const auto key =
      signing_key(credentials.secret_access_key, date, options.region, options.service);
  out.signature = to_hex(hmac(key, out.string_to_sign));
  out.authorization = std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + '/' +
                      scope + ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature;
  out.headers.push_back({"Authorization", out.authorization});
  return out;
}

}  // namespace outbox::aws
