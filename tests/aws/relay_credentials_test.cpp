// The relay binary (outbox-relay run --sqs) getting its credentials from each source of the
// default chain (docs/aws.md), end to end: the lane's PostgreSQL, moto's server of
// scripts/aws-up.sh with its authentication on, and a FIFO queue read back once at the end.
// Each test leaves the relay one source only (no key in the environment, no shared files, IMDS
// disabled unless it is the source): the shared credentials file with AWS_PROFILE, the container
// endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI), IMDSv2 (AWS_EC2_METADATA_SERVICE_ENDPOINT) and
// web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN, STS at AWS_ENDPOINT_URL_STS). The
// endpoints are the test's own on 127.0.0.1 (TestHttpServer), handing out temporary credentials
// of a role made in moto's IAM by moto's STS AssumeRole: moto checks their session token. Each
// relay delivers a few events: every event once, each aggregate's in commit order, the slot
// confirmed through them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fault_fixture.hpp"
#include "moto.hpp"
#include "moto_roles.hpp"
#include "outbox_test/test_http_server.hpp"
#include "sqs_fixture.hpp"

namespace outbox_test::fault {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Every variable of the chain the relay reads (src/aws/credential_sources.cpp).
constexpr const char* kChainVariables[] = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_STS",
    "AWS_DEFAULT_REGION",
};

std::vector<Record> as_records(const std::vector<Received>& received) {
  std::vector<Record> out;
  std::int64_t offset = 0;
  for (const Received& m : received) {
    Record r;
    if (auto t = m.attributes.find("topic"); t != m.attributes.end()) r.topic = t->second;
    r.partition = 0;
    r.offset = offset++;
    if (auto k = m.attributes.find("key"); k != m.attributes.end()) r.key = k->second;
    r.value = m.body;
    r.headers = m.attributes;
    out.push_back(std::move(r));
  }
  return out;
}

class SqsRelayCredentials : public FaultTest {
 protected:
  SqsRelayCredentials() { names_.sqs = true; }

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    dir_ = fs::temp_directory_path() / ("outbox-relay-creds-" + suffix_);
    fs::create_directories(dir_);
    // The relay inherits the test's environment: one source at a time. No shared files unless a
    // test writes them (HOME's ~/.aws never read), IMDS off unless it is the source.
    for (const char* name : kChainVariables) ::unsetenv(name);
    ::setenv("HOME", dir_.c_str(), 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "no-credentials").c_str(), 1);
    ::setenv("AWS_CONFIG_FILE", (dir_ / "no-config").c_str(), 1);
    ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    ::setenv("AWS_REGION", moto().region.c_str(), 1);
    aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
    sqs_queue_url_ =
        admin_.create_queue(client, "creds-" + suffix_ + ".fifo", {{"FifoQueue", "true"}});
  }

  void TearDown() override {
    FaultTest::TearDown();
    for (const char* name : kChainVariables) ::unsetenv(name);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  // Temporary credentials of a role of moto's IAM, valid for an hour (no refresh in the test).
  RoleKey role_key() { return moto_role_credentials(admin_.io_); }
  static std::string in_an_hour() { return iso8601(std::chrono::system_clock::now() + 1h); }

  // The relay with the source the test set up: three transactions over two aggregates (six
  // events), every one in the queue once, each aggregate's in commit order, the slot confirmed
  // through the last; then a graceful stop.
  void relay_delivers_with_its_credentials() {
    create_outbox_table();
    RelayProcess& relay = start_relay();
    ASSERT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    for (int t = 0; t < 3; ++t) {
      pg_->exec("BEGIN; " +
                Workload::insert_sql(qualified_table(), aggregatetype_, 2, t * 2 + 1, 2, false) +
                "; COMMIT");
    }
    const Lsn after = pg_->current_wal_lsn();
    const auto rows = committed_seqs();
    ASSERT_EQ(rows.size(), 6u);
    ASSERT_TRUE(expect_confirmed_reaches(after, 30s)) << tail_file(relay.log_path(), 20);
    aws::SqsClient client(admin_.io_.get_executor(), admin_.config());
    const std::vector<Received> got = admin_.receive(client, sqs_queue_url_, rows.size(), 1s, 30s);
    const DeliveryCheck check = check_deliveries(as_records(got), rows);
    EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
    EXPECT_EQ(check.missing, 0u);
    EXPECT_EQ(check.ghosts, 0u);
    EXPECT_EQ(check.duplicates, 0u);
    EXPECT_EQ(got.size(), rows.size());
    expect_graceful_stop(relay);
  }

  SqsAdmin admin_;
  fs::path dir_;
};

// The shared credentials file, its profile named by AWS_PROFILE: the test key under [relay], a
// wrong secret under [default] (the profile read is the named one, else the relay exits 1).
TEST_F(SqsRelayCredentials, SharedCredentialsFileWithAwsProfile) {
  const Moto& m = moto();
  ::setenv("AWS_SHARED_CREDENTIALS_FILE",
           write("credentials", "[default]\naws_access_key_id = " + m.access_key_id +
                                    "\naws_secret_access_key = wrong-secret\n\n[relay]\n"
                                    "aws_access_key_id = " +
                                    m.access_key_id +
                                    "\naws_secret_access_key = " + m.secret_access_key + "\n")
               .c_str(),
           1);
  ::setenv("AWS_PROFILE", "relay", 1);
  relay_delivers_with_its_credentials();
}

// The container endpoint (ECS task roles, EKS Pod Identity) at AWS_CONTAINER_CREDENTIALS_FULL_URI,
// with its authorization token: the relay asks it, and signs with the role's temporary key.
TEST_F(SqsRelayCredentials, ContainerEndpoint) {
  const RoleKey key = role_key();
  const std::string expiration = in_an_hour();
  std::atomic<int> served{0};
  TestHttpServer container([&](const ServedRequest& r) {
    if (r.header("Authorization") != "Bearer pod-token") return ServedAnswer{401, "no"};
    ++served;
    return ServedAnswer{200, json_answer(key, expiration)};
  });
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (container.url() + "/v1/credentials").c_str(), 1);
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer pod-token", 1);
  relay_delivers_with_its_credentials();
  EXPECT_GE(served.load(), 1);
  EXPECT_EQ(container.count(), static_cast<std::size_t>(served.load()));  // none refused
}

// EC2's instance metadata, IMDSv2 (a session token first), at AWS_EC2_METADATA_SERVICE_ENDPOINT.
TEST_F(SqsRelayCredentials, InstanceMetadataImdsV2) {
  const RoleKey key = role_key();
  const std::string expiration = in_an_hour();
  std::atomic<int> served{0};
  TestHttpServer imds([&](const ServedRequest& r) {
    if (r.method == "PUT" && r.target == "/latest/api/token") {
      return ServedAnswer{200, "imds-session-token"};
    }
    if (r.header("X-aws-ec2-metadata-token") != "imds-session-token") return ServedAnswer{401, ""};
    if (r.target == "/latest/meta-data/iam/security-credentials/") {
      return ServedAnswer{200, "outbox-role\n"};
    }
    if (r.target == "/latest/meta-data/iam/security-credentials/outbox-role") {
      ++served;
      return ServedAnswer{200, json_answer(key, expiration)};
    }
    return ServedAnswer{404, ""};
  });
  ::unsetenv("AWS_EC2_METADATA_DISABLED");
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url().c_str(), 1);
  relay_delivers_with_its_credentials();
  EXPECT_GE(served.load(), 1);
}

// Web identity (EKS service accounts): the token file exchanged with STS's
// AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS (the test's STS: moto's, with its
// authentication on, refuses the unsigned call).
TEST_F(SqsRelayCredentials, WebIdentityThroughSts) {
  const RoleKey key = role_key();
  const std::string expiration = in_an_hour();
  std::atomic<int> served{0};
  TestHttpServer sts([&](const ServedRequest& r) {
    if (r.body.find("Action=AssumeRoleWithWebIdentity") == std::string::npos ||
        r.body.find("WebIdentityToken=service-account-token") == std::string::npos) {
      return ServedAnswer{400, "unexpected"};
    }
    ++served;
    return ServedAnswer{200, sts_answer(key, expiration), {{"Content-Type", "text/xml"}}};
  });
  ::setenv("AWS_WEB_IDENTITY_TOKEN_FILE", write("token", "service-account-token\n").c_str(), 1);
  ::setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/outbox-relay", 1);
  ::setenv("AWS_ENDPOINT_URL_STS", sts.url().c_str(), 1);
  relay_delivers_with_its_credentials();
  EXPECT_GE(served.load(), 1);
  EXPECT_EQ(sts.count(), static_cast<std::size_t>(served.load()));
}

}  // namespace
}  // namespace outbox_test::fault
