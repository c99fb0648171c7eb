// What the kafka module knows about authentication: the SASL mechanisms the linked librdkafka
// cannot log in with, the properties whose values are secrets, and which client errors mean
// that the broker refused the client's credentials or certificate. Pure but for the two calls
// on a librdkafka configuration; internal to the kafka module and its unit tests.
#pragma once

#include <librdkafka/rdkafka.h>

#include <optional>
#include <string>
#include <string_view>

namespace outbox::kafka {

// librdkafka 2.6.1 (rd_kafka_version() format): the first that logs in with SCRAM to Kafka 4.x
// brokers. Older ones send the client nonce twice in the client-final message ("nonce" already
// starts with it); Kafka 4 checks it and refuses the login as invalid credentials.
inline constexpr int kScramFixedVersion = 0x020601ff;

// The refusal, one line, when `mechanism` (sasl.mechanism) cannot log in under `protocol`
// (security.protocol) with librdkafka `version` (rd_kafka_version(); `version_text` as
// rd_kafka_version_str()); nullopt when it can, or when SASL is not used.
std::optional<std::string> unsupported_sasl(std::string_view protocol, std::string_view mechanism,
                                            int version, std::string_view version_text);

// Whether a property's value is a secret never to be printed (sasl.password, ssl.key.password,
// ssl.key.pem, sasl.oauthbearer.client.secret, ...): judged by its name, so that a misspelt
// name is covered too.
bool is_secret_property(std::string_view name);

// "name=value", or "name=(secret, not shown)" for a secret.
std::string describe_property(std::string_view name, std::string_view value);

// Sets property `name` of `conf` to `value`; throws ConfigError naming the property and what
// librdkafka said, with the value only when it is no secret (describe_property()).
void set_property(rd_kafka_conf_t* conf, const std::string& name, const std::string& value);

// What an error of librdkafka's error callback (its code as an int, and its text) says about
// the client's credentials.
enum class ClientError {
  kOther,           // connection trouble and the like: librdkafka retries
  kAuthentication,  // the broker refused the SASL login (wrong user, password or mechanism)
  kCertificate,     // a TLS handshake failed on a certificate (untrusted, missing, refused)
};
ClientError classify_client_error(int err, std::string_view reason);

// Throws ConfigError (unsupported_sasl's text) when `conf`'s security.protocol and
// sasl.mechanism cannot log in with the librdkafka this process runs with.
void refuse_unsupported_sasl(const rd_kafka_conf_t* conf);

}  // namespace outbox::kafka
