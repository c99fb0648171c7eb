// SigV4 against AWS's published test suite (sigv4_test_suite.hpp) and the worked example of AWS's
// documentation, and the requests it refuses to sign.
#include "outbox/aws/sigv4.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <stdexcept>

#include "sigv4_test_suite.hpp"

namespace outbox::aws {
namespace test {
// A case reads as its name in the test list.
void PrintTo(const SuiteCase& c, std::ostream* os) { *os << c.name; }
}  // namespace test

namespace {

using namespace std::chrono;

const Credentials kExampleKeys{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const system_clock::time_point kSuiteTime = sys_days{2015y / 8 / 30} + 12h + 36min;

SigningOptions suite_options() { return {"us-east-1", "service", kSuiteTime}; }

const HttpHeader* find_header(const SignedRequest& signed_request, std::string_view name) {
  const auto it = std::find_if(signed_request.headers.begin(), signed_request.headers.end(),
                               [&](const HttpHeader& h) { return h.name == name; });
  return it == signed_request.headers.end() ? nullptr : &*it;
}

class Suite : public testing::TestWithParam<test::SuiteCase> {};

TEST_P(Suite, CanonicalRequestStringToSignAndSignature) {
  const test::SuiteCase& c = GetParam();
  SigningRequest request{c.method, c.path, c.query, c.headers, payload_hash(c.body)};
  Credentials credentials = kExampleKeys;
  credentials.session_token = c.session_token;
  SigningOptions options = suite_options();
  options.add_content_sha256 = c.add_content_sha256;
  options.sign_session_token = c.sign_session_token;

  const SignedRequest signed_request = sign(request, credentials, options);
  EXPECT_EQ(signed_request.canonical_request, c.canonical_request);
  EXPECT_EQ(signed_request.string_to_sign, c.string_to_sign);
  EXPECT_EQ(signed_request.signature, c.signature);
  EXPECT_EQ(signed_request.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=" +
                c.signed_headers + ", Signature=" + c.signature);
  EXPECT_EQ(signed_request.amz_date, "20150830T123600Z");

  // What the suite's signed request carries besides the request's own headers.
  const HttpHeader* date = find_header(signed_request, "X-Amz-Date");
  ASSERT_NE(date, nullptr);
  EXPECT_EQ(date->value, "20150830T123600Z");
  const HttpHeader* token = find_header(signed_request, "X-Amz-Security-Token");
  if (c.session_token.empty()) {
    EXPECT_EQ(token, nullptr);
  } else {
    ASSERT_NE(token, nullptr);
    EXPECT_EQ(token->value, c.session_token);
  }
  const HttpHeader* content = find_header(signed_request, "x-amz-content-sha256");
  EXPECT_EQ(content != nullptr, c.add_content_sha256);
  const HttpHeader* authorization = find_header(signed_request, "Authorization");
  ASSERT_NE(authorization, nullptr);
  EXPECT_EQ(authorization->value, signed_request.authorization);
  EXPECT_EQ(&signed_request.headers.back(), authorization) << "Authorization is not last";
}

INSTANTIATE_TEST_SUITE_P(AwsSigV4TestSuite, Suite, testing::ValuesIn(test::suite_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// The worked example of AWS's SigV4 documentation (an IAM ListUsers GET: AWS General Reference,
// "Task 1-3" at docs.aws.amazon.com/general/latest/gr/sigv4-create-canonical-request.html and
// sigv4-calculate-signature.html, now the IAM User Guide's "Create a signed AWS API request"): the
// canonical request's hash f536975d..., the signing key c4afb1cc... and the signature 5d672d79...
// as the page gives them (checked against several independent quotes of it).
TEST(DocumentationExample, IamListUsers) {
  SigningRequest request{"GET",
                         "/",
                         {{"Version", "2010-05-08"}, {"Action", "ListUsers"}},
                         {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                          {"Host", "iam.amazonaws.com"}},
                         ""};
  const SignedRequest signed_request =
      sign(request, kExampleKeys, {"us-east-1", "iam", kSuiteTime});
  EXPECT_EQ(signed_request.canonical_request,
            "GET\n"
            "/\n"
            "Action=ListUsers&Version=2010-05-08\n"
            "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
            "host:iam.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n"
            "\n"
            "content-type;host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(signed_request.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20150830T123600Z\n"
            "20150830/us-east-1/iam/aws4_request\n"
            "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
  EXPECT_EQ(to_hex(signing_key(kExampleKeys.secret_access_key, "20150830", "us-east-1", "iam")),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
  EXPECT_EQ(signed_request.signature,
            "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
  EXPECT_EQ(signed_request.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
            "SignedHeaders=content-type;host;x-amz-date, "
            "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
}

TEST(Encoding, UnreservedKeptEverythingElsePercentEncodedInUpperCase) {
  EXPECT_EQ(uri_encode("AZaz09-._~", false), "AZaz09-._~");
  EXPECT_EQ(uri_encode("a b+c/d=e&f%g*", false), "a%20b%2Bc%2Fd%3De%26f%25g%2A");
  EXPECT_EQ(uri_encode("a/b c", true), "a/b%20c");
  EXPECT_EQ(uri_encode("\xE1\x88\xB4", false), "%E1%88%B4");
}

TEST(Encoding, ThePathIsEncodedOnceMoreAndNormalized) {
  // A path already encoded for the wire is encoded again: SQS and EventBridge, like every
  // service but S3, sign the double encoding.
  EXPECT_EQ(canonical_uri("/a%20b/c"), "/a%2520b/c");
  EXPECT_EQ(canonical_uri("/123456789012/orders-queue"), "/123456789012/orders-queue");
  EXPECT_EQ(canonical_uri("/"), "/");
  EXPECT_EQ(canonical_uri("/a/b/.."), "/a/");
  EXPECT_EQ(canonical_uri("/a/./b//c/"), "/a/b/c/");
  EXPECT_EQ(canonical_uri("/../a"), "/a");
}

TEST(Encoding, QueryParametersWithTheSameNameSortByValue) {
  const SignedRequest signed_request =
      sign({"GET", "/", {{"b", "2"}, {"a", "z"}, {"a", "y"}, {"c", ""}}, {{"Host", "h"}}, ""},
           kExampleKeys, suite_options());
  EXPECT_NE(signed_request.canonical_request.find("\na=y&a=z&b=2&c=\n"), std::string::npos)
      << signed_request.canonical_request;
}

TEST(AmzDate, WholeSecondsInUtc) {
  EXPECT_EQ(amz_date(kSuiteTime), "20150830T123600Z");
  EXPECT_EQ(amz_date(sys_days{2026y / 1 / 2} + 3h + 4min + 5s + 678ms), "20260102T030405Z");
  EXPECT_EQ(amz_date(sys_days{1999y / 12 / 31} + 23h + 59min + 59s), "19991231T235959Z");
}

// A request sign() cannot sign is refused with what is wrong, never with the secret.
TEST(Refusal, WhatIsWrongIsNamedAndTheSecretNever) {
  const auto refusal = [](SigningRequest request, Credentials credentials,
                          SigningOptions options) -> std::string {
    try {
      sign(request, credentials, options);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const SigningRequest ok{"POST", "/", {}, {{"Host", "sqs.eu-west-1.amazonaws.com"}}, ""};
  EXPECT_EQ(refusal(ok, kExampleKeys, suite_options()), "");

  SigningRequest no_host = ok;
  no_host.headers = {{"Content-Type", "application/x-amz-json-1.0"}};
  EXPECT_NE(refusal(no_host, kExampleKeys, suite_options()).find("no Host header"),
            std::string::npos);

  SigningRequest with_date = ok;
  with_date.headers.push_back({"x-amz-date", "20150830T123600Z"});
  EXPECT_NE(refusal(with_date, kExampleKeys, suite_options()).find("already has a X-Amz-Date"),
            std::string::npos);

  SigningRequest with_authorization = ok;
  with_authorization.headers.push_back({"Authorization", "x"});
  EXPECT_NE(refusal(with_authorization, kExampleKeys, suite_options()).find("Authorization"),
            std::string::npos);

  SigningRequest with_query_in_path = ok;
  with_query_in_path.path = "/?Action=SendMessage";
  EXPECT_NE(refusal(with_query_in_path, kExampleKeys, suite_options()).find("'?'"),
            std::string::npos);

  SigningRequest relative = ok;
  relative.path = "queue";
  EXPECT_NE(refusal(relative, kExampleKeys, suite_options()).find("start with '/'"),
            std::string::npos);

  SigningRequest bad_header = ok;
  bad_header.headers.push_back({"Bad Name", "x"});
  EXPECT_NE(refusal(bad_header, kExampleKeys, suite_options()).find("header name"),
            std::string::npos);

  SigningRequest bad_hash = ok;
  bad_hash.payload_hash = "E3B0";
  EXPECT_NE(refusal(bad_hash, kExampleKeys, suite_options()).find("payload hash"),
            std::string::npos);

  SigningOptions no_region = suite_options();
  no_region.region = "";
  EXPECT_NE(refusal(ok, kExampleKeys, no_region).find("region"), std::string::npos);

  SigningOptions slash_service = suite_options();
  slash_service.service = "sqs/x";
  EXPECT_NE(refusal(ok, kExampleKeys, slash_service).find("service"), std::string::npos);

  Credentials no_secret = kExampleKeys;
  no_secret.secret_access_key = "";
  EXPECT_NE(refusal(ok, no_secret, suite_options()).find("secret access key is empty"),
            std::string::npos);

  // A bad access key id next to a good secret: the message names the field, not the secret.
  Credentials bad_id = kExampleKeys;
  bad_id.access_key_id = "AKID/EXAMPLE";
  const std::string message = refusal(ok, bad_id, suite_options());
  EXPECT_NE(message.find("access key id"), std::string::npos);
  EXPECT_EQ(message.find(kExampleKeys.secret_access_key), std::string::npos);
}

TEST(Refusal, TheSecretAppearsInNoResult) {
  Credentials credentials = kExampleKeys;
  credentials.session_token = "token";
  const SignedRequest signed_request =
      sign({"POST", "/", {}, {{"Host", "events.us-east-1.amazonaws.com"}}, payload_hash("{}")},
           credentials, {"us-east-1", "events", kSuiteTime, true});
  const std::string& secret = credentials.secret_access_key;
  EXPECT_EQ(signed_request.canonical_request.find(secret), std::string::npos);
  EXPECT_EQ(signed_request.string_to_sign.find(secret), std::string::npos);
  EXPECT_EQ(signed_request.authorization.find(secret), std::string::npos);
  for (const auto& header : signed_request.headers) {
    EXPECT_EQ(header.value.find(secret), std::string::npos) << header.name;
  }
}

}  // namespace
}  // namespace outbox::aws
