#include "security.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "outbox/kafka/producer.hpp"  // ConfigError

namespace outbox::kafka {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::optional<std::string> unsupported_sasl(std::string_view protocol, std::string_view mechanism,
                                            int version, std::string_view version_text) {
  const std::string p = lower(protocol);
  if (p != "sasl_ssl" && p != "sasl_plaintext") return std::nullopt;
  if (lower(mechanism).rfind("scram-", 0) != 0 || version >= kScramFixedVersion) {
    return std::nullopt;
  }
  return "sasl.mechanism=" + std::string(mechanism) + " cannot log in with the linked librdkafka " +
         std::string(version_text) +
         ": before 2.6.1 librdkafka repeats the client nonce in the SCRAM exchange and Kafka 4 "
         "brokers refuse the login as invalid credentials. Use sasl.mechanism=PLAIN over "
         "security.protocol=SASL_SSL, or mutual TLS (security.protocol=SSL with "
         "ssl.certificate.location and ssl.key.location), or librdkafka 2.6.1 or later";
}

bool is_secret_property(std::string_view name) {
  // "pas" and "pwd": misspelt passwords too (sasl.pasword).
  static constexpr std::array<std::string_view, 7> kWords = {"pas", "pwd",   "secret",    "jaas",
                                                             "key", "token", "credential"};
  const std::string n = lower(name);
  return std::any_of(kWords.begin(), kWords.end(),
                     [&](std::string_view w) { return n.find(w) != std::string::npos; });
}

std::string describe_property(std::string_view name, std::string_view value) {
  return std::string(name) + "=" +
         (is_secret_property(name) ? std::string("(secret, not shown)") : std::string(value));
}

void set_property(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof errstr) !=
      RD_KAFKA_CONF_OK) {
    // The value only when it is no secret (a misspelt sasl.password stays hidden too).
    throw ConfigError("Kafka property " + describe_property(name, value) + ": " + errstr);
  }
}

ClientError classify_client_error(int err, std::string_view reason) {
  if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
      err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED) {
    return ClientError::kAuthentication;
  }
  // A handshake that failed on a certificate (unknown CA, expired, name mismatch, a client
  // certificate the broker requires or refuses) fails the same way on every retry.
  if (err == RD_KAFKA_RESP_ERR__SSL && lower(reason).find("certificate") != std::string::npos) {
    return ClientError::kCertificate;
  }
  return ClientError::kOther;
}

void refuse_unsupported_sasl(const rd_kafka_conf_t* conf) {
  const auto get = [&](const char* name) {
    char buf[256];
    std::size_t size = sizeof buf;
    return rd_kafka_conf_get(conf, name, buf, &size) == RD_KAFKA_CONF_OK ? std::string(buf)
                                                                         : std::string();
  };
  if (auto refusal = unsupported_sasl(get("security.protocol"), get("sasl.mechanisms"),
                                      rd_kafka_version(), rd_kafka_version_str())) {
    throw ConfigError(*refusal);
  }
}

}  // namespace outbox::kafka
