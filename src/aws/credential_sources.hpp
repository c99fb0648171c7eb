// The HTTP credential sources' settings from the environment and their answers read, without
// I/O: the pure half of credential_sources.cpp, private to src/aws and unit-tested
// (tests/unit/aws/credential_sources_test.cpp). The sources themselves are described in
// credentials_provider.hpp.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/http_client.hpp"

namespace outbox::aws {

// "2026-12-04T06:00:00Z", with optional fractional seconds and a "+hh:mm"/"-hh:mm" offset
// instead of 'Z'; none when it is not that.
std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text);

// An http(s) URL with a path: its endpoint and the request target (path and query).
struct HttpTarget {
  Endpoint endpoint;
  std::string target = "/";
  std::string url;  // as given: for messages (it holds no secret)
};
// Throws std::invalid_argument naming what is wrong.
HttpTarget parse_http_target(std::string_view url);

struct WebIdentitySettings {
  std::string token_file;
  std::string role_arn;
  std::string session_name;
  HttpTarget sts;
  std::string label;  // "web identity (role ..., token file ..., STS ...)"
};
// None when AWS_WEB_IDENTITY_TOKEN_FILE is unset; throws CredentialsError when it is set without
// AWS_ROLE_ARN or the STS endpoint URL is bad. `region` picks the regional STS endpoint.
std::optional<WebIdentitySettings> web_identity_settings(const EnvLookup& env,
                                                         const std::optional<std::string>& region);
// The AssumeRoleWithWebIdentity form body.
std::string sts_web_identity_body(const WebIdentitySettings& settings, std::string_view token);

struct ContainerSettings {
  HttpTarget where;
  std::string variable;                   // the variable that gave the URL
  std::optional<std::string> token;       // AWS_CONTAINER_AUTHORIZATION_TOKEN
  std::optional<std::string> token_file;  // AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (wins)
  std::string label;
};
// None when neither URI variable is set; throws CredentialsError for a URL the SDKs refuse
// (http to a host that is neither loopback nor ECS's or EKS's address).
std::optional<ContainerSettings> container_settings(const EnvLookup& env);

struct ImdsSettings {
  Endpoint endpoint;
  std::string label;
};
// None when AWS_EC2_METADATA_DISABLED is true; throws CredentialsError for a bad
// AWS_EC2_METADATA_SERVICE_ENDPOINT.
std::optional<ImdsSettings> imds_settings(const EnvLookup& env);

// STS's AssumeRoleWithWebIdentity answer (XML); the container endpoint's and IMDS's (JSON:
// AccessKeyId, SecretAccessKey, Token, Expiration; IMDS's Code must be "Success"). The
// credentials with `source`, or what is wrong with the answer (never a value from it).
std::variant<ResolvedCredentials, std::string> parse_sts_credentials(std::string_view xml,
                                                                     std::string source);
std::variant<ResolvedCredentials, std::string> parse_json_credentials(std::string_view json,
                                                                      std::string source);

}  // namespace outbox::aws
