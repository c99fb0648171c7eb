// The credentials an AWS client signs with, asked for at every request (SqsConfig and
// EventBridgeConfig::credentials_provider): fixed ones, or temporary ones that a source serves and
// this provider refreshes before they expire, on the io thread, while the requests go on.
//
// The default chain, in the SDKs' order, the first source that has credentials chosen and kept:
//   1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN)
//   2. the shared files' profile (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE)
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (AWS_ROLE_SESSION_NAME) through
//      STS AssumeRoleWithWebIdentity (an unsigned query-protocol POST, XML answer) at
//      AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com; the
//      token file is read again at every refresh (EKS rotates it)
//   4. the container endpoint (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on
//      http://169.254.170.2, else AWS_CONTAINER_CREDENTIALS_FULL_URI (https, or http to a loopback
//      address or to ECS's and EKS's 169.254.170.2 and 169.254.170.23), with the Authorization
//      header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every refresh), else
//      AWS_CONTAINER_AUTHORIZATION_TOKEN
//   5. EC2's instance metadata service, IMDSv2 (PUT /latest/api/token, then
//      /latest/meta-data/iam/security-credentials/ and its role), at
//      AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254; not asked when
//      AWS_EC2_METADATA_DISABLED is true. 1 s deadlines, as the SDKs' (off EC2, nothing answers).
// Sources 1 and 2 give credentials that never expire; 3 to 5 temporary ones with an Expiration.
// A source set in the environment but broken (a missing token file, STS refusing the role) is an
// error naming it, not a reason to ask the next: the SDKs do the same.
//
// Refresh (RefreshPolicy): credentials that expire within `prefetch` (5 minutes, as the SDKs) are
// refreshed in the background while they are still used; within `stale` of their expiration (1
// minute) they are no longer used: requests wait for the fresh ones. A failed background refresh
// is tried again after `retry_interval` while the old credentials last.
//
// Errors are ServiceErrors (service_error.hpp): kClient when a source refuses or nothing has
// credentials (the relay exits 1 with the message), kRetryable when an endpoint could not be
// reached or answered 5xx while credentials were expected from it. Messages name the source
// (variables, file, endpoint), never a secret, token or session token.
//
// Threads: get() on the executor's thread only; handlers run there. File reads (the shared files,
// token files) run on a thread of the provider's own, never on the executor's.
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/service_error.hpp"

namespace outbox::aws {

class CredentialsProvider {
 public:
  // Exactly one of the two is set, and only for the handler's call.
  using Handler =
      std::function<void(const ResolvedCredentials* credentials, const ServiceError* error)>;

  virtual ~CredentialsProvider() = default;
  // Calls `handler` with credentials usable now: at once (inside the call) when it has them,
  // else once a fetch ends. Handlers waiting for the same fetch are called in the order they came.
  virtual void get(Handler handler) = 0;
  // What it is, for a log line: "environment", "web identity (role ...)"; until the first fetch
  // ended, "the default credentials chain".
  virtual std::string source() const = 0;
};

// Credentials that never change (a test's, or what resolve_credentials() found).
std::shared_ptr<CredentialsProvider> fixed_credentials(ResolvedCredentials credentials);

struct RefreshPolicy {
  std::chrono::seconds prefetch{300};
  std::chrono::seconds stale{60};
  std::chrono::seconds retry_interval{10};
};

// A fetch of temporary credentials: calls its argument once, on the executor's thread, with the
// credentials (their expiration set, or none: they never expire) or an error.
using CredentialsFetch =
    std::function<void(std::function<void(std::variant<ResolvedCredentials, ServiceError>)>)>;

// Caches what `fetch` gives and calls it again as the policy says.
std::shared_ptr<CredentialsProvider> refreshing_credentials(boost::asio::any_io_executor executor,
                                                            CredentialsFetch fetch,
                                                            RefreshPolicy policy = {});

struct CredentialsChainOptions {
  RefreshPolicy policy;
  // For the HTTP sources' clients (their deadlines apply per request); IMDS uses 1 s at most.
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds request_timeout{10'000};
  std::string ca_file;  // for an https STS or container endpoint; empty: the system's store
};

// The default chain above, on `env` (the process's, or a test's), resolved at the first get().
std::shared_ptr<CredentialsProvider> default_credentials_provider(
    boost::asio::any_io_executor executor, EnvLookup env, CredentialsChainOptions options = {});

}  // namespace outbox::aws
