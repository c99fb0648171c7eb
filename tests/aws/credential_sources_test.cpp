// The default credentials chain's HTTP sources against endpoints the test serves on 127.0.0.1
// (TestHttpServer: STS's AssumeRoleWithWebIdentity, a container endpoint, IMDSv2), handing out
// temporary credentials moto's STS made (AssumeRole of a role of its IAM), and aws::SqsClient
// signing with them against moto (authentication on: the session token checked too).
// moto cannot be STS here: with its authentication on it refuses the unsigned
// AssumeRoleWithWebIdentity (it reads every request's Authorization header).
//
// Each source: the first credentials expire 5 minutes and 2 s after they are served, so the
// provider refreshes them in the background 2 s later; the refresh is held by the test's endpoint
// while a request still goes out with the old key; then the old key's role loses its policy in
// moto, and the next request passes: it was signed with the new one. The token files are read again
// at the refresh. Then the chain's order, and failures naming their source without a secret.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "moto_roles.hpp"
#include "outbox/aws/credentials_provider.hpp"
#include "outbox/aws/sqs_client.hpp"
#include "outbox_test/test_http_server.hpp"

namespace {

namespace aws = outbox::aws;
namespace fs = std::filesystem;
using outbox_test::await_result;
using outbox_test::moto;
using outbox_test::ServedAnswer;
using outbox_test::ServedRequest;
using outbox_test::TestHttpServer;
using namespace std::chrono_literals;

std::string unique_name(std::string_view prefix) {
  return std::string(prefix) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

using Key = outbox_test::RoleKey;
using outbox_test::iso8601;
using outbox_test::json_answer;
using outbox_test::sts_answer;

// A gate the test opens: an endpoint's handler waits at it (at most 20 s).
class Gate {
 public:
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, 20s, [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

class CredentialSources : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / unique_name("outbox-creds-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    env_["HOME"] = dir_.string();  // no shared files
  }
  void TearDown() override { fs::remove_all(dir_); }

  aws::EnvLookup env() const {
    return [vars = env_](std::string_view name) -> std::optional<std::string> {
      const auto it = vars.find(std::string(name));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  // Temporary credentials of a new role of moto's IAM allowed SQS (moto_roles.hpp).
  Key role_credentials() { return outbox_test::moto_role_credentials(io_); }
  std::pair<Key, Key> two_keys() { return {role_credentials(), role_credentials()}; }
  void delete_key(const Key& key) { outbox_test::moto_revoke(io_, key); }

  std::optional<std::string> create_queue(aws::SqsClient& client) {
    auto r = await_result<aws::SqsCallResult>(io_, [&](std::function<void(aws::SqsCallResult)> d) {
      client.call("CreateQueue", "{\"QueueName\":\"" + unique_name("creds") + "\"}", std::move(d));
    });
    if (!r) return "no answer";
    if (r->error) return r->error->code + ": " + r->error->message;
    return std::nullopt;
  }

  aws::SqsClient client(std::shared_ptr<aws::CredentialsProvider> provider) {
    aws::SqsConfig c;
    c.endpoint_url = moto().endpoint;
    c.region = moto().region;
    c.credentials_provider = std::move(provider);
    return aws::SqsClient(io_.get_executor(), std::move(c));
  }

  // The first credentials: a refresh is due 2 s after they were served.
  static std::string first_expiration() {
    return iso8601(std::chrono::system_clock::now() + 300s + 2s);
  }
  static std::string later_expiration() { return iso8601(std::chrono::system_clock::now() + 1h); }

  // Runs the io_context until `done` or 20 s.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.restart();  // each time: the chain's file thread posts to it
      io_.run_one_for(10ms);
    }
    return done();
  }

  // The refresh story every source goes through, `served` counting its credential answers.
  void refresh_story(std::shared_ptr<aws::CredentialsProvider> provider,
                     const std::function<int()>& served, Gate& second, const Key& a,
                     const std::string& source_word) {
    auto sqs = client(provider);
    EXPECT_EQ(create_queue(sqs), std::nullopt);
    EXPECT_EQ(served(), 1);
    EXPECT_NE(provider->source().find(source_word), std::string::npos) << provider->source();
    // Past the refresh time: this request starts the refresh and goes out at once with the old
    // key, while the endpoint holds the new one.
    const auto due = std::chrono::steady_clock::now() + 2500ms;
    while (std::chrono::steady_clock::now() < due) std::this_thread::sleep_for(50ms);
    EXPECT_EQ(create_queue(sqs), std::nullopt);
    ASSERT_TRUE(run_until([&] { return served() == 2; }));
    EXPECT_EQ(create_queue(sqs), std::nullopt);  // the old key still: the refresh is held
    second.open();
    // The refresh's answer is on its way: once it came, the old key loses its access in moto and
    // the next request passes with the new one.
    const auto refreshed = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < refreshed) {
      bool got = false;
      provider->get([&](const aws::ResolvedCredentials* c, const aws::ServiceError*) {
        got = c != nullptr && c->credentials.access_key_id != a.id;
      });
      if (got) break;
      io_.restart();
      io_.run_one_for(10ms);
    }
    delete_key(a);
    EXPECT_EQ(create_queue(sqs), std::nullopt);
    EXPECT_EQ(served(), 2);
  }

  boost::asio::io_context io_;
  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(CredentialSources, WebIdentityThroughStsRefreshedWithTheTokenReadAgain) {
  const auto [a, b] = two_keys();
  Gate second;
  std::atomic<int> answers{0};
  TestHttpServer sts([&](const ServedRequest&) {
    const int n = ++answers;
    if (n >= 2) second.wait();
    return ServedAnswer{
        200,
        sts_answer(n == 1 ? a : b, n == 1 ? first_expiration() : later_expiration()),
        {{"Content-Type", "text/xml"}}};
  });
  const std::string token_file = write("token", "token-one\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = token_file;
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/outbox";
  env_["AWS_ROLE_SESSION_NAME"] = "relay-1";
  env_["AWS_ENDPOINT_URL_STS"] = sts.url();
  env_["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1";  // the STS-specific one wins
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:1/never";  // after web identity
  auto provider = aws::default_credentials_provider(io_.get_executor(), env());
  // The token rotates (EKS writes the file again): the refresh sends the new one.
  int served_before_rotation = 0;
  refresh_story(
      provider,
      [&] {
        if (answers == 1 && served_before_rotation == 0) {
          served_before_rotation = 1;
          std::ofstream(token_file) << "token-two\n";
        }
        return answers.load();
      },
      second, a, "web identity");
  const auto seen = sts.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].header("Content-Type"), "application/x-www-form-urlencoded; charset=utf-8");
  EXPECT_EQ(seen[0].header("Authorization"), "");  // unsigned, as the SDKs send it
  EXPECT_EQ(seen[0].body,
            "Action=AssumeRoleWithWebIdentity&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%"
            "2Foutbox&RoleSessionName=relay-1&Version=2011-06-15&WebIdentityToken=token-one");
  EXPECT_NE(seen[1].body.find("WebIdentityToken=token-two"), std::string::npos) << seen[1].body;
}

TEST_F(CredentialSources, ContainerEndpointWithItsAuthorizationTokenFile) {
  const auto [a, b] = two_keys();
  Gate second;
  std::atomic<int> answers{0};
  TestHttpServer container([&](const ServedRequest& r) {
    if (r.header("Authorization").rfind("Bearer pod-", 0) != 0) return ServedAnswer{401, "no"};
    const int n = ++answers;
    if (n >= 2) second.wait();
    return ServedAnswer{
        200, json_answer(n == 1 ? a : b, n == 1 ? first_expiration() : later_expiration())};
  });
  const std::string token_file = write("pod-token", "Bearer pod-1\n");
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = container.url() + "/v1/credentials?x=1";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = token_file;
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "Bearer ignored";      // the file wins
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:1";  // after the container
  auto provider = aws::default_credentials_provider(io_.get_executor(), env());
  bool rotated = false;
  refresh_story(
      provider,
      [&] {
        if (answers == 1 && !rotated) {
          rotated = true;
          std::ofstream(token_file) << "Bearer pod-2\n";
        }
        return answers.load();
      },
      second, a, "container endpoint AWS_CONTAINER_CREDENTIALS_FULL_URI");
  const auto seen = container.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].target, "/v1/credentials?x=1");
  EXPECT_EQ(seen[0].header("Authorization"), "Bearer pod-1");
  EXPECT_EQ(seen[1].header("Authorization"), "Bearer pod-2");
}

TEST_F(CredentialSources, InstanceMetadataImdsV2) {
  const auto [a, b] = two_keys();
  Gate second;
  std::atomic<int> answers{0};
  TestHttpServer imds([&](const ServedRequest& r) {
    if (r.method == "PUT" && r.target == "/latest/api/token") {
      if (r.header("X-aws-ec2-metadata-token-ttl-seconds").empty()) return ServedAnswer{400, ""};
      return ServedAnswer{200, "imds-session-token"};
    }
    if (r.header("X-aws-ec2-metadata-token") != "imds-session-token") {
      return ServedAnswer{401, ""};
    }
    if (r.target == "/latest/meta-data/iam/security-credentials/") {
      return ServedAnswer{200, "outbox-role\n"};
    }
    if (r.target == "/latest/meta-data/iam/security-credentials/outbox-role") {
      const int n = ++answers;
      if (n >= 2) second.wait();
      return ServedAnswer{
          200, json_answer(n == 1 ? a : b, n == 1 ? first_expiration() : later_expiration())};
    }
    return ServedAnswer{404, ""};
  });
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url() + "/";
  auto provider = aws::default_credentials_provider(io_.get_executor(), env());
  refresh_story(
      provider, [&] { return answers.load(); }, second, a, "instance metadata (IMDSv2)");
  EXPECT_NE(provider->source().find("role outbox-role"), std::string::npos) << provider->source();
  const auto seen = imds.requests();
  ASSERT_EQ(seen.size(), 6u);  // token, role, credentials; twice
  EXPECT_EQ(seen[0].method, "PUT");
  EXPECT_EQ(seen[0].header("X-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(seen[1].target, "/latest/meta-data/iam/security-credentials/");
}

// The order: environment, shared files, web identity, container, instance metadata. Each step
// takes the winner away; only the winner's endpoint is asked.
TEST_F(CredentialSources, TheChainsOrder) {
  auto serve = [](const std::string& id) {
    return [id](const ServedRequest& r) {
      if (r.method == "PUT") return ServedAnswer{200, "t"};
      if (r.target == "/latest/meta-data/iam/security-credentials/") return ServedAnswer{200, "r"};
      const Key key{id, "secret-" + id, "token-" + id, ""};
      const std::string later = iso8601(std::chrono::system_clock::now() + 1h);
      return ServedAnswer{200, id == "AKSTS" ? sts_answer(key, later) : json_answer(key, later)};
    };
  };
  TestHttpServer sts(serve("AKSTS"));
  TestHttpServer container(serve("AKCONTAINER"));
  TestHttpServer imds(serve("AKIMDS"));
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "secret-env";
  env_["AWS_SHARED_CREDENTIALS_FILE"] =
      write("credentials", "[default]\naws_access_key_id = AKFILES\naws_secret_access_key = s\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = write("token", "t");
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/r";
  env_["AWS_ENDPOINT_URL_STS"] = sts.url();
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = container.url() + "/creds";
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url();

  auto key_now = [&] {
    auto provider = aws::default_credentials_provider(io_.get_executor(), env());
    std::string key;
    provider->get([&](const aws::ResolvedCredentials* c, const aws::ServiceError* e) {
      key = c != nullptr ? c->credentials.access_key_id : "error: " + e->message;
    });
    run_until([&] { return !key.empty(); });
    return key;
  };
  EXPECT_EQ(key_now(), "AKENV");
  env_.erase("AWS_ACCESS_KEY_ID");
  env_.erase("AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(key_now(), "AKFILES");
  env_.erase("AWS_SHARED_CREDENTIALS_FILE");
  EXPECT_EQ(sts.count() + container.count() + imds.count(), 0u);
  EXPECT_EQ(key_now(), "AKSTS");
  EXPECT_EQ(container.count() + imds.count(), 0u);
  env_.erase("AWS_WEB_IDENTITY_TOKEN_FILE");
  EXPECT_EQ(key_now(), "AKCONTAINER");
  EXPECT_EQ(imds.count(), 0u);
  env_.erase("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  EXPECT_EQ(key_now(), "AKIMDS");
  env_["AWS_EC2_METADATA_DISABLED"] = "true";
  const auto before = imds.count();
  EXPECT_NE(key_now().find("no credentials found"), std::string::npos);
  EXPECT_EQ(imds.count(), before);
}

// Failures name the source (variable, endpoint) and never the token or a secret; the client's
// call fails with the provider's error.
TEST_F(CredentialSources, FailuresNameTheSourceNotTheSecret) {
  const std::string web_token = "eyJhbGciOiJSUzI1NiJ9.secret-web-identity-token";
  TestHttpServer sts([&](const ServedRequest&) {
    return ServedAnswer{403,
                        "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                        "<Message>Not authorized to perform sts:AssumeRoleWithWebIdentity with "
                        "token " +
                            web_token +
                            "</Message></Error><RequestId>1</RequestId></ErrorResponse>",
                        {{"Content-Type", "text/xml"}}};
  });
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = write("token", web_token);
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/denied";
  env_["AWS_ENDPOINT_URL_STS"] = sts.url();
  {
    auto sqs = client(aws::default_credentials_provider(io_.get_executor(), env()));
    auto r = await_result<aws::SqsCallResult>(io_, [&](std::function<void(aws::SqsCallResult)> d) {
      sqs.call("ListQueues", "{}", std::move(d));
    });
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->error);
    EXPECT_EQ(r->error->kind, aws::FailureKind::kClient) << r->error->message;
    EXPECT_EQ(r->error->code, "AccessDenied");
    for (const std::string& said :
         {std::string("SQS: aws: web identity"),
          std::string("arn:aws:iam::123456789012:role/denied"), "AWS_ENDPOINT_URL_STS " + sts.url(),
          std::string("AccessDenied (HTTP 403)")}) {
      EXPECT_NE(r->error->message.find(said), std::string::npos) << r->error->message;
    }
    EXPECT_EQ(r->error->message.find("secret-web-identity-token"), std::string::npos)
        << r->error->message;
  }

  // A container endpoint failing (5xx): retryable, named.
  env_.erase("AWS_WEB_IDENTITY_TOKEN_FILE");
  TestHttpServer failing([](const ServedRequest&) { return ServedAnswer{503, ""}; });
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = failing.url() + "/creds";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "Bearer secret-container-token";
  {
    auto provider = aws::default_credentials_provider(io_.get_executor(), env());
    std::optional<aws::ServiceError> error;
    provider->get([&](const aws::ResolvedCredentials*, const aws::ServiceError* e) {
      if (e != nullptr) error = *e;
    });
    ASSERT_TRUE(run_until([&] { return error.has_value(); }));
    EXPECT_EQ(error->kind, aws::FailureKind::kRetryable) << error->message;
    EXPECT_NE(error->message.find("container endpoint AWS_CONTAINER_CREDENTIALS_FULL_URI " +
                                  failing.url() + "/creds answered HTTP503 (HTTP 503)"),
              std::string::npos)
        << error->message;
    EXPECT_EQ(error->message.find("secret-container-token"), std::string::npos);
  }

  // Nothing anywhere, and nothing answering at the metadata address: the whole list.
  env_.erase("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  boost::asio::ip::tcp::acceptor probe(io_, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto closed = probe.local_endpoint().port();
  probe.close();
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:" + std::to_string(closed);
  {
    auto provider = aws::default_credentials_provider(io_.get_executor(), env());
    std::optional<aws::ServiceError> error;
    provider->get([&](const aws::ResolvedCredentials*, const aws::ServiceError* e) {
      if (e != nullptr) error = *e;
    });
    ASSERT_TRUE(run_until([&] { return error.has_value(); }));
    EXPECT_EQ(error->kind, aws::FailureKind::kClient);
    EXPECT_EQ(error->code, "NoCredentials");
    EXPECT_NE(error->message.find("aws: no credentials found (environment: "), std::string::npos)
        << error->message;
    EXPECT_NE(error->message.find("instance metadata (IMDSv2) at AWS_EC2_METADATA_SERVICE_ENDPOINT "
                                  "http://127.0.0.1:" +
                                  std::to_string(closed)),
              std::string::npos)
        << error->message;
  }
}

}  // namespace
