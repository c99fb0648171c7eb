// The fault-injecting proxy of tests/support (aws_fault_proxy.hpp) between aws::SqsClient (and
// aws::EventBridgeClient) and the real moto with its authentication on: requests pass with their
// signatures checked by moto (a wrong secret still refused), whole calls answered with throttling
// and 5xx (before moto saw them, or after it served them), batch entries removed so that moto
// never stores them and answered as retryable failures (SQS and EventBridge; the changed request
// signed again), a frozen proxy holding requests and answers until thawed, and the counters.
#include "outbox_test/aws_fault_proxy.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "outbox/aws/eventbridge_client.hpp"
#include "outbox/aws/sqs_client.hpp"
#include "outbox_test/asio_run.hpp"

namespace {

namespace aws = outbox::aws;
using outbox_test::await_result;
using outbox_test::AwsFaultProxy;
using outbox_test::BatchEntry;
using outbox_test::CallFault;
using outbox_test::EntryFault;
using outbox_test::FreezePoint;
using outbox_test::moto;
using namespace std::chrono_literals;

std::string unique_name(std::string_view prefix) {
  return std::string(prefix) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

class ProxyMoto : public ::testing::Test {
 protected:
  boost::asio::io_context io_;
  AwsFaultProxy proxy_{
      {moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}, 0}};

  aws::SqsConfig config(const std::string& endpoint, std::string secret_suffix = "") {
    aws::SqsConfig c;
    c.endpoint_url = endpoint;
    c.region = moto().region;
    c.credentials.credentials = {moto().access_key_id, moto().secret_access_key + secret_suffix,
                                 ""};
    c.credentials.source = "test key";
    c.http.max_connections = 2;
    return c;
  }

  aws::SqsCallResult call(aws::SqsClient& client, const std::string& action, std::string body) {
    auto r = await_result<aws::SqsCallResult>(io_, [&](std::function<void(aws::SqsCallResult)> d) {
      client.call(action, std::move(body), std::move(d));
    });
    if (!r) throw std::runtime_error(action + ": no answer in time");
    return std::move(*r);
  }

  std::string create_queue(aws::SqsClient& client, const std::string& name, bool fifo) {
    auto answer = call(client, "CreateQueue",
                       "{\"QueueName\":\"" + name + "\"" +
                           (fifo ? ",\"Attributes\":{\"FifoQueue\":\"true\"}}" : std::string("}")));
    if (answer.error) throw std::runtime_error("CreateQueue: " + answer.error->message);
    simdjson::dom::parser parser;
    return std::string(std::string_view(parser.parse(answer.body)["QueueUrl"]));
  }

  // The bodies moto holds, in its order (received and deleted); waits `quiet` for more.
  std::vector<std::string> bodies(aws::SqsClient& client, const std::string& url, std::size_t count,
                                  std::chrono::milliseconds quiet = 300ms) {
    std::vector<std::string> out;
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    auto quiet_end = std::chrono::steady_clock::now() + quiet;
    while (std::chrono::steady_clock::now() < deadline &&
           (out.size() < count || std::chrono::steady_clock::now() < quiet_end)) {
      auto answer = call(client, "ReceiveMessage",
                         "{\"QueueUrl\":\"" + url + "\",\"MaxNumberOfMessages\":10}");
      if (answer.error) throw std::runtime_error("ReceiveMessage: " + answer.error->message);
      simdjson::dom::parser parser;
      simdjson::dom::array messages;
      if (parser.parse(answer.body)["Messages"].get(messages) != simdjson::SUCCESS ||
          messages.size() == 0) {
        std::this_thread::sleep_for(50ms);
        continue;
      }
      for (auto m : messages) {
        out.emplace_back(std::string_view(m["Body"]));
        std::string del = "{\"QueueUrl\":\"" + url + "\",\"ReceiptHandle\":";
        aws::append_json_string(del, std::string_view(m["ReceiptHandle"]));
        if (auto d = call(client, "DeleteMessage", del + "}"); d.error) {
          throw std::runtime_error("DeleteMessage: " + d.error->message);
        }
      }
    }
    return out;
  }

  aws::SqsBatchResult send(aws::SqsClient& client, const std::string& url,
                           std::vector<aws::SqsSendEntry> entries) {
    auto r =
        await_result<aws::SqsBatchResult>(io_, [&](std::function<void(aws::SqsBatchResult)> d) {
          client.send_message_batch(url, std::move(entries), 0, std::move(d));
        });
    if (!r) throw std::runtime_error("SendMessageBatch: no answer in time");
    return std::move(*r);
  }

  // Runs the io_context until `done` (the proxy's thread changes what it looks at) or 15 s.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    io_.restart();
    while (!done() && std::chrono::steady_clock::now() < deadline) io_.run_one_for(10ms);
    return done();
  }
};

aws::SqsSendEntry entry(const std::string& id, const std::string& group) {
  aws::SqsSendEntry e;
  e.id = id;
  e.body = id;
  e.group_id = group;
  e.deduplication_id = group.empty() ? "" : unique_name(id);
  return e;
}

TEST_F(ProxyMoto, ForwardsRequestsWhoseSignaturesMotoChecks) {
  aws::SqsClient client(io_.get_executor(), config(proxy_.endpoint()));
  const auto url = create_queue(client, unique_name("proxy-pass") + ".fifo", true);
  auto sent = send(client, url, {entry("a1", "a"), entry("b1", "b"), entry("a2", "a")});
  ASSERT_FALSE(sent.error) << sent.error->message;
  EXPECT_EQ(sent.successful.size(), 3u);
  EXPECT_EQ(bodies(client, url, 3), (std::vector<std::string>{"a1", "b1", "a2"}));

  // moto checks what it receives: a wrong secret through the proxy is refused.
  aws::SqsClient bad(io_.get_executor(), config(proxy_.endpoint(), "x"));
  auto refused = send(bad, url, {entry("x1", "x")});
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->kind, aws::FailureKind::kClient) << refused.error->message;
  EXPECT_EQ(refused.error->code, "SignatureDoesNotMatch") << refused.error->message;

  const auto c = proxy_.counters();
  EXPECT_EQ(c.calls.at("CreateQueue"), 1);
  EXPECT_EQ(c.calls.at("SendMessageBatch"), 2);
  EXPECT_EQ(c.forwarded, c.answered);
  EXPECT_EQ(c.faulted_calls, 0);
  EXPECT_EQ(c.entries_failed, 0);
}

TEST_F(ProxyMoto, WholeCallsAnsweredWithThrottlingAnd5xx) {
  aws::SqsClient client(io_.get_executor(), config(proxy_.endpoint()));
  const auto url = create_queue(client, unique_name("proxy-calls"), false);
  proxy_.fail_calls(CallFault::throttling("SendMessageBatch"));
  proxy_.fail_calls(CallFault::sqs_request_throttled("SendMessageBatch"));
  proxy_.fail_calls(CallFault::server_error(503, "SendMessageBatch"));
  proxy_.fail_calls(CallFault::server_error(500, "SendMessageBatch"));
  const std::vector<std::pair<int, std::string>> expected = {{400, "ThrottlingException"},
                                                             {400, "RequestThrottled"},
                                                             {503, "ServiceUnavailable"},
                                                             {500, "InternalFailure"}};
  for (const auto& [status, code] : expected) {
    auto r = send(client, url, {entry("never", "")});
    ASSERT_TRUE(r.error) << code;
    EXPECT_EQ(r.error->kind, aws::FailureKind::kRetryable) << r.error->message;
    EXPECT_EQ(r.error->http_status, status);
    EXPECT_EQ(r.error->code, code) << r.error->message;
  }
  // Served by moto, its answer replaced: the message is there, the client was told 500.
  auto late = CallFault::server_error(500, "SendMessageBatch");
  late.after_forward = true;
  proxy_.fail_calls(late);
  auto served = send(client, url, {entry("served", "")});
  ASSERT_TRUE(served.error);
  EXPECT_EQ(served.error->http_status, 500);
  auto ok = send(client, url, {entry("after", "")});
  ASSERT_FALSE(ok.error) << ok.error->message;

  auto stored = bodies(client, url, 2);
  std::sort(stored.begin(), stored.end());
  EXPECT_EQ(stored, (std::vector<std::string>{"after", "served"}));
  const auto c = proxy_.counters();
  EXPECT_EQ(c.faulted_calls, 5);
  EXPECT_EQ(c.calls.at("SendMessageBatch"), 6);
}

TEST_F(ProxyMoto, SelectedEntriesAreNotStoredAndAnsweredAsRetryableFailures) {
  aws::SqsClient client(io_.get_executor(), config(proxy_.endpoint()));
  const auto url = create_queue(client, unique_name("proxy-entries") + ".fifo", true);
  proxy_.fail_entries(EntryFault::group("a", 1));
  proxy_.fail_entries(EntryFault::index(3));
  auto r = send(
      client, url,
      {entry("a1", "a"), entry("b1", "b"), entry("a2", "a"), entry("b2", "b"), entry("c1", "c")});
  ASSERT_FALSE(r.error) << r.error->message;
  std::vector<std::string> failed;
  for (const auto& f : r.failed) {
    failed.push_back(f.id);
    EXPECT_EQ(f.kind, aws::FailureKind::kRetryable);
    EXPECT_FALSE(f.sender_fault);
    EXPECT_EQ(f.code, "ThrottlingException");
  }
  EXPECT_EQ(failed, (std::vector<std::string>{"a1", "b2"}));
  EXPECT_EQ(r.successful.size(), 3u);
  EXPECT_EQ(bodies(client, url, 3), (std::vector<std::string>{"b1", "a2", "c1"}));

  // Spent: the retry of the failed entries passes. A predicate, every time until clear(); a
  // batch all of whose entries are failed is not forwarded.
  auto again = send(client, url, {entry("a1", "a"), entry("b2", "b")});
  ASSERT_FALSE(again.error) << again.error->message;
  EXPECT_EQ(again.successful.size(), 2u);
  proxy_.fail_entries(EntryFault::where([](const BatchEntry& e) { return e.body.starts_with("x"); },
                                        "SendMessageBatch", -1));
  const int forwarded = proxy_.counters().forwarded;
  for (int i = 0; i < 2; ++i) {
    auto none = send(client, url, {entry("x1", "x"), entry("x2", "y")});
    ASSERT_FALSE(none.error) << none.error->message;
    EXPECT_EQ(none.failed.size(), 2u);
    EXPECT_TRUE(none.successful.empty());
  }
  EXPECT_EQ(proxy_.counters().forwarded, forwarded);
  proxy_.clear();
  auto passes = send(client, url, {entry("x3", "x")});
  ASSERT_FALSE(passes.error) << passes.error->message;
  EXPECT_EQ(passes.successful.size(), 1u);
  EXPECT_EQ(bodies(client, url, 3), (std::vector<std::string>{"a1", "b2", "x3"}));

  const auto c = proxy_.counters();
  EXPECT_EQ(c.entries_failed, 6);
  ASSERT_EQ(c.failed.size(), 6u);
  EXPECT_EQ(c.failed[0].group_id, "a");
  EXPECT_EQ(c.failed[1].index, 3u);
}

TEST_F(ProxyMoto, PutEventsEntriesFailedInPlaceAndNotDelivered) {
  aws::SqsClient sqs(io_.get_executor(), config(moto().endpoint));
  const auto url = create_queue(sqs, unique_name("proxy-events"), false);
  auto arn = call(sqs, "GetQueueAttributes",
                  "{\"QueueUrl\":\"" + url + "\",\"AttributeNames\":[\"QueueArn\"]}");
  ASSERT_FALSE(arn.error) << arn.error->message;
  simdjson::dom::parser parser;
  const std::string queue_arn(std::string_view(parser.parse(arn.body)["Attributes"]["QueueArn"]));

  const auto base = config(proxy_.endpoint());
  aws::EventBridgeClient events(
      io_.get_executor(), {base.endpoint_url, base.region, base.credentials, base.http, nullptr});
  auto events_call = [&](const std::string& action, std::string body) {
    auto r = await_result<aws::EventBridgeCallResult>(
        io_, [&](std::function<void(aws::EventBridgeCallResult)> d) {
          events.call(action, std::move(body), std::move(d));
        });
    ASSERT_TRUE(r);
    ASSERT_FALSE(r->error) << r->error->message;
  };
  const std::string bus = unique_name("proxy-bus");
  events_call("CreateEventBus", "{\"Name\":\"" + bus + "\"}");
  events_call("PutRule", "{\"Name\":\"all\",\"EventBusName\":\"" + bus +
                             "\",\"EventPattern\":\"{\\\"source\\\":[\\\"outbox\\\"]}\"}");
  events_call("PutTargets", "{\"Rule\":\"all\",\"EventBusName\":\"" + bus +
                                "\",\"Targets\":[{\"Id\":\"q\",\"Arn\":\"" + queue_arn + "\"}]}");

  proxy_.fail_entries(EntryFault::index(1, "PutEvents"));
  std::vector<aws::PutEventsEntry> entries;
  for (int i = 0; i < 3; ++i) {
    entries.push_back({"outbox", "T", "{\"n\":" + std::to_string(i) + "}", bus, {}});
  }
  auto r =
      await_result<aws::PutEventsResult>(io_, [&](std::function<void(aws::PutEventsResult)> d) {
        events.put_events(entries, std::move(d));
      });
  ASSERT_TRUE(r);
  ASSERT_FALSE(r->error) << r->error->message;
  ASSERT_EQ(r->entries.size(), 3u);
  EXPECT_TRUE(r->entries[0].ok());
  EXPECT_FALSE(r->entries[1].ok());
  EXPECT_EQ(r->entries[1].kind, aws::FailureKind::kRetryable);
  EXPECT_EQ(r->entries[1].error_code, "ThrottlingException");
  EXPECT_TRUE(r->entries[2].ok());

  std::vector<std::string> details;
  for (const auto& body : bodies(sqs, url, 2)) {
    simdjson::dom::parser p;
    details.push_back(simdjson::minify(p.parse(body)["detail"]));
  }
  std::sort(details.begin(), details.end());
  EXPECT_EQ(details, (std::vector<std::string>{"{\"n\":0}", "{\"n\":2}"}));
}

TEST_F(ProxyMoto, AFreezeHoldsRequestsOrAnswersUntilThawed) {
  aws::SqsClient direct(io_.get_executor(), config(moto().endpoint));
  aws::SqsClient client(io_.get_executor(), config(proxy_.endpoint()));
  const auto url = create_queue(direct, unique_name("proxy-freeze"), false);

  proxy_.freeze();
  std::optional<aws::SqsBatchResult> held;
  client.send_message_batch(url, {entry("held", "")}, 0,
                            [&](aws::SqsBatchResult r) { held = std::move(r); });
  ASSERT_TRUE(run_until([&] { return proxy_.counters().held == 1; }));
  outbox_test::run_for(io_, 500ms);
  EXPECT_FALSE(held);
  EXPECT_EQ(proxy_.counters().forwarded, 0);
  EXPECT_TRUE(bodies(direct, url, 0).empty());
  proxy_.thaw();
  ASSERT_TRUE(run_until([&] { return held.has_value(); }));
  ASSERT_FALSE(held->error) << held->error->message;
  EXPECT_EQ(bodies(direct, url, 1), std::vector<std::string>{"held"});

  // Frozen after moto: stored, not answered.
  proxy_.freeze(FreezePoint::kAnswer);
  std::optional<aws::SqsBatchResult> unanswered;
  client.send_message_batch(url, {entry("stored", "")}, 0,
                            [&](aws::SqsBatchResult r) { unanswered = std::move(r); });
  ASSERT_TRUE(run_until([&] { return proxy_.counters().held == 1; }));
  EXPECT_EQ(bodies(direct, url, 1), std::vector<std::string>{"stored"});
  EXPECT_FALSE(unanswered);
  proxy_.thaw();
  ASSERT_TRUE(run_until([&] { return unanswered.has_value(); }));
  ASSERT_FALSE(unanswered->error) << unanswered->error->message;
  EXPECT_EQ(proxy_.counters().held, 0);
}

}  // namespace
