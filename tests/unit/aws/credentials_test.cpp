// The credential and region chain without network: the environment, then the shared files'
// profile; each result names its source, and no error or log form holds a secret.
#include "outbox/aws/credentials.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace outbox::aws {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKeyId = "AKIDEXAMPLE";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr const char* kToken = "FwoGZXIvYXdzEXAMPLETOKEN";

class Chain : public testing::Test {
 protected:
  void SetUp() override {
    home_ =
        fs::temp_directory_path() / ("outbox-aws-" + std::to_string(::getpid()) + "-" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
    fs::create_directories(home_ / ".aws");
    env_["HOME"] = home_.string();
  }
  void TearDown() override { fs::remove_all(home_); }

  EnvLookup env() const {
    return [vars = env_](std::string_view name) -> std::optional<std::string> {
      const auto it = vars.find(std::string(name));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
  std::string write(const std::string& relative, const std::string& text) {
    const fs::path path = home_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }
  std::string refusal() {
    try {
      resolve_credentials(env());
    } catch (const CredentialsError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no refusal";
    return "";
  }
  // A message fit for a log: no secret, no token.
  static void expect_no_secret(const std::string& text) {
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
    EXPECT_EQ(text.find(kToken), std::string::npos) << text;
  }

  fs::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(Chain, TheEnvironmentComesFirst) {
  write(".aws/credentials", "[default]\naws_access_key_id = OTHER\naws_secret_access_key = x\n");
  env_["AWS_ACCESS_KEY_ID"] = kKeyId;
  env_["AWS_SECRET_ACCESS_KEY"] = std::string(kSecret) + "\n";  // read from a file: trimmed
  env_["AWS_SESSION_TOKEN"] = kToken;
  const ResolvedCredentials resolved = resolve_credentials(env());
  EXPECT_EQ(resolved.credentials.access_key_id, kKeyId);
  EXPECT_EQ(resolved.credentials.secret_access_key, kSecret);
  EXPECT_EQ(resolved.credentials.session_token, kToken);
  EXPECT_EQ(resolved.source, "environment");
  EXPECT_FALSE(resolved.expiration);
}

TEST_F(Chain, HalfAPairInTheEnvironmentIsRefused) {
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  const std::string message = refusal();
  EXPECT_NE(message.find("AWS_SECRET_ACCESS_KEY but no AWS_ACCESS_KEY_ID"), std::string::npos)
      << message;
  expect_no_secret(message);
  env_.erase("AWS_SECRET_ACCESS_KEY");
  env_["AWS_ACCESS_KEY_ID"] = kKeyId;
  EXPECT_NE(refusal().find("AWS_ACCESS_KEY_ID but no AWS_SECRET_ACCESS_KEY"), std::string::npos);
}

TEST_F(Chain, EmptyVariablesCountAsUnset) {
  env_["AWS_ACCESS_KEY_ID"] = "";
  env_["AWS_SECRET_ACCESS_KEY"] = " ";
  env_["AWS_PROFILE"] = "";
  write(".aws/credentials", std::string("[default]\naws_access_key_id = ") + kKeyId +
                                "\naws_secret_access_key = " + kSecret + "\n");
  EXPECT_EQ(resolve_credentials(env()).source, "shared credentials file \"" +
                                                   (home_ / ".aws/credentials").string() +
                                                   "\" (profile \"default\")");
}

TEST_F(Chain, TheDefaultProfileOfTheCredentialsFileUnderHome) {
  write(".aws/credentials", std::string("# keys\n[default]\naws_access_key_id=") + kKeyId +
                                "\naws_secret_access_key =  " + kSecret +
                                "  ; rotated monthly\naws_session_token = " + kToken + "\n");
  const ResolvedCredentials resolved = resolve_credentials(env());
  EXPECT_EQ(resolved.credentials.access_key_id, kKeyId);
  EXPECT_EQ(resolved.credentials.secret_access_key, kSecret);
  EXPECT_EQ(resolved.credentials.session_token, kToken);
  EXPECT_EQ(resolved.source, "shared credentials file \"" + (home_ / ".aws/credentials").string() +
                                 "\" (profile \"default\")");
}

TEST_F(Chain, AwsProfileAndTheFileVariablesChooseWhere) {
  const std::string credentials = write("elsewhere/creds", "[default]\naws_access_key_id = NO\n");
  const std::string config =
      write("elsewhere/conf", std::string("[profile relay]\naws_access_key_id = ") + kKeyId +
                                  "\naws_secret_access_key = " + kSecret + "\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = credentials;
  env_["AWS_CONFIG_FILE"] = config;
  env_["AWS_PROFILE"] = "relay";
  const ResolvedCredentials resolved = resolve_credentials(env());
  EXPECT_EQ(resolved.credentials.access_key_id, kKeyId);
  EXPECT_EQ(resolved.source, "config file \"" + config + "\" (profile \"relay\")");
}

TEST_F(Chain, ATildeInAFileVariableIsHome) {
  write("k", std::string("[default]\naws_access_key_id = ") + kKeyId +
                 "\naws_secret_access_key = " + kSecret + "\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = "~/k";
  EXPECT_EQ(resolve_credentials(env()).source,
            "shared credentials file \"" + (home_ / "k").string() + "\" (profile \"default\")");
}

TEST_F(Chain, TheFilesMergeAndTheCredentialsFileWins) {
  write(".aws/credentials", std::string("[default]\naws_access_key_id = ") + kKeyId + "\n");
  write(".aws/config",
        std::string("[default]\naws_access_key_id = LOSES\naws_secret_access_key = ") + kSecret +
            "\n");
  const ResolvedCredentials resolved = resolve_credentials(env());
  EXPECT_EQ(resolved.credentials.access_key_id, kKeyId);
  EXPECT_EQ(resolved.credentials.secret_access_key, kSecret);
  EXPECT_EQ(resolved.source, "shared credentials file \"" + (home_ / ".aws/credentials").string() +
                                 "\" and config file \"" + (home_ / ".aws/config").string() +
                                 "\" (profile \"default\")");
}

TEST_F(Chain, AProfileWithHalfAPairIsRefused) {
  const std::string path =
      write(".aws/credentials", std::string("[default]\naws_secret_access_key = ") + kSecret);
  const std::string message = refusal();
  EXPECT_EQ(message, "aws: profile \"default\" in the shared credentials file \"" + path +
                         "\" has aws_secret_access_key but no aws_access_key_id");
}

TEST_F(Chain, AProfileThatNeedsASourceNotBuiltYetIsRefused) {
  write(".aws/credentials", std::string("[default]\naws_access_key_id = ") + kKeyId +
                                "\naws_secret_access_key = " + kSecret + "\n");
  const std::string config =
      write(".aws/config", std::string("[default]\ncredential_process = fetch --token ") + kToken +
                               "\n[profile role]\nrole_arn = arn:aws:iam::123:role/r\n"
                               "source_profile = default\n");
  std::string message = refusal();
  EXPECT_EQ(message, "aws: profile \"default\" in the config file \"" + config +
                         "\" sets credential_process (running a credential process), which "
                         "outbox-relay cannot do yet; give the keys in the environment or as "
                         "aws_access_key_id and aws_secret_access_key");
  expect_no_secret(message);
  env_["AWS_PROFILE"] = "role";
  EXPECT_NE(refusal().find("sets role_arn (assuming a role through STS)"), std::string::npos);
}

TEST_F(Chain, AnAwsProfileNoFileHasIsRefused) {
  write(".aws/credentials", std::string("[default]\naws_access_key_id = ") + kKeyId +
                                "\naws_secret_access_key = " + kSecret + "\n");
  env_["AWS_PROFILE"] = "relay";
  EXPECT_EQ(refusal(),
            "aws: AWS_PROFILE names profile \"relay\", which is not in "
            "shared credentials file \"" +
                (home_ / ".aws/credentials").string() + "\" or config file \"" +
                (home_ / ".aws/config").string() + "\" (missing)");
}

TEST_F(Chain, NothingAnywhereListsWhatWasAsked) {
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/var/run/secrets/token";
  EXPECT_EQ(refusal(),
            "aws: no credentials found (environment: AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY unset; shared files: no profile \"default\" in "
            "shared credentials file \"" +
                (home_ / ".aws/credentials").string() + "\" (missing) or config file \"" +
                (home_ / ".aws/config").string() +
                "\" (missing); AWS_WEB_IDENTITY_TOKEN_FILE is set: "
                "default_credentials_provider() goes on to that source)");
  env_.erase("HOME");
  env_.erase("AWS_WEB_IDENTITY_TOKEN_FILE");
  EXPECT_NE(refusal().find("the shared credentials file (HOME and AWS_SHARED_CREDENTIALS_FILE "
                           "unset) or the config file (HOME and AWS_CONFIG_FILE unset)"),
            std::string::npos);
}

TEST_F(Chain, AFileThatCannotBeReadOrParsedIsRefused) {
  fs::create_directories(home_ / ".aws/credentials");
  EXPECT_NE(refusal().find("the shared credentials file \"" +
                           (home_ / ".aws/credentials").string() + "\" is a directory"),
            std::string::npos);
  fs::remove(home_ / ".aws/credentials");
  write(".aws/config", std::string("[default]\naws_secret_access_key ") + kSecret + "\n");
  const std::string message = refusal();
  EXPECT_NE(message.find("line 2: a property without '='"), std::string::npos) << message;
  expect_no_secret(message);
}

TEST_F(Chain, ProvidersAreAskedInOrder) {
  const CredentialsSource nothing{
      "first", [](const EnvLookup&) {
        return std::variant<ResolvedCredentials, std::string>("nothing here");
      }};
  const CredentialsSource something{"second", [](const EnvLookup&) {
                                      return std::variant<ResolvedCredentials, std::string>(
                                          ResolvedCredentials{{"K2", "S2", ""}, "second", {}});
                                    }};
  EXPECT_EQ(resolve_credentials(env(), {nothing, something}).source, "second");
  try {
    resolve_credentials(env(), {nothing, nothing});
    ADD_FAILURE();
  } catch (const CredentialsError& e) {
    EXPECT_STREQ(e.what(), "aws: no credentials found (first: nothing here; first: nothing here)");
  }
}

TEST(ToString, NamesTheKeysTailAndSourceNeverTheSecretOrToken) {
  const ResolvedCredentials resolved{{kKeyId, kSecret, kToken}, "environment", {}};
  const std::string text = to_string(resolved);
  EXPECT_EQ(text, "access key id ...MPLE from environment, with a session token");
  EXPECT_EQ(text.find(kKeyId), std::string::npos);
  EXPECT_EQ(text.find(kSecret), std::string::npos);
  EXPECT_EQ(text.find(kToken), std::string::npos);
  EXPECT_EQ(to_string({{"AKID", kSecret, ""}, "x", {}}),
            "access key id **** from x, no session token");
}

TEST_F(Chain, TheRegionFromTheEnvironmentThenTheProfile) {
  EXPECT_FALSE(resolve_region(env()));
  const std::string config =
      write(".aws/config", "[default]\nregion = us-east-1\n[profile relay]\nregion = eu-west-1\n");
  env_["AWS_PROFILE"] = "relay";
  auto region = resolve_region(env());
  ASSERT_TRUE(region);
  EXPECT_EQ(region->region, "eu-west-1");
  EXPECT_EQ(region->source, "config file \"" + config + "\" (profile \"relay\")");
  env_["AWS_DEFAULT_REGION"] = "ap-south-1";
  EXPECT_EQ(resolve_region(env())->region, "ap-south-1");
  EXPECT_EQ(resolve_region(env())->source, "environment variable AWS_DEFAULT_REGION");
  env_["AWS_REGION"] = "sa-east-1";
  EXPECT_EQ(resolve_region(env())->region, "sa-east-1");
  EXPECT_EQ(resolve_region(env())->source, "environment variable AWS_REGION");
}

}  // namespace
}  // namespace outbox::aws
