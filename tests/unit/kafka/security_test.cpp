// Authentication as the kafka module sees it: SCRAM is refused up front on a librdkafka that
// cannot log in with it against Kafka 4 (verified against the test broker: librdkafka 2.0.2 is
// refused "due to invalid credentials" with the right password, a Java client is let in); secret
// property values are never printed; a refused login or certificate is told from connection
// trouble.
#include "kafka/security.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include "outbox/kafka/producer.hpp"

namespace outbox::kafka {
namespace {

constexpr int k202 = 0x020002ff;

TEST(Sasl, ScramBefore261IsRefusedWithMechanismVersionAndFix) {
  const auto refusal = unsupported_sasl("SASL_SSL", "SCRAM-SHA-512", k202, "2.0.2");
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("sasl.mechanism=SCRAM-SHA-512"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("librdkafka 2.0.2"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("sasl.mechanism=PLAIN over security.protocol=SASL_SSL"),
            std::string::npos);
  EXPECT_NE(refusal->find("mutual TLS"), std::string::npos);
  EXPECT_NE(refusal->find("librdkafka 2.6.1 or later"), std::string::npos);
  EXPECT_TRUE(unsupported_sasl("sasl_plaintext", "scram-sha-256", k202, "2.0.2"));
}

TEST(Sasl, WhatWorksIsLetThrough) {
  EXPECT_FALSE(unsupported_sasl("SASL_SSL", "PLAIN", k202, "2.0.2"));
  EXPECT_FALSE(unsupported_sasl("SASL_SSL", "SCRAM-SHA-512", kScramFixedVersion, "2.6.1"));
  EXPECT_FALSE(unsupported_sasl("SASL_SSL", "SCRAM-SHA-512", 0x020a00ff, "2.10.0"));
  // Without SASL the mechanism is not used (librdkafka's default mechanism is GSSAPI anyway).
  EXPECT_FALSE(unsupported_sasl("SSL", "SCRAM-SHA-512", k202, "2.0.2"));
  EXPECT_FALSE(unsupported_sasl("plaintext", "SCRAM-SHA-512", k202, "2.0.2"));
}

TEST(Sasl, TheProducerRefusesScramOnThisLibrdkafka) {
  if (rd_kafka_version() >= kScramFixedVersion) GTEST_SKIP() << "librdkafka can log in with SCRAM";
  ASSERT_TRUE(
      unsupported_sasl("SASL_SSL", "SCRAM-SHA-512", rd_kafka_version(), rd_kafka_version_str()));
}

TEST(Secrets, ValuesOfSecretPropertiesAreNeverShown) {
  for (const char* name : {"sasl.password", "ssl.key.password", "ssl.keystore.password",
                           "ssl.key.pem", "sasl.oauthbearer.client.secret", "sasl.jaas.config",
                           "sasl.pasword", "SASL.PASSWORD", "ssl_key"}) {
    EXPECT_TRUE(is_secret_property(name)) << name;
    EXPECT_EQ(describe_property(name, "hunter2"), std::string(name) + "=(secret, not shown)");
  }
  EXPECT_EQ(describe_property("linger.ms", "5"), "linger.ms=5");
  EXPECT_EQ(describe_property("sasl.username", "relay"), "sasl.username=relay");
}

TEST(ClientErrors, RefusedLoginsAndCertificatesAreToldFromConnectionTrouble) {
  EXPECT_EQ(classify_client_error(RD_KAFKA_RESP_ERR__AUTHENTICATION,
                                  "sasl_ssl://127.0.0.1:59094/bootstrap: SASL authentication "
                                  "error: Authentication failed: Invalid username or password"),
            ClientError::kAuthentication);
  EXPECT_EQ(classify_client_error(RD_KAFKA_RESP_ERR__SSL,
                                  "sasl_ssl://127.0.0.1:59094/bootstrap: SSL handshake failed: "
                                  "error:0A000086:SSL routines::certificate verify failed"),
            ClientError::kCertificate);
  EXPECT_EQ(classify_client_error(RD_KAFKA_RESP_ERR__SSL,
                                  "ssl://127.0.0.1:59095/bootstrap: SSL handshake failed: "
                                  "Disconnected"),
            ClientError::kOther);
  EXPECT_EQ(classify_client_error(RD_KAFKA_RESP_ERR__TRANSPORT, "Connection refused"),
            ClientError::kOther);
  EXPECT_EQ(classify_client_error(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "1/1 brokers are down"),
            ClientError::kOther);
}

}  // namespace
}  // namespace outbox::kafka
