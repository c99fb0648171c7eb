// Where the AWS credentials and region come from: the part of the AWS SDKs' default chain that
// needs no network. Credentials: the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), then the shared files' profile (AWS_PROFILE, default "default"; the
// credentials file AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials, before the config
// file AWS_CONFIG_FILE, default ~/.aws/config, whose sections read [profile NAME]). Region:
// AWS_REGION, AWS_DEFAULT_REGION, then the profile's `region` in the config file.
//
// The chain is an ordered list of sources, each of which finds credentials, says why it has
// none (the next one is asked), or refuses (what it found cannot be used: the chain stops). The
// sources that need HTTP (web identity through STS, the container endpoint, IMDSv2) come after
// these two in default_credentials_provider() (credentials_provider.hpp), asynchronous and
// refreshed; theirs expire, hence ResolvedCredentials::expiration. resolve_credentials() is the
// blocking part alone.
//
// Every result and error names its source (variable, file, profile) and never a secret: an error
// about a file names the line, not its text. Blocking file reads: never on the relay's io thread.
// Functions of their arguments and the files; thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "outbox/aws/sigv4.hpp"

namespace outbox::aws {

// An environment variable's value, none when unset; the process's or a test's.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
// getenv(3).
EnvLookup process_environment();

struct ResolvedCredentials {
  Credentials credentials;
  // "environment", "shared credentials file /home/u/.aws/credentials (profile p)", ...
  std::string source;
  std::optional<std::chrono::system_clock::time_point> expiration;  // none: never expires
};

// For a log line or an error: the access key id's last four characters, the source and whether a
// session token is there; never the secret or the token.
std::string to_string(const ResolvedCredentials& resolved);

// What the chain refuses: credentials found but unusable, or none anywhere (the message lists
// every source asked and why it had none).
class CredentialsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CredentialsSource {
  std::string name;
  // Credentials, or why this source has none (the chain asks the next); throws CredentialsError
  // when what it found cannot be used.
  std::function<std::variant<ResolvedCredentials, std::string>(const EnvLookup& env)> resolve;
};

// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); an empty value counts as
// unset. Refuses one of the pair without the other.
CredentialsSource environment_provider();
// The profile's aws_access_key_id, aws_secret_access_key and aws_session_token, from the
// credentials file, else from the config file. Refuses a profile with one key of the pair, a
// profile that needs a source not built yet (role_arn, credential_process, SSO, web identity), an
// AWS_PROFILE that no file has, and a file it cannot read or parse.
CredentialsSource shared_files_provider();
// The providers above, in the SDKs' order.
std::vector<CredentialsSource> default_credentials_chain();

// The first provider of `chain` that has credentials; throws CredentialsError.
ResolvedCredentials resolve_credentials(const EnvLookup& env,
                                        const std::vector<CredentialsSource>& chain);
ResolvedCredentials resolve_credentials(const EnvLookup& env);

struct ResolvedRegion {
  std::string region;
  std::string source;  // "environment variable AWS_REGION", "config file /x (profile p)"
};
// None when no source has one; throws CredentialsError for a config file it cannot read or parse.
std::optional<ResolvedRegion> resolve_region(const EnvLookup& env);

}  // namespace outbox::aws
