// Temporary credentials made by moto's IAM and STS (AssumeRole of a role allowed SQS) for the
// credentials tests, and the answers an endpoint of the chain gives with them: STS's
// AssumeRoleWithWebIdentity (XML) and the container endpoint's and IMDS's JSON. moto checks the
// session token of these credentials, and refuses them once the role's policy is gone.
// Shared by credential_sources_test.cpp (the chain alone) and relay_credentials_test.cpp (the
// relay binary).
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "outbox/aws/http_client.hpp"
#include "outbox/aws/sigv4.hpp"

namespace outbox_test {

struct RoleKey {
  std::string id;
  std::string secret;
  std::string token;
  std::string role;  // the role of moto's IAM they belong to
};

inline std::string iso8601(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

inline std::string unique_role_name(std::string_view prefix) {
  return std::string(prefix) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// A query-protocol call to moto's IAM or STS, signed with the test key, run on `io`; the answer's
// XML. Throws when it fails.
inline std::string moto_query(boost::asio::io_context& io, const std::string& service,
                              std::map<std::string, std::string> params) {
  namespace aws = outbox::aws;
  params["Version"] = service == "sts" ? "2011-06-15" : "2010-05-08";
  std::string body;
  for (const auto& [k, v] : params) {
    body += (body.empty() ? "" : "&") + aws::uri_encode(k, false) + "=" + aws::uri_encode(v, false);
  }
  aws::HttpClient http(io.get_executor(), aws::parse_endpoint(moto().endpoint), {});
  aws::SigningRequest signing;
  signing.method = "POST";
  signing.headers = {{"Host", http.endpoint().host_header},
                     {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  signing.payload_hash = aws::payload_hash(body);
  aws::SigningOptions options;
  options.region = moto().region;
  options.service = service;
  options.time = std::chrono::system_clock::now();
  const auto signed_request =
      aws::sign(signing, {moto().access_key_id, moto().secret_access_key, ""}, options);
  aws::HttpRequest request;
  request.headers = signing.headers;
  for (const auto& h : signed_request.headers) request.headers.push_back(h);
  request.body = body;
  auto response =
      await_result<aws::HttpResponse>(io, [&](std::function<void(aws::HttpResponse)> done) {
        http.async_request(request, std::move(done));
      });
  if (!response || !response->error.empty() || response->status != 200) {
    throw std::runtime_error(service + " " + params["Action"] + ": " +
                             (response ? response->error + response->body : "no answer"));
  }
  return response->body;
}

// Temporary credentials of a new role of moto's IAM allowed SQS, from moto's STS AssumeRole.
inline RoleKey moto_role_credentials(boost::asio::io_context& io) {
  namespace aws = outbox::aws;
  const std::string role = unique_role_name("creds-role");
  const std::string arn = aws::xml_element(
      moto_query(
          io, "iam",
          {{"Action", "CreateRole"},
           {"RoleName", role},
           {"AssumeRolePolicyDocument",
            R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]})"}}),
      "Arn");
  moto_query(
      io, "iam",
      {{"Action", "PutRolePolicy"},
       {"RoleName", role},
       {"PolicyName", "sqs"},
       {"PolicyDocument",
        R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:*","Resource":"*"}]})"}});
  const std::string xml = moto_query(
      io, "sts", {{"Action", "AssumeRole"}, {"RoleArn", arn}, {"RoleSessionName", "relay"}});
  return RoleKey{aws::xml_element(xml, "AccessKeyId"), aws::xml_element(xml, "SecretAccessKey"),
                 aws::xml_element(xml, "SessionToken"), role};
}

// The role loses its policy: moto refuses its credentials from then on.
inline void moto_revoke(boost::asio::io_context& io, const RoleKey& key) {
  moto_query(io, "iam",
             {{"Action", "DeleteRolePolicy"}, {"RoleName", key.role}, {"PolicyName", "sqs"}});
}

// STS's answer to AssumeRoleWithWebIdentity with `key`.
inline std::string sts_answer(const RoleKey& key, const std::string& expiration) {
  return "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
         "<AssumeRoleWithWebIdentityResult><SubjectFromWebIdentityToken>system:sa</"
         "SubjectFromWebIdentityToken><Credentials><SessionToken>" +
         key.token + "</SessionToken><SecretAccessKey>" + key.secret +
         "</SecretAccessKey><Expiration>" + expiration + "</Expiration><AccessKeyId>" + key.id +
         "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
         "<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
         "</AssumeRoleWithWebIdentityResponse>";
}

// The container endpoint's and IMDS's answer with `key`.
inline std::string json_answer(const RoleKey& key, const std::string& expiration) {
  return "{\"Code\":\"Success\",\"LastUpdated\":\"2026-01-01T00:00:00Z\",\"Type\":\"AWS-HMAC\","
         "\"AccessKeyId\":\"" +
         key.id + "\",\"SecretAccessKey\":\"" + key.secret + "\",\"Token\":\"" + key.token +
         "\",\"Expiration\":\"" + expiration + "\"}";
}

}  // namespace outbox_test
