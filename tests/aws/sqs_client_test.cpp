// aws::SqsClient and its HttpClient against the real moto server of scripts/aws-up.sh, with
// moto's authentication on (every request's signature checked): queue attributes, a FIFO batch
// read back in order per group with its attributes and deduplication ids, a resend dropped
// within the deduplication interval, an entry refused alone (over the queue's limit here; by the
// service for a bad DelaySeconds), a wrong secret refused naming the source and not the secret,
// parallel requests (throughput printed), transport failures retryable; and EventBridge's
// PutEvents to a rule with an SQS target, the event read back from the queue.
#include "outbox/aws/sqs_client.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "aws/json_protocol.hpp"
#include "moto.hpp"
#include "outbox/aws/eventbridge_client.hpp"
#include "sqs_fixture.hpp"

namespace {

namespace aws = outbox::aws;
using outbox_test::await_result;
using outbox_test::kSource;
using outbox_test::moto;
using outbox_test::Received;
using outbox_test::SqsMoto;
using outbox_test::unique_name;

aws::SqsSendEntry event(std::string id, std::string group, std::string body) {
  aws::SqsSendEntry e;
  e.id = "e" + id;
  e.body = std::move(body);
  e.group_id = std::move(group);
  e.deduplication_id = "event-" + id;
  e.attributes = {{"id", "String", "event-" + id}, {"type", "String", "OrderPlaced"}};
  return e;
}

TEST_F(SqsMoto, QueueAttributesSayFifoDeduplicationAndMaximumSize) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto fifo = create_queue(client, unique_name("attrs") + ".fifo",
                                 {{"FifoQueue", "true"}, {"MaximumMessageSize", "2048"}});
  const auto a = attributes(client, fifo);
  ASSERT_FALSE(a.error) << a.error->message;
  EXPECT_TRUE(a.attributes.fifo);
  EXPECT_FALSE(a.attributes.content_based_deduplication);
  EXPECT_EQ(a.attributes.maximum_message_size, 2048u);

  const auto standard =
      create_queue(client, unique_name("attrs"), {{"MaximumMessageSize", "262144"}});
  const auto b = attributes(client, standard);
  ASSERT_FALSE(b.error) << b.error->message;
  EXPECT_FALSE(b.attributes.fifo);
  EXPECT_EQ(b.attributes.maximum_message_size, 262'144u);

  // SQS's largest since 2025, 1 MiB, which moto takes too; one byte more it refuses.
  const auto mib = create_queue(client, unique_name("attrs"), {{"MaximumMessageSize", "1048576"}});
  const auto one_mib = attributes(client, mib);
  ASSERT_FALSE(one_mib.error) << one_mib.error->message;
  EXPECT_EQ(one_mib.attributes.maximum_message_size, 1'048'576u);
  EXPECT_THROW(create_queue(client, unique_name("attrs"), {{"MaximumMessageSize", "1048577"}}),
               std::runtime_error);

  const auto cbd = create_queue(client, unique_name("cbd") + ".fifo",
                                {{"FifoQueue", "true"}, {"ContentBasedDeduplication", "true"}});
  const auto c = attributes(client, cbd);
  ASSERT_FALSE(c.error) << c.error->message;
  EXPECT_TRUE(c.attributes.content_based_deduplication);
}

TEST_F(SqsMoto, AFifoBatchIsReadBackInOrderPerGroupWithItsAttributes) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto url = create_queue(client, unique_name("order") + ".fifo", {{"FifoQueue", "true"}});
  std::vector<aws::SqsSendEntry> entries;
  const char* groups[] = {"order-1", "order-2", "order-3"};
  for (int i = 0; i < 10; ++i) {
    // JSON with quotes, a line break and non-ASCII text: carried as the body, byte for byte.
    entries.push_back(event(std::to_string(i), groups[i % 3],
                            "{\"n\":" + std::to_string(i) + ",\"t\":\"caf\xc3\xa9\\n\"}"));
  }
  entries[4].attributes.push_back({"raw", "Binary", std::string("\x00\x01\xff", 3)});
  auto result = send(client, url, entries);
  ASSERT_FALSE(result.error) << result.error->message;
  ASSERT_EQ(result.successful.size(), 10u);
  EXPECT_TRUE(result.failed.empty());
  for (const auto& s : result.successful) {
    EXPECT_FALSE(s.message_id.empty());
    EXPECT_FALSE(s.sequence_number.empty()) << "a FIFO queue numbers its messages";
  }

  const auto received = receive(client, url, 10);
  ASSERT_EQ(received.size(), 10u);
  std::map<std::string, std::vector<std::string>> by_group;
  for (const auto& r : received) {
    by_group[r.group_id].push_back(r.deduplication_id);
    const std::string n = r.deduplication_id.substr(6);
    EXPECT_EQ(r.body, "{\"n\":" + n + ",\"t\":\"caf\xc3\xa9\\n\"}");
    EXPECT_EQ(r.attributes.at("id"), r.deduplication_id);
    EXPECT_EQ(r.attributes.at("type"), "OrderPlaced");
    if (n == "4") {
      EXPECT_EQ(r.attributes.at("raw"), aws::base64(std::string("\x00\x01\xff", 3)));
    }
  }
  EXPECT_EQ(by_group["order-1"],
            (std::vector<std::string>{"event-0", "event-3", "event-6", "event-9"}));
  EXPECT_EQ(by_group["order-2"], (std::vector<std::string>{"event-1", "event-4", "event-7"}));
  EXPECT_EQ(by_group["order-3"], (std::vector<std::string>{"event-2", "event-5", "event-8"}));
}

TEST_F(SqsMoto, AResendWithinTheDeduplicationIntervalIsDropped) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto url = create_queue(client, unique_name("dedup") + ".fifo", {{"FifoQueue", "true"}});
  std::vector<aws::SqsSendEntry> entries;
  for (int i = 0; i < 5; ++i)
    entries.push_back(event(std::to_string(i), "g", "v" + std::to_string(i)));
  auto first = send(client, url, entries);
  ASSERT_FALSE(first.error) << first.error->message;
  ASSERT_EQ(first.successful.size(), 5u);
  // The relay sending again what it had sent before a crash: accepted, and dropped by the queue.
  auto again = send(client, url, entries);
  ASSERT_FALSE(again.error) << again.error->message;
  EXPECT_EQ(again.successful.size(), 5u);
  const auto received = receive(client, url, 5, std::chrono::milliseconds(500));
  ASSERT_EQ(received.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(received[i].body, "v" + std::to_string(i));
}

TEST_F(SqsMoto, AnEntryOverTheQueueLimitIsRefusedAloneTheOthersLand) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto url = create_queue(client, unique_name("size") + ".fifo",
                                {{"FifoQueue", "true"}, {"MaximumMessageSize", "1024"}});
  const auto limit = attributes(client, url);
  ASSERT_FALSE(limit.error) << limit.error->message;
  std::vector<aws::SqsSendEntry> entries = {event("0", "g", "small-0"),
                                            event("1", "g", std::string(1500, 'x')),
                                            event("2", "g", "small-2")};
  auto result = send(client, url, entries, limit.attributes.maximum_message_size);
  ASSERT_FALSE(result.error) << result.error->message;
  ASSERT_EQ(result.failed.size(), 1u);
  EXPECT_EQ(result.failed[0].id, "e1");
  EXPECT_EQ(result.failed[0].kind, aws::FailureKind::kFinal);
  EXPECT_EQ(result.failed[0].code, "MessageTooLong");
  EXPECT_EQ(result.successful.size(), 2u);
  const auto received = receive(client, url, 2, std::chrono::milliseconds(300));
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].body, "small-0");
  EXPECT_EQ(received[1].body, "small-2");

  // Without the queue's limit, moto refuses the whole batch (an invalid request: final).
  auto whole = send(client, url, entries, 0);
  ASSERT_TRUE(whole.error);
  EXPECT_EQ(whole.error->kind, aws::FailureKind::kFinal) << whole.error->message;
  EXPECT_EQ(whole.error->code, "InvalidParameterValue") << whole.error->message;
}

TEST_F(SqsMoto, AnEntryTheServiceRefusesFailsAloneTheOthersLand) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto url = create_queue(client, unique_name("delay"), {});
  std::vector<aws::SqsSendEntry> entries = {event("0", "", "a"), event("1", "", "b"),
                                            event("2", "", "c")};
  for (auto& e : entries) e.deduplication_id.clear();
  entries[1].delay_seconds = 1000;  // over SQS's 900: refused by the service, per entry
  auto result = send(client, url, entries);
  ASSERT_FALSE(result.error) << result.error->message;
  ASSERT_EQ(result.failed.size(), 1u);
  EXPECT_EQ(result.failed[0].id, "e1");
  EXPECT_TRUE(result.failed[0].sender_fault);
  EXPECT_EQ(result.failed[0].kind, aws::FailureKind::kFinal);
  EXPECT_EQ(result.failed[0].code, "InvalidParameterValue");
  EXPECT_EQ(result.successful.size(), 2u);
  EXPECT_EQ(receive(client, url, 2, std::chrono::milliseconds(300)).size(), 2u);
}

TEST_F(SqsMoto, AWrongSecretIsRefusedNamingTheSourceNotTheSecret) {
  aws::SqsClient good(io_.get_executor(), config());
  const auto url = create_queue(good, unique_name("auth") + ".fifo", {{"FifoQueue", "true"}});
  aws::SqsClient bad(io_.get_executor(), config("x"));
  const auto a = attributes(bad, url);
  ASSERT_TRUE(a.error);
  EXPECT_EQ(a.error->kind, aws::FailureKind::kClient) << a.error->message;
  EXPECT_EQ(a.error->code, "SignatureDoesNotMatch") << a.error->message;
  EXPECT_NE(a.error->message.find(kSource), std::string::npos) << a.error->message;
  EXPECT_NE(a.error->message.find(moto().access_key_id.substr(moto().access_key_id.size() - 4)),
            std::string::npos)
      << a.error->message;
  EXPECT_EQ(a.error->message.find(moto().secret_access_key), std::string::npos);
  EXPECT_EQ(a.error->message.find(moto().secret_access_key.substr(0, 8)), std::string::npos);

  auto b = send(bad, url, {event("0", "g", "never")});
  ASSERT_TRUE(b.error);
  EXPECT_EQ(b.error->kind, aws::FailureKind::kClient) << b.error->message;
  EXPECT_TRUE(b.successful.empty());
  EXPECT_EQ(b.error->message.find(moto().secret_access_key), std::string::npos);
  EXPECT_EQ(receive(good, url, 0, std::chrono::milliseconds(300)).size(), 0u);

  // A key moto's IAM does not know.
  auto unknown = config();
  unknown.credentials.credentials.access_key_id = "AKIAUNKNOWNKEY000000";
  aws::SqsClient stranger(io_.get_executor(), unknown);
  const auto c = attributes(stranger, url);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->kind, aws::FailureKind::kClient) << c.error->message;
  EXPECT_NE(c.error->message.find(kSource), std::string::npos) << c.error->message;
}

TEST_F(SqsMoto, AQueueThatDoesNotExistIsFinal) {
  aws::SqsClient client(io_.get_executor(), config());
  const auto a = attributes(client, moto().endpoint + "/123456789012/no-such-queue");
  ASSERT_TRUE(a.error);
  EXPECT_EQ(a.error->kind, aws::FailureKind::kFinal) << a.error->message;
  EXPECT_NE(a.error->code.find("NonExistentQueue") == std::string::npos &&
                a.error->code.find("QueueDoesNotExist") == std::string::npos,
            true)
      << a.error->code;
}

TEST_F(SqsMoto, ParallelBatchesThroughput) {
  // moto's server (werkzeug) closes every connection after its answer and, with authentication
  // on, evaluates IAM policies in Python: slow (a FIFO batch took 0.36 s from boto3 alone), and
  // 8 calls at once wedged it (boto3's too). So 2 at once: this checks the parallel path, not
  // SQS's throughput.
  auto c = config();
  c.http.max_connections = 2;
  aws::SqsClient client(io_.get_executor(), c);
  const auto url = create_queue(client, unique_name("load") + ".fifo", {{"FifoQueue", "true"}});
  const std::size_t opened_before = client.http().connections_opened();

  constexpr int kBatches = 20;
  int answered = 0;
  int ok = 0;
  std::size_t most_pending = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int b = 0; b < kBatches; ++b) {
    std::vector<aws::SqsSendEntry> entries;
    for (int i = 0; i < 10; ++i) {
      const std::string n = std::to_string(b * 10 + i);
      entries.push_back(event(n, "g" + std::to_string(i), std::string(200, 'p')));
    }
    client.send_message_batch(url, std::move(entries), 0, [&](aws::SqsBatchResult r) {
      ++answered;
      if (!r.error && r.successful.size() == 10) ++ok;
      if (r.error) ADD_FAILURE() << r.error->message;
    });
    most_pending = std::max(most_pending, client.pending());
  }
  io_.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (answered < kBatches && std::chrono::steady_clock::now() < deadline) {
    io_.run_one_for(std::chrono::milliseconds(50));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(answered, kBatches);
  EXPECT_EQ(ok, kBatches);
  EXPECT_EQ(most_pending, static_cast<std::size_t>(kBatches));
  const std::size_t opened = client.http().connections_opened() - opened_before;
  EXPECT_EQ(opened, static_cast<std::size_t>(kBatches)) << "moto closes every connection";
  std::printf(
      "SendMessageBatch against moto, 2 at once: %d calls of 10 in %.2f s: %.1f calls/s, "
      "%.0f messages/s\n",
      kBatches, seconds, kBatches / seconds, kBatches * 10 / seconds);
  EXPECT_EQ(
      receive(client, url, kBatches * 10, std::chrono::milliseconds(0), std::chrono::seconds(90))
          .size(),
      static_cast<std::size_t>(kBatches * 10));
}

TEST_F(SqsMoto, ATransportFailureIsRetryable) {
  // A port nobody listens on.
  boost::asio::ip::tcp::acceptor probe(io_, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto closed_port = probe.local_endpoint().port();
  probe.close();
  auto c = config();
  c.endpoint_url = "http://127.0.0.1:" + std::to_string(closed_port);
  aws::SqsClient refused(io_.get_executor(), c);
  const auto a = attributes(refused, c.endpoint_url + "/1/q");
  ASSERT_TRUE(a.error);
  EXPECT_EQ(a.error->kind, aws::FailureKind::kRetryable) << a.error->message;
  EXPECT_EQ(a.error->code, "Transport");

  // A server that accepts and never answers: the request's deadline.
  boost::asio::ip::tcp::acceptor silent(io_, {boost::asio::ip::make_address("127.0.0.1"), 0});
  boost::asio::ip::tcp::socket peer(io_);
  silent.async_accept(peer, [](boost::system::error_code) {});
  c.endpoint_url = "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port());
  c.http.request_timeout = std::chrono::milliseconds(300);
  aws::SqsClient frozen(io_.get_executor(), c);
  const auto t0 = std::chrono::steady_clock::now();
  const auto b = attributes(frozen, c.endpoint_url + "/1/q");
  ASSERT_TRUE(b.error);
  EXPECT_EQ(b.error->kind, aws::FailureKind::kRetryable) << b.error->message;
  EXPECT_NE(b.error->message.find("no response within 300 ms"), std::string::npos)
      << b.error->message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST_F(SqsMoto, EventBridgePutEventsReachesARuleWithAnSqsTarget) {
  aws::SqsClient sqs(io_.get_executor(), config());
  const auto url = create_queue(sqs, unique_name("events"), {});
  std::string arn_request = "{\"QueueUrl\":";
  aws::append_json_string(arn_request, url);
  arn_request += ",\"AttributeNames\":[\"QueueArn\"]}";
  const auto arn_answer = call(sqs, "GetQueueAttributes", std::move(arn_request));
  ASSERT_FALSE(arn_answer.error) << arn_answer.error->message;
  simdjson::dom::parser parser;
  const std::string queue_arn(
      std::string_view(parser.parse(arn_answer.body)["Attributes"]["QueueArn"]));

  const auto base = config();
  aws::EventBridgeConfig c{base.endpoint_url, base.region, base.credentials, base.http, nullptr};
  aws::EventBridgeClient events(io_.get_executor(), c);
  auto events_call = [&](const std::string& action, std::string body) {
    auto r = await_result<aws::EventBridgeCallResult>(
        io_, [&](std::function<void(aws::EventBridgeCallResult)> done) {
          events.call(action, std::move(body), std::move(done));
        });
    if (!r) throw std::runtime_error(action + ": no answer in time");
    if (r->error) throw std::runtime_error(action + ": " + r->error->message);
    return r->body;
  };
  const std::string bus = unique_name("outbox-bus");
  events_call("CreateEventBus", "{\"Name\":\"" + bus + "\"}");
  events_call("PutRule", "{\"Name\":\"to-queue\",\"EventBusName\":\"" + bus +
                             "\",\"EventPattern\":\"{\\\"source\\\":[\\\"outbox.orders\\\"]}\"}");
  std::string targets = "{\"Rule\":\"to-queue\",\"EventBusName\":\"" + bus +
                        "\",\"Targets\":[{\"Id\":\"queue\",\"Arn\":";
  aws::append_json_string(targets, queue_arn);
  targets += "}]}";
  events_call("PutTargets", std::move(targets));

  std::vector<aws::PutEventsEntry> entries;
  for (int i = 0; i < 3; ++i) {
    entries.push_back({"outbox.orders",
                       "OrderPlaced",
                       "{\"id\":\"event-" + std::to_string(i) +
                           "\",\"payload\":{\"n\":" + std::to_string(i) + "}}",
                       bus,
                       {}});
  }
  entries.push_back({"someone.else", "Other", "{}", bus, {}});  // no rule matches: taken, dropped
  auto result =
      await_result<aws::PutEventsResult>(io_, [&](std::function<void(aws::PutEventsResult)> done) {
        events.put_events(entries, std::move(done));
      });
  ASSERT_TRUE(result);
  ASSERT_FALSE(result->error) << result->error->message;
  ASSERT_EQ(result->entries.size(), 4u);
  for (const auto& e : result->entries) EXPECT_TRUE(e.ok()) << e.error_code << e.error_message;

  const auto received = receive(sqs, url, 3, std::chrono::milliseconds(300));
  ASSERT_EQ(received.size(), 3u);
  std::set<std::string> ids;
  for (const auto& r : received) {
    simdjson::dom::parser p;
    simdjson::dom::element event = p.parse(r.body);
    EXPECT_EQ(std::string_view(event["source"]), "outbox.orders");
    EXPECT_EQ(std::string_view(event["detail-type"]), "OrderPlaced");
    // The consumer's deduplication key: the outbox event id, carried in Detail.
    ids.insert(std::string(std::string_view(event["detail"]["id"])));
  }
  EXPECT_EQ(ids, (std::set<std::string>{"event-0", "event-1", "event-2"}));

  // A wrong secret: refused naming the source.
  auto bad_config = c;
  bad_config.credentials.credentials.secret_access_key += "x";
  aws::EventBridgeClient bad(io_.get_executor(), bad_config);
  auto refused =
      await_result<aws::PutEventsResult>(io_, [&](std::function<void(aws::PutEventsResult)> done) {
        bad.put_events({entries[0]}, std::move(done));
      });
  ASSERT_TRUE(refused);
  ASSERT_TRUE(refused->error);
  EXPECT_EQ(refused->error->kind, aws::FailureKind::kClient) << refused->error->message;
  EXPECT_NE(refused->error->message.find(kSource), std::string::npos) << refused->error->message;
  EXPECT_EQ(refused->error->message.find(moto().secret_access_key), std::string::npos);
}

}  // namespace
