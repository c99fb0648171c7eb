// The fixture of the relay's tests against nats-server (label nats): the fault tests' fixture
// (tests/fault: table with a seq column, the paced workload, the delivery checks) with
// E2eNames::nats, a stream per test, the stream read back with StreamReader as the Kafka checks
// read records. Used by relay_nats_test.cpp (scripts/nats-up.sh's server) and
// relay_security_test.cpp (servers of the test's own: access_ says how to reach them).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fault_fixture.hpp"
#include "outbox/nats/publisher.hpp"
#include "stream_reader.hpp"

namespace outbox_test::fault {

using outbox_test::nats::Stored;
using outbox_test::nats::StreamReader;

// The stored messages as the Kafka checks read records: subject as topic, stream sequence as
// offset, the `key` header as key.
inline std::vector<Record> as_records(const std::vector<Stored>& stored) {
  std::vector<Record> out;
  out.reserve(stored.size());
  for (const Stored& s : stored) {
    Record r;
    r.topic = s.subject;
    r.partition = 0;
    r.offset = static_cast<std::int64_t>(s.seq);
    if (auto k = s.headers.find("key"); k != s.headers.end()) r.key = k->second;
    r.value = s.data;
    r.headers = s.headers;
    out.push_back(std::move(r));
  }
  return out;
}

inline pid_t nats_pid() {
  const std::string path = outbox_test::nats::env("OUTBOX_NATS_PID_FILE");
  const std::string text = read_file(path);
  const pid_t pid = text.empty() ? -1 : static_cast<pid_t>(std::stol(text));
  return pid > 0 && ::kill(pid, 0) == 0 ? pid : -1;
}

class NatsRelay : public FaultTest {
 protected:
  NatsRelay() { names_.nats = true; }

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    stream_ = "OUTBOX_RELAY_" + suffix_;
    dlq_subject_ = "outbox.dlq." + suffix_;
    access_.url = nats_;
  }
  void TearDown() override {
    FaultTest::TearDown();
    if (!stream_.empty() && nats_pid() > 0) {
      try {
        StreamReader(access_).drop(stream_);
      } catch (const std::exception&) {
      }
    }
  }

  // The stream capturing the test's subject and dead-letter subject, with a duplicate window
  // longer than the test.
  void create_stream() {
    ASSERT_EQ(
        outbox::nats::ensure_stream(admin_config(), stream_, {topic_, dlq_subject_}, 10min, 10s),
        "");
  }
  // The publisher's settings of access_ (for ensure_stream).
  outbox::nats::PublisherConfig admin_config() const {
    outbox::nats::PublisherConfig c;
    c.urls = access_.url;
    c.tls_ca_file = access_.tls_ca_file;
    c.tls_cert_file = access_.tls_cert_file;
    c.tls_key_file = access_.tls_key_file;
    return c;
  }

  std::vector<Stored> stored() { return StreamReader(access_).all(stream_); }

  // Every committed event in the stream within `timeout`, the slot confirmed through the load,
  // no duplicate, nothing missing, no ghost, per-aggregate order.
  void expect_every_event_stored_once(std::chrono::seconds timeout) {
    const Lsn lsn_after_load = pg_->current_wal_lsn();
    const auto rows = committed_seqs();
    std::vector<Stored> messages;
    wait_until(
        [&] {
          messages = stored();
          return messages.size() >= rows.size();
        },
        timeout, 200ms);
    EXPECT_TRUE(expect_confirmed_reaches(lsn_after_load, 60s));
    messages = stored();
    const DeliveryCheck check = check_deliveries(as_records(messages), rows);
    EXPECT_EQ(check.problems.count(), 0u) << check.problems.describe();
    EXPECT_EQ(check.missing, 0u);
    EXPECT_EQ(check.ghosts, 0u);
    EXPECT_EQ(check.duplicates, 0u);
    figure("events", static_cast<std::int64_t>(rows.size()));
    figure("stored", static_cast<std::int64_t>(messages.size()));
  }

  std::string stream_;
  std::string dlq_subject_;
  // How the test reaches the server for streams and reading back: OUTBOX_NATS unless a test
  // runs a server of its own.
  StreamReader::Access access_;
};

}  // namespace outbox_test::fault
