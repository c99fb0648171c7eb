// The credentials providers without a network: the refreshing cache's rules (one fetch for every
// waiting request, in order; a background refresh within `prefetch` while the old credentials
// are used; waiting within `stale`; failures), the HTTP sources' settings from the environment
// and their answers read, and the chain's first two sources and its "nothing found" message.
#include "outbox/aws/credentials_provider.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "aws/credential_sources.hpp"

namespace outbox::aws {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;
using FetchResult = std::variant<ResolvedCredentials, ServiceError>;

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ResolvedCredentials temporary(const std::string& key, Clock::duration lasts) {
  return {{key, "secret-" + key, "token-" + key}, "test source", Clock::now() + lasts};
}

// A fetch the test answers by hand: how often it was called, and the pending callbacks.
struct ManualFetch {
  std::vector<std::function<void(FetchResult)>> pending;
  int calls = 0;
  CredentialsFetch fetch() {
    return [this](std::function<void(FetchResult)> done) {
      ++calls;
      pending.push_back(std::move(done));
    };
  }
  void answer(FetchResult result) {
    ASSERT_FALSE(pending.empty());
    auto done = std::move(pending.front());
    pending.erase(pending.begin());
    done(std::move(result));
  }
};

struct Got {
  std::vector<std::string> keys;  // key id, or "error:CODE"
  void operator()(const ResolvedCredentials* c, const ServiceError* e) {
    keys.push_back(c != nullptr ? c->credentials.access_key_id : "error:" + e->code);
  }
};

class Refreshing : public testing::Test {
 protected:
  boost::asio::io_context io_;
  ManualFetch source_;
  Got got_;
  CredentialsProvider::Handler record() {
    return [this](const ResolvedCredentials* c, const ServiceError* e) { got_(c, e); };
  }
};

TEST_F(Refreshing, RequestsWaitForTheFirstFetchInOrderAndShareIt) {
  auto provider = refreshing_credentials(io_.get_executor(), source_.fetch());
  EXPECT_EQ(provider->source(), "the default credentials chain");
  provider->get(record());
  provider->get(record());
  EXPECT_TRUE(got_.keys.empty());
  EXPECT_EQ(source_.calls, 1);
  source_.answer(temporary("K1", 1h));
  EXPECT_EQ(got_.keys, (std::vector<std::string>{"K1", "K1"}));
  provider->get(record());  // cached: answered inside the call
  EXPECT_EQ(got_.keys.size(), 3u);
  EXPECT_EQ(source_.calls, 1);
  EXPECT_EQ(provider->source(), "test source");
}

TEST_F(Refreshing, WithinPrefetchTheOldOnesAreUsedWhileOneRefreshRuns) {
  auto provider = refreshing_credentials(io_.get_executor(), source_.fetch(), {300s, 60s, 0s});
  provider->get(record());
  source_.answer(temporary("K1", 200s));  // within 5 minutes of its end, not within 1
  provider->get(record());
  provider->get(record());
  EXPECT_EQ(got_.keys, (std::vector<std::string>{"K1", "K1", "K1"}));
  EXPECT_EQ(source_.calls, 2);  // one background refresh, not one per request
  source_.answer(temporary("K2", 1h));
  provider->get(record());
  EXPECT_EQ(got_.keys.back(), "K2");
  EXPECT_EQ(source_.calls, 2);
}

TEST_F(Refreshing, WithinStaleRequestsWaitForFreshOnes) {
  auto provider = refreshing_credentials(io_.get_executor(), source_.fetch(), {300s, 60s, 0s});
  provider->get(record());
  source_.answer(temporary("K1", 30s));  // used by the request that waited for it
  EXPECT_EQ(got_.keys, std::vector<std::string>{"K1"});
  provider->get(record());  // within a minute of the end: waits
  EXPECT_EQ(got_.keys.size(), 1u);
  EXPECT_EQ(source_.calls, 2);
  source_.answer(temporary("K2", 1h));
  EXPECT_EQ(got_.keys, (std::vector<std::string>{"K1", "K2"}));
}

TEST_F(Refreshing, AFailedRefreshKeepsTheOldOnesAndIsTriedAgainLater) {
  auto provider = refreshing_credentials(io_.get_executor(), source_.fetch(), {300s, 60s, 3600s});
  provider->get(record());
  // Outside `prefetch` when they come (a refresh may start at once), inside half a second later.
  const auto k1 = temporary("K1", 300s + 500ms);
  source_.answer(k1);
  while (Clock::now() + 300s < *k1.expiration) std::this_thread::sleep_for(10ms);
  provider->get(record());  // starts a background refresh
  ServiceError down;
  down.code = "CredentialsUnavailable";
  source_.answer(down);
  provider->get(record());  // the old ones, and no new refresh before retry_interval
  EXPECT_EQ(got_.keys, (std::vector<std::string>{"K1", "K1", "K1"}));
  EXPECT_EQ(source_.calls, 2);
}

TEST_F(Refreshing, WithoutCredentialsAFailureGoesToEveryWaitingRequest) {
  auto provider = refreshing_credentials(io_.get_executor(), source_.fetch());
  provider->get(record());
  provider->get(record());
  ServiceError refused;
  refused.kind = FailureKind::kClient;
  refused.code = "CredentialsRefused";
  source_.answer(refused);
  EXPECT_EQ(got_.keys,
            (std::vector<std::string>{"error:CredentialsRefused", "error:CredentialsRefused"}));
  provider->get(record());  // asks again
  EXPECT_EQ(source_.calls, 2);
  source_.answer(temporary("K1", -1s));  // already expired
  EXPECT_EQ(got_.keys.back(), "error:ExpiredCredentials");
}

TEST(FixedCredentials, AnswerAtOnce) {
  auto provider = fixed_credentials({{"K", "S", ""}, "environment", {}});
  Got got;
  provider->get([&](const ResolvedCredentials* c, const ServiceError* e) { got(c, e); });
  EXPECT_EQ(got.keys, std::vector<std::string>{"K"});
  EXPECT_EQ(provider->source(), "environment");
}

TEST(Iso8601, DatesAsTheSourcesWriteThem) {
  const auto at = parse_iso8601("2026-12-04T06:00:00Z");
  ASSERT_TRUE(at);
  EXPECT_EQ(Clock::to_time_t(*at), 1796364000);
  EXPECT_EQ(parse_iso8601("2026-12-04T06:00:00.123Z"), at);
  EXPECT_EQ(parse_iso8601("2026-12-04T07:30:00+01:30"), at);
  EXPECT_FALSE(parse_iso8601("2026-12-04 06:00:00"));
  EXPECT_FALSE(parse_iso8601("2026-13-04T06:00:00Z"));
  EXPECT_FALSE(parse_iso8601("yesterday"));
}

TEST(SourceAnswers, StsXmlAndTheEndpointsJson) {
  const std::string xml =
      "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
      "<AssumeRoleWithWebIdentityResult><Credentials><SessionToken>tok&amp;en</SessionToken>"
      "<SecretAccessKey>sec</SecretAccessKey><Expiration>2026-12-04T06:00:00Z</Expiration>"
      "<AccessKeyId>ASIAEXAMPLE</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
      "</AssumeRoleWithWebIdentityResponse>";
  auto sts = parse_sts_credentials(xml, "web identity");
  ASSERT_TRUE(std::holds_alternative<ResolvedCredentials>(sts)) << std::get<std::string>(sts);
  const auto& c = std::get<ResolvedCredentials>(sts);
  EXPECT_EQ(c.credentials.access_key_id, "ASIAEXAMPLE");
  EXPECT_EQ(c.credentials.secret_access_key, "sec");
  EXPECT_EQ(c.credentials.session_token, "tok&en");
  EXPECT_EQ(c.expiration, parse_iso8601("2026-12-04T06:00:00Z"));
  EXPECT_EQ(std::get<std::string>(parse_sts_credentials("<Error/>", "x")),
            "the answer has no <Credentials>");

  const std::string json =
      "{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"ASIA2\","
      "\"SecretAccessKey\":\"s2\",\"Token\":\"t2\",\"Expiration\":\"2026-12-04T06:00:00Z\"}";
  auto imds = parse_json_credentials(json, "imds");
  ASSERT_TRUE(std::holds_alternative<ResolvedCredentials>(imds));
  EXPECT_EQ(std::get<ResolvedCredentials>(imds).credentials.session_token, "t2");
  EXPECT_EQ(std::get<std::string>(parse_json_credentials("{\"Code\":\"Failed\"}", "imds")),
            "the answer's Code is \"Failed\", not Success");
  // What is wrong, never a value: here the secret of a half answer.
  const auto half = parse_json_credentials("{\"SecretAccessKey\":\"hidden\"}", "container");
  EXPECT_EQ(std::get<std::string>(half).find("hidden"), std::string::npos);
  EXPECT_EQ(std::get<std::string>(parse_json_credentials(
                "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}", "c")),
            "the answer's Expiration \"soon\" is no date");
}

TEST(SourceSettings, WebIdentityNeedsARoleAndPicksItsStsEndpoint) {
  EXPECT_FALSE(web_identity_settings(env_of({}), "eu-west-1"));
  EXPECT_THROW(web_identity_settings(env_of({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}}), "eu-west-1"),
               CredentialsError);
  std::map<std::string, std::string> vars = {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"},
                                             {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"}};
  auto regional = web_identity_settings(env_of(vars), "eu-west-1");
  ASSERT_TRUE(regional);
  EXPECT_EQ(regional->sts.url, "https://sts.eu-west-1.amazonaws.com");
  EXPECT_TRUE(regional->session_name.starts_with("outbox-relay-"));
  EXPECT_EQ(web_identity_settings(env_of(vars), std::nullopt)->sts.url,
            "https://sts.amazonaws.com");
  vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1";
  EXPECT_EQ(web_identity_settings(env_of(vars), "eu-west-1")->sts.url, "http://127.0.0.1:1");
  vars["AWS_ENDPOINT_URL_STS"] = "http://127.0.0.1:2";
  vars["AWS_ROLE_SESSION_NAME"] = "s 1";
  const auto chosen = web_identity_settings(env_of(vars), "eu-west-1");
  EXPECT_EQ(chosen->sts.url, "http://127.0.0.1:2");
  EXPECT_EQ(chosen->sts.endpoint.port, 2);
  EXPECT_EQ(sts_web_identity_body(*chosen, "a.b+c"),
            "Action=AssumeRoleWithWebIdentity&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr"
            "&RoleSessionName=s%201&Version=2011-06-15&WebIdentityToken=a.b%2Bc");
}

TEST(SourceSettings, ContainerUrisAsTheSdksAllowThem) {
  EXPECT_FALSE(container_settings(env_of({})));
  auto relative = container_settings(
      env_of({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc?x=1"},
              {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/ignored"}}));
  ASSERT_TRUE(relative);
  EXPECT_EQ(relative->where.endpoint.host, "169.254.170.2");
  EXPECT_EQ(relative->where.target, "/v2/credentials/abc?x=1");
  EXPECT_EQ(relative->variable, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  for (const char* allowed : {"http://127.0.0.1:8080/creds", "http://localhost/creds",
                              "http://169.254.170.23/v1/c", "https://creds.example.com/x"}) {
    EXPECT_NO_THROW(container_settings(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", allowed}})))
        << allowed;
  }
  EXPECT_THROW(
      container_settings(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.1/creds"}})),
      CredentialsError);
  const auto tokens =
      container_settings(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"},
                                 {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok"},
                                 {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/f"}}));
  EXPECT_EQ(tokens->token, "tok");
  EXPECT_EQ(tokens->token_file, "/f");
  EXPECT_EQ(tokens->where.target, "/c");
}

TEST(SourceSettings, InstanceMetadataEndpointAndSwitch) {
  EXPECT_EQ(imds_settings(env_of({}))->endpoint.url(), "http://169.254.169.254");
  EXPECT_FALSE(imds_settings(env_of({{"AWS_EC2_METADATA_DISABLED", "TRUE"}})));
  EXPECT_TRUE(imds_settings(env_of({{"AWS_EC2_METADATA_DISABLED", "false"}})));
  EXPECT_EQ(imds_settings(env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:7/"}}))
                ->endpoint.port,
            7);
  EXPECT_THROW(imds_settings(env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv6"}})),
               CredentialsError);
}

// The chain's discovery runs on a thread of its own: run the io_context until the answer came.
struct ChainRun {
  boost::asio::io_context io;
  std::optional<std::string> key;
  std::optional<ServiceError> error;
  std::string source;
  void run(const std::map<std::string, std::string>& vars) {
    auto provider = default_credentials_provider(io.get_executor(), env_of(vars));
    provider->get([this](const ResolvedCredentials* c, const ServiceError* e) {
      if (c != nullptr) {
        key = c->credentials.access_key_id;
        source = c->source;
      } else {
        error = *e;
      }
    });
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!key && !error && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_one_for(10ms);
    }
  }
};

TEST(DefaultChain, TheEnvironmentThenTheFilesWithoutNetwork) {
  ChainRun env;
  env.run({{"AWS_ACCESS_KEY_ID", "AKENV"},
           {"AWS_SECRET_ACCESS_KEY", "s"},
           {"AWS_WEB_IDENTITY_TOKEN_FILE", "/nowhere"},
           {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/x"}});
  EXPECT_EQ(env.key, "AKENV");
  EXPECT_EQ(env.source, "environment");

  const auto dir =
      std::filesystem::temp_directory_path() / ("outbox-chain-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "credentials") << "[default]\naws_access_key_id = AKFILE\n"
                                        "aws_secret_access_key = s\n";
  ChainRun files;
  files.run({{"AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").string()},
             {"AWS_CONFIG_FILE", (dir / "config").string()},
             {"AWS_WEB_IDENTITY_TOKEN_FILE", "/nowhere"}});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(files.key, "AKFILE");

  ChainRun refused;
  refused.run({{"AWS_ACCESS_KEY_ID", "AKENV"}});
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->kind, FailureKind::kClient);
  EXPECT_NE(refused.error->message.find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
}

TEST(DefaultChain, NothingAnywhereSaysWhereItLooked) {
  ChainRun none;
  none.run({{"HOME", "/nonexistent-home"}, {"AWS_EC2_METADATA_DISABLED", "true"}});
  ASSERT_TRUE(none.error);
  EXPECT_EQ(none.error->kind, FailureKind::kClient);
  EXPECT_EQ(none.error->code, "NoCredentials");
  for (const char* said :
       {"environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY unset",
        "shared files:", "web identity: AWS_WEB_IDENTITY_TOKEN_FILE unset",
        "container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and AWS_CONTAINER_CREDENTIALS_FULL_URI "
        "unset",
        "instance metadata: AWS_EC2_METADATA_DISABLED is true"}) {
    EXPECT_NE(none.error->message.find(said), std::string::npos) << none.error->message;
  }
  ChainRun broken;
  broken.run({{"HOME", "/nonexistent-home"}, {"AWS_WEB_IDENTITY_TOKEN_FILE", "/nowhere"}});
  ASSERT_TRUE(broken.error);
  EXPECT_NE(broken.error->message.find("AWS_ROLE_ARN"), std::string::npos);
}

}  // namespace
}  // namespace outbox::aws
