// aws::EventBridgePublisher against the real moto (authentication on), read back through a rule
// whose target is an SQS queue: every record reported once and on the bus once, in PutEvents
// calls of up to 10 entries, several calls in flight (throughput printed); and through the
// fault-injecting proxy: throttled and 5xx calls and throttled entries sent again until they pass
// (only the entries that failed), an entry refused for good reported kRecord while its neighbours
// pass, a call of several entries refused whole as invalid split so that only the bad entry is
// refused, a record over 256 KiB refused by produce() as too large, halt() reporting what it held
// as transient, and a wrong secret refused with its source named.
#include "outbox/aws/eventbridge_publisher.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "eventbridge_fixture.hpp"
#include "outbox_test/asio_run.hpp"
#include "outbox_test/aws_fault_proxy.hpp"

namespace {

namespace aws = outbox::aws;
namespace sink = outbox::sink;
using outbox_test::AwsFaultProxy;
using outbox_test::BatchEntry;
using outbox_test::CallFault;
using outbox_test::EntryFault;
using outbox_test::EventBridgeToQueue;
using outbox_test::moto;
using outbox_test::run_until;
using namespace std::chrono_literals;

constexpr std::string_view kSource = "outbox.event.Order";

struct Report {
  std::uint64_t opaque;
  bool ok;
  sink::ErrorKind kind;
  std::string error;
  std::string id;
  std::optional<std::string> value;
};

class EventBridgePublisherMoto : public ::testing::Test {
 protected:
  boost::asio::io_context io_;
  AwsFaultProxy proxy_{
      {moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}, 0}};
  EventBridgeToQueue target_{"eb-publisher", {std::string(kSource)}};
  std::vector<Report> reports_;
  std::vector<std::string> refusals_;

  std::unique_ptr<aws::EventBridgePublisher> publisher(const std::string& endpoint,
                                                       std::size_t max_calls = 4,
                                                       const std::string& secret_suffix = "") {
    aws::EventBridgePublisherConfig c;
    c.bus = target_.bus();
    c.events = outbox_test::moto_events_config(endpoint);
    c.events.credentials = outbox_test::moto_credentials(secret_suffix);
    c.events.http.max_connections = max_calls;
    c.retry_base = 20ms;
    c.retry_max = 200ms;
    return std::make_unique<aws::EventBridgePublisher>(
        io_.get_executor(), c,
        [this](const sink::Delivery& d) {
          reports_.push_back({d.opaque, d.ok, d.kind, d.error, std::string(d.id_header),
                              d.value ? std::optional<std::string>(*d.value) : std::nullopt});
        },
        [this](const std::string& m) { refusals_.push_back(m); });
  }

  sink::ProduceResult produce(aws::EventBridgePublisher& p, std::uint64_t n,
                              const std::string& payload, bool alone = false) {
    const std::string id = "e-" + std::to_string(n);
    const std::string key = "order-" + std::to_string(n % 7);
    const sink::Header headers[] = {{"id", id}, {"type", "OrderPlaced"}};
    sink::Record r;
    r.topic = kSource;
    r.key = key;
    r.value = payload;
    r.headers = headers;
    return p.produce(r, n, alone);
  }

  std::set<std::string> ids(const std::vector<outbox_test::ReceivedEvent>& events) {
    std::set<std::string> out;
    for (const auto& e : events) out.insert(e.id);
    return out;
  }
};

std::string payload(std::uint64_t n) { return "{\"n\":" + std::to_string(n) + "}"; }

TEST_F(EventBridgePublisherMoto, EveryRecordReportedOnceAndOnTheBusOnce) {
  auto p = publisher(moto().endpoint, 8);
  constexpr std::uint64_t kCount = 300;
  std::set<std::string> expected;
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t produced = 0;
  ASSERT_TRUE(run_until(
      io_,
      [&] {
        while (produced < kCount) {
          auto r = produce(*p, produced + 1, payload(produced + 1));
          if (r.status == sink::ProduceStatus::kQueueFull) break;
          EXPECT_EQ(r.status, sink::ProduceStatus::kQueued) << r.error;
          expected.insert("e-" + std::to_string(++produced));
        }
        return reports_.size() == kCount;
      },
      120s));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "EventBridge publisher against moto: %llu events in %.2f s, %.0f events/s, %zu "
      "PutEvents calls, 8 in flight\n",
      static_cast<unsigned long long>(kCount), seconds, kCount / seconds, p->calls());
  std::set<std::uint64_t> opaques;
  for (const auto& r : reports_) {
    EXPECT_TRUE(r.ok) << r.error;
    opaques.insert(r.opaque);
  }
  EXPECT_EQ(opaques.size(), kCount);
  EXPECT_EQ(p->queued(), 0u);
  EXPECT_GE(p->calls(), kCount / 10);
  EXPECT_LT(p->calls(), kCount / 2);  // batched: most calls carry several entries

  const auto events = target_.receive(kCount, 300ms, 60s);
  EXPECT_EQ(events.size(), kCount);
  EXPECT_EQ(ids(events), expected);
  simdjson::dom::parser parser;
  for (const auto& e : events) {
    ASSERT_EQ(e.source, kSource);
    ASSERT_EQ(e.detail_type, "OrderPlaced");
    const std::string n = e.id.substr(2);
    ASSERT_EQ(e.detail,
              "{\"id\":\"" + e.id + "\",\"type\":\"OrderPlaced\",\"aggregateid\":\"order-" +
                  std::to_string(std::stoull(n) % 7) + "\",\"payload\":{\"n\":" + n + "}}");
  }
}

// Throughput against moto, to a bus whose rules match nothing (moto's delivery to an SQS target,
// and its ReceiveMessage, are slower than its PutEvents): printed for 1, 2, 4 and 8 calls in
// flight, and a moto PutEvents of 10 entries timed alone, to tell whether moto is the bound.
TEST_F(EventBridgePublisherMoto, ThroughputPrintedByCallsInFlight) {
  constexpr std::uint64_t kCount = 1000;
  for (std::size_t calls : {1, 2, 4, 8}) {
    reports_.clear();
    auto p = publisher(moto().endpoint, calls);
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t produced = 0;
    ASSERT_TRUE(run_until(
        io_,
        [&] {
          while (produced < kCount) {
            const std::string n = std::to_string(++produced);
            const sink::Header headers[] = {{"id", "t-" + n}, {"type", "Unrouted"}};
            sink::Record r;
            r.topic = "outbox.unrouted";
            r.key = n;
            const std::string value =
                "{\"n\":" + n + ",\"text\":\"" + std::string(200, 'x') + "\"}";
            r.value = value;
            r.headers = headers;
            EXPECT_EQ(p->produce(r, produced, false).status, sink::ProduceStatus::kQueued);
          }
          return reports_.size() == kCount;
        },
        120s));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& r : reports_) ASSERT_TRUE(r.ok) << r.error;
    std::printf(
        "EventBridge publisher against moto, no rule matching: %llu events of ~250 bytes "
        "in %.2f s, %.0f events/s, %zu PutEvents calls, %zu in flight\n",
        static_cast<unsigned long long>(kCount), seconds, kCount / seconds, p->calls(), calls);
  }
}

TEST_F(EventBridgePublisherMoto, ThrottledCallsAndEntriesAreSentAgainUntilTheyPass) {
  auto p = publisher(proxy_.endpoint(), 2);
  proxy_.fail_calls(CallFault::throttling("PutEvents", 2));
  proxy_.fail_calls(CallFault::server_error(503, "PutEvents"));
  auto served_lost = CallFault::server_error(500, "PutEvents");
  served_lost.after_forward = true;  // moto stores it, the answer is lost: sent again, twice
  proxy_.fail_calls(served_lost);
  // Entries e-3 and e-17: failed three times each, their neighbours taken.
  proxy_.fail_entries(EntryFault::where(
      [](const BatchEntry& e) {
        return e.body.find("\"id\":\"e-3\"") != std::string::npos ||
               e.body.find("\"id\":\"e-17\"") != std::string::npos;
      },
      "PutEvents", 6));
  constexpr std::uint64_t kCount = 40;
  for (std::uint64_t n = 1; n <= kCount; ++n) {
    ASSERT_EQ(produce(*p, n, payload(n)).status, sink::ProduceStatus::kQueued);
  }
  ASSERT_TRUE(run_until(
      io_, [&] { return reports_.size() == kCount; }, 30s));
  for (const auto& r : reports_) EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(proxy_.counters().entries_failed, 6);
  EXPECT_EQ(proxy_.counters().faulted_calls, 4);
  EXPECT_GE(p->retries(), 6u);

  const auto events = target_.receive(kCount, 500ms);
  std::set<std::string> expected;
  for (std::uint64_t n = 1; n <= kCount; ++n) expected.insert("e-" + std::to_string(n));
  EXPECT_EQ(ids(events), expected);
  // At least once: the call served and unanswered reached the bus twice, nothing else did.
  EXPECT_GT(events.size(), kCount);
  EXPECT_LE(events.size(), kCount + 10);
}

TEST_F(EventBridgePublisherMoto, AnEntryRefusedForGoodIsReportedAloneAndTheOthersPass) {
  auto p = publisher(proxy_.endpoint(), 2);
  EntryFault refused = EntryFault::where(
      [](const BatchEntry& e) { return e.body.find("\"id\":\"e-5\"") != std::string::npos; },
      "PutEvents", 1);
  refused.code = "MalformedDetail";
  refused.message = "Detail is malformed (injected)";
  proxy_.fail_entries(refused);
  for (std::uint64_t n = 1; n <= 10; ++n) {
    ASSERT_EQ(produce(*p, n, payload(n)).status, sink::ProduceStatus::kQueued);
  }
  ASSERT_TRUE(run_until(
      io_, [&] { return reports_.size() == 10; }, 30s));
  for (const auto& r : reports_) {
    if (r.opaque == 5) {
      EXPECT_FALSE(r.ok);
      EXPECT_EQ(r.kind, sink::ErrorKind::kRecord);
      EXPECT_NE(r.error.find("MalformedDetail"), std::string::npos) << r.error;
      EXPECT_EQ(r.id, "e-5");
      EXPECT_EQ(r.value, payload(5));  // what a dead letter needs
    } else {
      EXPECT_TRUE(r.ok) << r.error;
    }
  }
  EXPECT_FALSE(p->stopped());
  EXPECT_EQ(target_.receive(9, 300ms).size(), 9u);

  // A call of several entries refused whole as invalid (before moto saw it): each goes again in a
  // call of its own, and only e-23's is refused (per entry, for good).
  reports_.clear();
  proxy_.clear();
  CallFault invalid;
  invalid.action = "PutEvents";
  invalid.code = "ValidationException";
  invalid.message = "1 validation error detected (injected)";
  proxy_.fail_calls(invalid);
  EntryFault bad = EntryFault::where(
      [](const BatchEntry& e) { return e.body.find("\"id\":\"e-23\"") != std::string::npos; },
      "PutEvents", -1);
  bad.code = "InvalidArgument";
  proxy_.fail_entries(bad);
  const int calls_before = static_cast<int>(p->calls());
  for (std::uint64_t n = 21; n <= 25; ++n) {
    ASSERT_EQ(produce(*p, n, payload(n)).status, sink::ProduceStatus::kQueued);
  }
  ASSERT_TRUE(run_until(
      io_, [&] { return reports_.size() == 5; }, 30s));
  for (const auto& r : reports_) {
    EXPECT_EQ(r.ok, r.opaque != 23) << r.opaque << " " << r.error;
    if (r.opaque == 23) {
      EXPECT_EQ(r.kind, sink::ErrorKind::kRecord);
    }
  }
  EXPECT_EQ(proxy_.counters().faulted_calls, 1);
  EXPECT_EQ(static_cast<int>(p->calls()) - calls_before, 1 + 5);  // the refused one, then alone
  EXPECT_EQ(target_.receive(4, 300ms).size(), 4u);
}

TEST_F(EventBridgePublisherMoto, ARecordOver256KiBIsRefusedAsTooLargeBeforeAnyCall) {
  auto p = publisher(moto().endpoint);
  const std::string big(300 * 1024, 'x');
  const auto r = produce(*p, 1, big);
  EXPECT_EQ(r.status, sink::ProduceStatus::kFailed);
  EXPECT_TRUE(r.size_error);
  EXPECT_EQ(r.error.rfind("EntryTooLarge: ", 0), 0u) << r.error;
  EXPECT_EQ(p->queued(), 0u);
  EXPECT_FALSE(p->stopped());
  // One just under the limit goes.
  const std::string fits(250 * 1024, 'y');
  ASSERT_EQ(produce(*p, 2, fits).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(run_until(
      io_, [&] { return reports_.size() == 1; }, 30s));
  EXPECT_TRUE(reports_[0].ok) << reports_[0].error;
  EXPECT_EQ(p->calls(), 1u);
  const auto events = target_.receive(1, 300ms);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, "e-2");
}

// A record whose topic is the dead-letter topic goes to the dead-letter bus with that topic as
// its Source; without a dead-letter bus, to the same bus.
TEST_F(EventBridgePublisherMoto, DeadLettersGoToTheDeadLetterBusElseTheSameBus) {
  EventBridgeToQueue same("eb-dlq-same", {std::string(kSource), "outbox.dlq"});
  EventBridgeToQueue dead("eb-dlq-dead", {"outbox.dlq"});
  auto with = [&](const std::string& bus, const std::string& dlq_bus) {
    aws::EventBridgePublisherConfig c;
    c.bus = bus;
    c.dlq_topic = "outbox.dlq";
    c.dlq_bus = dlq_bus;
    c.events = outbox_test::moto_events_config(moto().endpoint);
    return std::make_unique<aws::EventBridgePublisher>(
        io_.get_executor(), c,
        [this](const sink::Delivery& d) {
          reports_.push_back({d.opaque, d.ok, d.kind, d.error, std::string(d.id_header), {}});
        },
        [this](const std::string& m) { refusals_.push_back(m); });
  };
  const sink::Header headers[] = {{"id", "d-1"}, {"type", "Big"}, {"outbox.error", "too big"}};
  sink::Record letter;
  letter.topic = "outbox.dlq";
  letter.key = "order-1";
  letter.headers = headers;
  for (const bool own_bus : {false, true}) {
    reports_.clear();
    auto p = own_bus ? with(target_.bus(), dead.bus()) : with(same.bus(), "");
    ASSERT_EQ(produce(*p, 1, payload(1)).status, sink::ProduceStatus::kQueued);
    ASSERT_EQ(p->produce(letter, 2, false).status, sink::ProduceStatus::kQueued);
    ASSERT_TRUE(run_until(
        io_, [&] { return reports_.size() == 2; }, 30s));
    for (const auto& r : reports_) EXPECT_TRUE(r.ok) << r.error;
    const auto events = own_bus ? target_.receive(1, 300ms) : same.receive(2, 300ms);
    const auto letters =
        own_bus ? dead.receive(1, 300ms) : std::vector<outbox_test::ReceivedEvent>{};
    std::vector<outbox_test::ReceivedEvent> all = events;
    all.insert(all.end(), letters.begin(), letters.end());
    ASSERT_EQ(all.size(), 2u) << own_bus;
    for (const auto& e : all) {
      if (e.id == "d-1") {
        EXPECT_EQ(e.source, "outbox.dlq");
        EXPECT_EQ(
            e.detail,
            R"({"id":"d-1","type":"Big","aggregateid":"order-1","headers":{"outbox.error":"too big"},"payload":null})");
      } else {
        EXPECT_EQ(e.id, "e-1");
        EXPECT_EQ(e.source, kSource);
      }
    }
    if (own_bus) {
      ASSERT_EQ(letters.size(), 1u);
      EXPECT_EQ(letters[0].id, "d-1");
    }
  }
}

TEST_F(EventBridgePublisherMoto, HaltReportsWhatItHeldAsTransientInProduceOrder) {
  auto p = publisher(proxy_.endpoint(), 2);
  proxy_.freeze();
  for (std::uint64_t n = 1; n <= 25; ++n) {
    ASSERT_EQ(produce(*p, n, payload(n)).status, sink::ProduceStatus::kQueued);
  }
  ASSERT_TRUE(run_until(
      io_, [&] { return proxy_.counters().held == 2; }, 10s));
  outbox_test::run_for(io_, 200ms);
  EXPECT_TRUE(reports_.empty());
  EXPECT_EQ(p->queued(), 25u);
  p->halt("delivery timed out");
  ASSERT_EQ(reports_.size(), 25u);
  for (std::size_t i = 0; i < reports_.size(); ++i) {
    EXPECT_EQ(reports_[i].opaque, i + 1);
    EXPECT_FALSE(reports_[i].ok);
    EXPECT_EQ(reports_[i].kind, sink::ErrorKind::kTransient);
  }
  EXPECT_TRUE(p->stopped());
  EXPECT_EQ(produce(*p, 26, payload(26)).status, sink::ProduceStatus::kFailed);
  proxy_.thaw();
  outbox_test::run_for(io_, 300ms);
  EXPECT_EQ(reports_.size(), 25u);  // the answers that came later are ignored
}

TEST_F(EventBridgePublisherMoto, AWrongSecretIsRefusedNamingItsSourceNeverTheSecret) {
  auto p = publisher(moto().endpoint, 2, "-wrong");
  ASSERT_EQ(produce(*p, 1, payload(1)).status, sink::ProduceStatus::kQueued);
  ASSERT_TRUE(run_until(
      io_, [&] { return !refusals_.empty(); }, 30s));
  EXPECT_NE(refusals_[0].find("test key of scripts/aws-up.sh"), std::string::npos) << refusals_[0];
  EXPECT_EQ(refusals_[0].find(moto().secret_access_key), std::string::npos);
  EXPECT_TRUE(p->stopped());
  EXPECT_TRUE(reports_.empty());
}

}  // namespace
