// The default credentials chain (credentials_provider.hpp): the environment and the shared files
// read on a thread of the chain's own, then web identity (STS), the container endpoint and IMDSv2
// over HttpClient on the executor.
#include "credential_sources.hpp"

// clang-format off
#include <utility>
// clang-format on
#include <simdjson.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <charconv>
#include <ctime>
#include <fstream>
#include <sstream>

#include "json_protocol.hpp"
#include "outbox/aws/credentials_provider.hpp"
#include "outbox/common/log_text.hpp"

namespace outbox::aws {

namespace asio = boost::asio;
using common::quoted;

namespace {

std::string trimmed(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  return std::string(text);
}

std::optional<std::string> variable(const EnvLookup& env, std::string_view name) {
  auto value = env(name);
  if (!value) return std::nullopt;
  std::string text = trimmed(*value);
  if (text.empty()) return std::nullopt;
  return text;
}

bool is_true(const std::optional<std::string>& value) {
  if (!value) return false;
  std::string lower = *value;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "true";
}

int digits(std::string_view text, std::size_t at, std::size_t n, bool& ok) {
  int value = 0;
  if (at + n > text.size()) {
    ok = false;
    return 0;
  }
  const auto [end, ec] = std::from_chars(text.data() + at, text.data() + at + n, value);
  if (ec != std::errc() || end != text.data() + at + n) ok = false;
  return value;
}

// A whole file's text (a token file), or why not.
std::variant<std::string, std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::variant<std::string, std::string>(std::in_place_index<1>, "cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return std::variant<std::string, std::string>(std::in_place_index<1>, "cannot read it");
  return std::variant<std::string, std::string>(std::in_place_index<0>, text.str());
}

ServiceError credentials_error(FailureKind kind, std::string code, std::string message) {
  ServiceError e;
  e.kind = kind;
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS
  bool ok = text.size() >= 20 && text[4] == '-' && text[7] == '-' &&
            (text[10] == 'T' || text[10] == 't') && text[13] == ':' && text[16] == ':';
  if (!ok) return std::nullopt;
  std::tm tm{};
  tm.tm_year = digits(text, 0, 4, ok) - 1900;
  tm.tm_mon = digits(text, 5, 2, ok) - 1;
  tm.tm_mday = digits(text, 8, 2, ok);
  tm.tm_hour = digits(text, 11, 2, ok);
  tm.tm_min = digits(text, 14, 2, ok);
  tm.tm_sec = digits(text, 17, 2, ok);
  if (!ok || tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
      tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  std::size_t at = 19;
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;  // dropped: whole seconds
  }
  std::chrono::seconds offset{0};
  const std::string_view zone = text.substr(at);
  if (zone == "Z" || zone == "z") {
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    const int hours = digits(zone, 1, 2, ok);
    const int minutes = digits(zone, 4, 2, ok);
    if (!ok) return std::nullopt;
    offset = std::chrono::seconds((hours * 60 + minutes) * 60 * (zone[0] == '+' ? 1 : -1));
  } else {
    return std::nullopt;
  }
  const std::time_t seconds = ::timegm(&tm);
  if (seconds == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(seconds) - offset;
}

HttpTarget parse_http_target(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) {
    throw std::invalid_argument("URL " + quoted(url) + ": expected http:// or https://");
  }
  const auto path = url.find_first_of("/?", scheme + 3);
  HttpTarget out;
  out.endpoint = parse_endpoint(url.substr(0, path));
  if (path != std::string_view::npos) {
    out.target = std::string(url.substr(path));
    if (out.target.front() == '?') out.target.insert(0, "/");
  }
  if (out.target.find_first_of(" #\r\n") != std::string::npos) {
    throw std::invalid_argument("URL " + quoted(url) + ": a space, '#' or line break in its path");
  }
  out.url = std::string(url);
  return out;
}

std::optional<WebIdentitySettings> web_identity_settings(const EnvLookup& env,
                                                         const std::optional<std::string>& region) {
  auto token_file = variable(env, "AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!token_file) return std::nullopt;
  auto role_arn = variable(env, "AWS_ROLE_ARN");
  if (!role_arn) {
    throw CredentialsError(
        "aws: AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: web identity needs "
        "the role to assume");
  }
  WebIdentitySettings s;
  s.token_file = std::move(*token_file);
  s.role_arn = std::move(*role_arn);
  s.session_name =
      variable(env, "AWS_ROLE_SESSION_NAME")
          .value_or("outbox-relay-" +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()));
  std::string url;
  std::string from;
  if (auto v = variable(env, "AWS_ENDPOINT_URL_STS")) {
    url = *v;
    from = "AWS_ENDPOINT_URL_STS ";
  } else if (auto w = variable(env, "AWS_ENDPOINT_URL")) {
    url = *w;
    from = "AWS_ENDPOINT_URL ";
  } else {
    url = region ? "https://sts." + *region + ".amazonaws.com" : "https://sts.amazonaws.com";
  }
  try {
    s.sts = parse_http_target(url);
  } catch (const std::invalid_argument& e) {
    throw CredentialsError("aws: web identity: the STS endpoint " + from + e.what());
  }
  s.label = "web identity (AWS_ROLE_ARN " + s.role_arn + ", AWS_WEB_IDENTITY_TOKEN_FILE " +
            quoted(s.token_file) + ", STS " + from + s.sts.url + ")";
  return s;
}

std::string sts_web_identity_body(const WebIdentitySettings& settings, std::string_view token) {
  return "Action=AssumeRoleWithWebIdentity&RoleArn=" + uri_encode(settings.role_arn, false) +
         "&RoleSessionName=" + uri_encode(settings.session_name, false) +
         "&Version=2011-06-15&WebIdentityToken=" + uri_encode(token, false);
}

std::optional<ContainerSettings> container_settings(const EnvLookup& env) {
  ContainerSettings s;
  std::string url;
  if (auto relative = variable(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    s.variable = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
    url = "http://169.254.170.2" + (relative->starts_with('/') ? *relative : "/" + *relative);
  } else if (auto full = variable(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    s.variable = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    url = *full;
  } else {
    return std::nullopt;
  }
  try {
    s.where = parse_http_target(url);
  } catch (const std::invalid_argument& e) {
    throw CredentialsError("aws: " + s.variable + ": " + e.what());
  }
  if (!s.where.endpoint.tls && s.variable == "AWS_CONTAINER_CREDENTIALS_FULL_URI") {
    // The SDKs' rule: plain http only to this machine or to ECS's and EKS Pod Identity's agents.
    const std::string& host = s.where.endpoint.host;
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(host, ec);
    const bool allowed = host == "localhost" || (!ec && address.is_loopback()) ||
                         host == "169.254.170.2" || host == "169.254.170.23";
    if (!allowed) {
      throw CredentialsError("aws: AWS_CONTAINER_CREDENTIALS_FULL_URI " + quoted(url) +
                             ": plain http only to a loopback address, 169.254.170.2 (ECS) or "
                             "169.254.170.23 (EKS Pod Identity); use https");
    }
  }
  s.token = variable(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  s.token_file = variable(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  s.label = "container endpoint " + s.variable + " " + s.where.url;
  return s;
}

std::optional<ImdsSettings> imds_settings(const EnvLookup& env) {
  if (is_true(variable(env, "AWS_EC2_METADATA_DISABLED"))) return std::nullopt;
  ImdsSettings s;
  std::string url = "http://169.254.169.254";
  std::string from;
  if (auto v = variable(env, "AWS_EC2_METADATA_SERVICE_ENDPOINT")) {
    url = *v;
    from = "AWS_EC2_METADATA_SERVICE_ENDPOINT ";
  } else if (auto mode = variable(env, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
             mode && *mode != "IPv4" && *mode != "ipv4") {
    throw CredentialsError("aws: AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE " + quoted(*mode) +
                           ": outbox-relay reaches the instance metadata service over IPv4 only");
  }
  try {
    s.endpoint = parse_endpoint(url);
  } catch (const std::invalid_argument& e) {
    throw CredentialsError("aws: instance metadata " + from + e.what());
  }
  s.label = "instance metadata (IMDSv2) at " + from + s.endpoint.url();
  return s;
}

namespace {

// The four fields every source answers with; `expiration` text parsed.
std::variant<ResolvedCredentials, std::string> make_credentials(std::string key_id,
                                                                std::string secret,
                                                                std::string token,
                                                                std::string_view expiration,
                                                                std::string source) {
  if (key_id.empty() || secret.empty()) {
    return std::string("the answer has no AccessKeyId or SecretAccessKey");
  }
  ResolvedCredentials out;
  out.credentials = {std::move(key_id), std::move(secret), std::move(token)};
  out.source = std::move(source);
  if (!expiration.empty()) {
    out.expiration = parse_iso8601(expiration);
    if (!out.expiration) return "the answer's Expiration " + quoted(expiration) + " is no date";
  }
  return out;
}

}  // namespace

std::variant<ResolvedCredentials, std::string> parse_sts_credentials(std::string_view xml,
                                                                     std::string source) {
  const auto at = xml.find("<Credentials>");
  if (at == std::string_view::npos) return std::string("the answer has no <Credentials>");
  const std::string_view credentials = xml.substr(at);
  const std::string expiration = xml_element(credentials, "Expiration");
  return make_credentials(xml_element(credentials, "AccessKeyId"),
                          xml_element(credentials, "SecretAccessKey"),
                          xml_element(credentials, "SessionToken"), expiration, std::move(source));
}

std::variant<ResolvedCredentials, std::string> parse_json_credentials(std::string_view json,
                                                                      std::string source) {
  simdjson::dom::parser parser;
  simdjson::dom::object doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) {
    return std::string("the answer is no JSON object");
  }
  const auto text = [&doc](const char* key) {
    std::string_view v;
    return doc[key].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
  };
  if (const std::string code = text("Code"); !code.empty() && code != "Success") {
    return "the answer's Code is " + quoted(code) + ", not Success";
  }
  return make_credentials(text("AccessKeyId"), text("SecretAccessKey"), text("Token"),
                          text("Expiration"), std::move(source));
}

namespace {

using FetchResult = std::variant<ResolvedCredentials, ServiceError>;
using Done = std::function<void(FetchResult)>;

// What the chain learns on its file thread: the first two sources' answer, or the settings of
// the next ones.
struct Discovery {
  std::optional<ResolvedCredentials> credentials;
  std::optional<std::string> refused;
  std::string tried;  // "environment: ...; shared files: ..."
  std::optional<WebIdentitySettings> web_identity;
  std::optional<ContainerSettings> container;
  std::optional<ImdsSettings> imds;
};

Discovery discover(const EnvLookup& env) {
  Discovery d;
  try {
    for (const auto& provider : {environment_provider(), shared_files_provider()}) {
      auto result = provider.resolve(env);
      if (auto* found = std::get_if<ResolvedCredentials>(&result)) {
        d.credentials = std::move(*found);
        return d;
      }
      d.tried +=
          (d.tried.empty() ? "" : "; ") + provider.name + ": " + std::get<std::string>(result);
    }
    std::optional<std::string> region;
    try {
      if (auto r = resolve_region(env)) region = r->region;
    } catch (const CredentialsError&) {
      // The config file was refused above already, or has nothing to do with the region.
    }
    d.web_identity = web_identity_settings(env, region);
    if (d.web_identity) return d;
    d.tried += "; web identity: AWS_WEB_IDENTITY_TOKEN_FILE unset";
    d.container = container_settings(env);
    if (d.container) return d;
    d.tried +=
        "; container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and "
        "AWS_CONTAINER_CREDENTIALS_FULL_URI unset";
    d.imds = imds_settings(env);
    if (!d.imds) d.tried += "; instance metadata: AWS_EC2_METADATA_DISABLED is true";
  } catch (const CredentialsError& e) {
    d.refused = e.what();
  }
  return d;
}

// The kind of a credential endpoint's error answer: refused (4xx) or not reached / failing.
FailureKind endpoint_failure(const HttpResponse& response, std::string_view code) {
  if (!response.error.empty()) return FailureKind::kRetryable;
  if (classify(code, response.status) == FailureKind::kRetryable ||
      code == "IDPCommunicationError") {
    return FailureKind::kRetryable;
  }
  return FailureKind::kClient;
}

class Chain : public std::enable_shared_from_this<Chain> {
 public:
  Chain(asio::any_io_executor executor, EnvLookup env, CredentialsChainOptions options)
      : executor_(std::move(executor)), env_(std::move(env)), options_(std::move(options)) {}
  ~Chain() { files_.join(); }

  void fetch(Done done) {
    switch (chosen_) {
      case Chosen::kNone:
        break;
      case Chosen::kFixed:
        done(*fixed_);
        return;
      case Chosen::kWebIdentity:
        fetch_web_identity(std::move(done));
        return;
      case Chosen::kContainer:
        fetch_container(std::move(done));
        return;
      case Chosen::kImds:
        fetch_imds(std::move(done), false);
        return;
    }
    // Blocking file reads: on the chain's own thread, the answer back on the executor.
    asio::post(files_, [env = env_, executor = executor_, weak = weak_from_this(),
                        done = std::move(done)]() mutable {
      Discovery d = discover(env);
      asio::post(executor,
                 [weak = std::move(weak), d = std::move(d), done = std::move(done)]() mutable {
                   if (const auto self = weak.lock())
                     self->discovered(std::move(d), std::move(done));
                 });
    });
  }

 private:
  enum class Chosen { kNone, kFixed, kWebIdentity, kContainer, kImds };

  void discovered(Discovery d, Done done) {
    if (d.credentials) {
      chosen_ = Chosen::kFixed;
      fixed_ = std::move(d.credentials);
      done(*fixed_);
      return;
    }
    if (d.refused) {
      done(credentials_error(FailureKind::kClient, "CredentialsRefused", *d.refused));
      return;
    }
    tried_ = std::move(d.tried);
    if (d.web_identity) {
      web_identity_ = std::move(d.web_identity);
      client_for(web_identity_->sts.endpoint, false);
      chosen_ = Chosen::kWebIdentity;
      fetch_web_identity(std::move(done));
    } else if (d.container) {
      container_ = std::move(d.container);
      client_for(container_->where.endpoint, false);
      chosen_ = Chosen::kContainer;
      fetch_container(std::move(done));
    } else if (d.imds) {
      imds_ = std::move(d.imds);
      client_for(imds_->endpoint, true);
      fetch_imds(std::move(done), true);
    } else {
      done(credentials_error(FailureKind::kClient, "NoCredentials",
                             "aws: no credentials found (" + tried_ + ")"));
    }
  }

  void client_for(const Endpoint& endpoint, bool imds) {
    HttpClientConfig config;
    config.max_connections = 1;
    config.connect_timeout = options_.connect_timeout;
    config.request_timeout = options_.request_timeout;
    if (imds) {
      // The SDKs' 1 s: off EC2 the address answers nothing, and the chain must not hang on it.
      config.connect_timeout = std::min(config.connect_timeout, std::chrono::milliseconds(1'000));
      config.request_timeout = std::min(config.request_timeout, std::chrono::milliseconds(1'000));
    }
    config.ca_file = options_.ca_file;
    http_ = std::make_unique<HttpClient>(executor_, endpoint, config);
  }

  // Reads `path` on the file thread; `then` gets its text or why not, on the executor.
  void read_later(std::string path,
                  std::function<void(std::variant<std::string, std::string>)> then) {
    asio::post(files_, [path = std::move(path), executor = executor_, weak = weak_from_this(),
                        then = std::move(then)]() mutable {
      auto text = read_file(path);
      asio::post(executor, [weak = std::move(weak), text = std::move(text),
                            then = std::move(then)]() mutable {
        if (const auto self = weak.lock()) then(std::move(text));
      });
    });
  }

  // An endpoint's error answer as a ServiceError of `label`, with `secret` scrubbed.
  static ServiceError answer_error(const std::string& label, const HttpResponse& response,
                                   std::string_view secret) {
    if (!response.error.empty()) {
      return credentials_error(FailureKind::kRetryable, "CredentialsUnavailable",
                               "aws: " + label + ": " + response.error);
    }
    const ErrorAnswer answer =
        read_error_answer(response.body, response.header("x-amzn-query-error"));
    const std::string code =
        answer.code.empty() ? "HTTP" + std::to_string(response.status) : answer.code;
    const std::string said = scrub(answer.message, secret);
    return credentials_error(endpoint_failure(response, code), code,
                             "aws: " + label + " answered " + code + " (HTTP " +
                                 std::to_string(response.status) + ")" +
                                 (said.empty() ? "" : ": " + said));
  }

  void fetch_web_identity(Done done) {
    const auto& s = *web_identity_;
    read_later(s.token_file, [this, done = std::move(done)](
                                 std::variant<std::string, std::string> file) mutable {
      const auto& s = *web_identity_;
      if (file.index() == 1) {
        done(credentials_error(FailureKind::kClient, "CredentialsRefused",
                               "aws: " + s.label + ": the token file: " + std::get<1>(file)));
        return;
      }
      std::string token = trimmed(std::get<0>(file));
      if (token.empty()) {
        done(credentials_error(FailureKind::kClient, "CredentialsRefused",
                               "aws: " + s.label + ": the token file is empty"));
        return;
      }
      HttpRequest request;
      request.method = "POST";
      request.target = s.sts.target;
      request.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
      request.body = sts_web_identity_body(s, token);
      http_->async_request(std::move(request), [this, token = std::move(token),
                                                done = std::move(done)](HttpResponse response) {
        const auto& s = *web_identity_;
        if (!response.error.empty() || response.status != 200) {
          done(answer_error(s.label, response, token));
          return;
        }
        finish(parse_sts_credentials(response.body, s.label), s.label, done);
      });
    });
  }

  void fetch_container(Done done) {
    const auto& s = *container_;
    if (!s.token_file) {
      container_request(s.token, std::move(done));
      return;
    }
    read_later(*s.token_file,
               [this, done = std::move(done)](std::variant<std::string, std::string> file) mutable {
                 if (file.index() == 1) {
                   done(credentials_error(
                       FailureKind::kClient, "CredentialsRefused",
                       "aws: " + container_->label + ": AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " +
                           quoted(*container_->token_file) + ": " + std::get<1>(file)));
                   return;
                 }
                 container_request(trimmed(std::get<0>(file)), std::move(done));
               });
  }

  void container_request(std::optional<std::string> token, Done done) {
    const auto& s = *container_;
    HttpRequest request;
    request.method = "GET";
    request.target = s.where.target;
    if (token) {
      if (token->find_first_of("\r\n") != std::string::npos) {
        done(credentials_error(FailureKind::kClient, "CredentialsRefused",
                               "aws: " + s.label + ": the authorization token has a line break"));
        return;
      }
      request.headers.push_back({"Authorization", *token});
    }
    http_->async_request(std::move(request), [this, token = token.value_or(""),
                                              done = std::move(done)](HttpResponse response) {
      const auto& s = *container_;
      if (!response.error.empty() || response.status != 200) {
        done(answer_error(s.label, response, token));
        return;
      }
      finish(parse_json_credentials(response.body, s.label), s.label, done);
    });
  }

  void fetch_imds(Done done, bool discovering) {
    const std::string label = imds_->label;
    auto fail = [this, discovering, done](const HttpResponse& response, std::string what) {
      ServiceError e = answer_error(imds_->label + " (" + what + ")", response, "");
      if (discovering) {
        // Nothing answered where the last source would be: there are no credentials.
        e.kind = FailureKind::kClient;
        e.code = "NoCredentials";
        e.message = "aws: no credentials found (" + tried_ + "; " +
                    e.message.substr(std::string_view("aws: ").size()) + ")";
      }
      done(std::move(e));
    };
    HttpRequest token_request;
    token_request.method = "PUT";
    token_request.target = "/latest/api/token";
    token_request.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
    http_->async_request(
        std::move(token_request), [this, fail, done, discovering](HttpResponse response) mutable {
          if (!response.error.empty() || response.status != 200 || response.body.empty()) {
            fail(response, "PUT /latest/api/token");
            return;
          }
          const std::string token = trimmed(response.body);
          HttpRequest role_request;
          role_request.method = "GET";
          role_request.target = "/latest/meta-data/iam/security-credentials/";
          role_request.headers = {{"X-aws-ec2-metadata-token", token}};
          http_->async_request(std::move(role_request), [this, fail, done, token,
                                                         discovering](HttpResponse roles) mutable {
            if (!roles.error.empty() || roles.status != 200) {
              fail(roles, roles.status == 404 ? "no IAM role attached to the instance"
                                              : "GET /latest/meta-data/iam/security-credentials/");
              return;
            }
            const std::string role = trimmed(roles.body.substr(0, roles.body.find('\n')));
            if (role.empty() || role.find_first_of("/?# ") != std::string::npos) {
              HttpResponse no_role = roles;
              fail(no_role, "no IAM role named in its answer");
              return;
            }
            HttpRequest credentials_request;
            credentials_request.method = "GET";
            credentials_request.target = "/latest/meta-data/iam/security-credentials/" + role;
            credentials_request.headers = {{"X-aws-ec2-metadata-token", token}};
            http_->async_request(
                std::move(credentials_request),
                [this, fail, done, role, discovering](HttpResponse answer) mutable {
                  if (!answer.error.empty() || answer.status != 200) {
                    fail(answer, "GET the role's credentials");
                    return;
                  }
                  const std::string label = imds_->label + ", role " + role;
                  auto parsed = parse_json_credentials(answer.body, label);
                  if (std::holds_alternative<ResolvedCredentials>(parsed) && discovering) {
                    chosen_ = Chosen::kImds;
                  }
                  finish(std::move(parsed), label, done);
                });
          });
        });
  }

  void finish(std::variant<ResolvedCredentials, std::string> parsed, const std::string& label,
              const Done& done) {
    if (auto* found = std::get_if<ResolvedCredentials>(&parsed)) {
      done(std::move(*found));
      return;
    }
    done(credentials_error(FailureKind::kRetryable, "UnreadableCredentials",
                           "aws: " + label + ": " + std::get<std::string>(parsed)));
  }

  asio::any_io_executor executor_;
  EnvLookup env_;
  CredentialsChainOptions options_;
  asio::thread_pool files_{1};
  Chosen chosen_ = Chosen::kNone;
  std::optional<ResolvedCredentials> fixed_;
  std::optional<WebIdentitySettings> web_identity_;
  std::optional<ContainerSettings> container_;
  std::optional<ImdsSettings> imds_;
  std::unique_ptr<HttpClient> http_;
  std::string tried_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> default_credentials_provider(
    boost::asio::any_io_executor executor, EnvLookup env, CredentialsChainOptions options) {
  auto chain = std::make_shared<Chain>(executor, std::move(env), options);
  return refreshing_credentials(
      std::move(executor), [chain](Done done) { chain->fetch(std::move(done)); }, options.policy);
}

}  // namespace outbox::aws
