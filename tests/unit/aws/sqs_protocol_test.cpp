// The JSON of AWS's JSON protocol and SQS's bodies, without a server: strings escaped, batches
// built and read back, answers parsed (per-entry results, attributes, unreadable answers), error
// answers in JSON and in XML, the classification, and secrets kept out of error messages.
#include "aws/sqs_protocol.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include "aws/eventbridge_protocol.hpp"
#include "aws/json_protocol.hpp"

namespace {

namespace aws = outbox::aws;

std::string json(std::string_view text) {
  std::string out;
  aws::append_json_string(out, text);
  return out;
}

TEST(JsonProtocol, StringsAreEscapedAndValidUtf8) {
  EXPECT_EQ(json("plain"), "\"plain\"");
  EXPECT_EQ(json("q\"b\\n\nr\rt\t"), "\"q\\\"b\\\\n\\nr\\rt\\t\"");
  EXPECT_EQ(json(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(json(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong form, a surrogate.
  EXPECT_EQ(json("a\x80z"), "\"a\\ufffdz\"");
  EXPECT_EQ(json("a\xc3"), "\"a\\ufffd\"");
  EXPECT_EQ(json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
}

TEST(JsonProtocol, Base64) {
  EXPECT_EQ(aws::base64(""), "");
  EXPECT_EQ(aws::base64("f"), "Zg==");
  EXPECT_EQ(aws::base64("fo"), "Zm8=");
  EXPECT_EQ(aws::base64("foo"), "Zm9v");
  EXPECT_EQ(aws::base64(std::string("\x00\x01\xff", 3)), "AAH/");
}

TEST(JsonProtocol, ErrorAnswersInJsonAndXml) {
  auto a = aws::read_error_answer(
      R"({"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."})",
      "AWS.SimpleQueueService.NonExistentQueue;Sender");
  EXPECT_EQ(a.code, "QueueDoesNotExist");
  EXPECT_EQ(a.message, "The specified queue does not exist.");

  auto b =
      aws::read_error_answer(R"({"__type":"ThrottlingException","Message":"Rate exceeded"})", "");
  EXPECT_EQ(b.code, "ThrottlingException");
  EXPECT_EQ(b.message, "Rate exceeded");

  // moto's authentication answers the query protocol's XML even to a JSON request.
  auto c = aws::read_error_answer(
      "<?xml version=\"1.0\"?>\n<ErrorResponse><Error><Type>Sender</Type>"
      "<Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not "
      "match &amp; &lt;check&gt;.\nMore</Message></Error><RequestId>x</RequestId></ErrorResponse>",
      "");
  EXPECT_EQ(c.code, "SignatureDoesNotMatch");
  EXPECT_EQ(c.message, "The request signature we calculated does not match & <check>. More");

  auto d = aws::read_error_answer("", "AWS.SimpleQueueService.NonExistentQueue;Sender");
  EXPECT_EQ(d.code, "AWS.SimpleQueueService.NonExistentQueue");
  auto e = aws::read_error_answer("<html>Bad Gateway</html>", "");
  EXPECT_EQ(e.code, "");
  auto f = aws::read_error_answer("{not json", "");
  EXPECT_EQ(f.code, "");
}

TEST(JsonProtocol, Classification) {
  using K = aws::FailureKind;
  EXPECT_EQ(aws::classify("ThrottlingException", 400), K::kRetryable);
  EXPECT_EQ(aws::classify("RequestThrottled", 403), K::kRetryable);
  EXPECT_EQ(aws::classify("InternalError", 500), K::kRetryable);
  EXPECT_EQ(aws::classify("", 503), K::kRetryable);
  EXPECT_EQ(aws::classify("", 429), K::kRetryable);
  EXPECT_EQ(aws::classify("", 0), K::kRetryable);
  EXPECT_EQ(aws::classify("SignatureDoesNotMatch", 403), K::kClient);
  EXPECT_EQ(aws::classify("InvalidClientTokenId", 403), K::kClient);
  EXPECT_EQ(aws::classify("UnrecognizedClientException", 400), K::kClient);
  EXPECT_EQ(aws::classify("AccessDeniedException", 400), K::kClient);
  EXPECT_EQ(aws::classify("", 403), K::kClient);
  EXPECT_EQ(aws::classify("InvalidParameterValue", 400), K::kFinal);
  EXPECT_EQ(aws::classify("QueueDoesNotExist", 400), K::kFinal);
  EXPECT_EQ(aws::classify("BatchRequestTooLong", 400), K::kFinal);
}

TEST(JsonProtocol, ARefusedSignatureNamesTheSourceNeverTheSecret) {
  aws::ResolvedCredentials credentials;
  credentials.credentials = {"AKIDEXAMPLE12345678", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  credentials.source = "environment";
  aws::HttpResponse response;
  response.status = 403;
  // A server that echoes what it got (some print the string to sign): the secret is scrubbed.
  response.body =
      "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>bad: "
      "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY</Message></Error></ErrorResponse>";
  const auto error = aws::service_error({"SQS", "sqs", "AmazonSQS", "application/x-amz-json-1.0"},
                                        "http://127.0.0.1:1", credentials, response);
  EXPECT_EQ(error.kind, aws::FailureKind::kClient);
  EXPECT_EQ(error.code, "SignatureDoesNotMatch");
  EXPECT_EQ(error.http_status, 403);
  EXPECT_NE(error.message.find("environment"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("5678"), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find("wJalrXUtnFEMI"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("SQS at http://127.0.0.1:1 refused the credentials"),
            std::string::npos)
      << error.message;

  aws::HttpResponse lost;
  lost.error = "http://127.0.0.1:1: Connection refused";
  const auto transport =
      aws::service_error({"SQS", "sqs", "AmazonSQS", "x"}, "", credentials, lost);
  EXPECT_EQ(transport.kind, aws::FailureKind::kRetryable);
  EXPECT_EQ(transport.code, "Transport");
  EXPECT_EQ(transport.http_status, 0);
}

aws::SqsSendEntry entry(std::string id, std::string body) {
  aws::SqsSendEntry e;
  e.id = std::move(id);
  e.body = std::move(body);
  return e;
}

TEST(SqsProtocol, ABatchIsBuiltAsSqsReadsIt) {
  std::vector<aws::SqsSendEntry> entries = {entry("e0", "{\"a\":\"\\\"x\\\"\"}"),
                                            entry("e1", "plain")};
  entries[0].group_id = "order-1";
  entries[0].deduplication_id = "id-0";
  entries[0].attributes = {{"id", "String", "id-0"}, {"raw", "Binary", std::string("\x00\xff", 2)}};
  entries[1].delay_seconds = 5;
  const std::string body = aws::build_send_message_batch("https://q/1/x.fifo", entries);
  EXPECT_EQ(
      body,
      R"({"QueueUrl":"https://q/1/x.fifo","Entries":[{"Id":"e0","MessageBody":"{\"a\":\"\\\"x\\\"\"}",)"
      R"("MessageGroupId":"order-1","MessageDeduplicationId":"id-0","MessageAttributes":{)"
      R"("id":{"DataType":"String","StringValue":"id-0"},"raw":{"DataType":"Binary","BinaryValue":"AP8="}}},)"
      R"({"Id":"e1","MessageBody":"plain","DelaySeconds":5}]})");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(body).get(doc), simdjson::SUCCESS);
  EXPECT_EQ(std::string_view(doc["Entries"].at(0)["MessageBody"]), entries[0].body);

  EXPECT_EQ(
      aws::build_get_queue_attributes("u"),
      R"({"QueueUrl":"u","AttributeNames":["FifoQueue","ContentBasedDeduplication","MaximumMessageSize"]})");
}

TEST(SqsProtocol, BatchesSqsWouldRefuseWholeAreRefusedHere) {
  EXPECT_THROW(aws::check_batch({}), std::invalid_argument);
  std::vector<aws::SqsSendEntry> eleven;
  for (int i = 0; i < 11; ++i) eleven.push_back(entry("e" + std::to_string(i), "x"));
  EXPECT_THROW(aws::check_batch(eleven), std::invalid_argument);
  eleven.pop_back();
  EXPECT_NO_THROW(aws::check_batch(eleven));
  EXPECT_THROW(aws::check_batch({entry("a", "x"), entry("a", "y")}), std::invalid_argument);
  EXPECT_THROW(aws::check_batch({entry("bad id", "x")}), std::invalid_argument);
  EXPECT_THROW(aws::check_batch({entry(std::string(81, 'a'), "x")}), std::invalid_argument);
  // SendMessageBatch's 1 MiB per call (since 2025; 256 KiB before).
  EXPECT_NO_THROW(aws::check_batch(
      {entry("a", std::string(600'000, 'x')), entry("b", std::string(448'000, 'x'))}));
  EXPECT_THROW(aws::check_batch(
                   {entry("a", std::string(600'000, 'x')), entry("b", std::string(449'000, 'x'))}),
               std::invalid_argument);
  auto many = entry("a", "x");
  for (int i = 0; i < 11; ++i) many.attributes.push_back({"n" + std::to_string(i), "String", "v"});
  EXPECT_THROW(aws::check_batch({many}), std::invalid_argument);
  // Size counts the attributes: name, type and value.
  auto sized = entry("a", "12345");
  sized.attributes = {{"id", "String", "abc"}};
  EXPECT_EQ(aws::message_size(sized), 5u + 2 + 6 + 3);
}

TEST(SqsProtocol, PerEntryResultsAreRead) {
  const std::vector<aws::SqsSendEntry> sent = {entry("e0", "a"), entry("e1", "b"),
                                               entry("e2", "c")};
  const auto result = aws::parse_send_message_batch(
      R"({"Successful":[{"Id":"e0","MessageId":"m0","MD5OfMessageBody":"x","SequenceNumber":"18"}],)"
      R"("Failed":[{"Id":"e1","SenderFault":true,"Code":"InvalidParameterValue","Message":"too big"},)"
      R"({"Id":"e2","SenderFault":false,"Code":"InternalError","Message":"later"}]})",
      sent);
  ASSERT_FALSE(result.error);
  ASSERT_EQ(result.successful.size(), 1u);
  EXPECT_EQ(result.successful[0].id, "e0");
  EXPECT_EQ(result.successful[0].message_id, "m0");
  EXPECT_EQ(result.successful[0].sequence_number, "18");
  ASSERT_EQ(result.failed.size(), 2u);
  EXPECT_EQ(result.failed[0].kind, aws::FailureKind::kFinal);
  EXPECT_EQ(result.failed[0].code, "InvalidParameterValue");
  EXPECT_EQ(result.failed[0].message, "too big");
  EXPECT_EQ(result.failed[1].kind, aws::FailureKind::kRetryable);
  EXPECT_FALSE(result.failed[1].sender_fault);

  // A throttled entry is retryable even as the sender's fault.
  const auto throttled = aws::parse_send_message_batch(
      R"({"Failed":[{"Id":"e0","SenderFault":true,"Code":"ThrottlingException"}]})",
      {entry("e0", "a")});
  ASSERT_FALSE(throttled.error);
  EXPECT_EQ(throttled.failed.at(0).kind, aws::FailureKind::kRetryable);
}

TEST(SqsProtocol, UnreadableOrIncompleteAnswersAreRetryable) {
  const std::vector<aws::SqsSendEntry> sent = {entry("e0", "a"), entry("e1", "b")};
  for (const char* body : {"", "<xml/>", "[]", R"({"Successful":[{"Id":"e0"}]})",
                           R"({"Successful":[{"MessageId":"m"}]})"}) {
    const auto r = aws::parse_send_message_batch(body, sent);
    ASSERT_TRUE(r.error) << body;
    EXPECT_EQ(r.error->kind, aws::FailureKind::kRetryable) << body;
    EXPECT_TRUE(r.successful.empty()) << body;
  }
}

TEST(SqsProtocol, QueueAttributesAreRead) {
  auto a = aws::parse_get_queue_attributes(
      R"({"Attributes":{"FifoQueue":"true","ContentBasedDeduplication":"false","MaximumMessageSize":"1024"}})");
  ASSERT_FALSE(a.error);
  EXPECT_TRUE(a.attributes.fifo);
  EXPECT_FALSE(a.attributes.content_based_deduplication);
  EXPECT_EQ(a.attributes.maximum_message_size, 1024u);
  auto b = aws::parse_get_queue_attributes(R"({"Attributes":{"MaximumMessageSize":"262144"}})");
  ASSERT_FALSE(b.error);
  EXPECT_FALSE(b.attributes.fifo);
  EXPECT_TRUE(
      aws::parse_get_queue_attributes(R"({"Attributes":{"MaximumMessageSize":"x"}})").error);
  EXPECT_TRUE(aws::parse_get_queue_attributes("{}").error);
  // What setup reports when it asks for "All".
  auto c = aws::parse_get_queue_attributes(
      R"({"Attributes":{"FifoQueue":"true","DeduplicationScope":"messageGroup","FifoThroughputLimit":"perMessageGroupId","KmsMasterKeyId":"alias/orders"}})");
  ASSERT_FALSE(c.error);
  EXPECT_EQ(c.attributes.deduplication_scope, "messageGroup");
  EXPECT_EQ(c.attributes.fifo_throughput_limit, "perMessageGroupId");
  EXPECT_EQ(c.attributes.kms_master_key_id, "alias/orders");
  EXPECT_EQ(b.attributes.kms_master_key_id, "");
}

TEST(EventBridgeProtocol, PutEventsBodyAndAnswer) {
  std::vector<aws::PutEventsEntry> entries = {
      {"outbox.orders", "OrderPlaced", R"({"id":"e1"})", "bus", {"arn:x"}},
      {"outbox.orders", "OrderPaid", "{}", "", {}}};
  EXPECT_EQ(
      aws::build_put_events(entries),
      R"({"Entries":[{"Source":"outbox.orders","DetailType":"OrderPlaced","Detail":"{\"id\":\"e1\"}",)"
      R"("EventBusName":"bus","Resources":["arn:x"]},)"
      R"({"Source":"outbox.orders","DetailType":"OrderPaid","Detail":"{}"}]})");
  EXPECT_EQ(aws::entry_size(entries[0]), 13u + 11 + 11 + 5);
  EXPECT_NO_THROW(aws::check_put_events(entries));
  EXPECT_THROW(aws::check_put_events({}), std::invalid_argument);
  EXPECT_THROW(aws::check_put_events({{"s", "t", "", "", {}}}), std::invalid_argument);
  EXPECT_THROW(aws::check_put_events(std::vector<aws::PutEventsEntry>(11, entries[1])),
               std::invalid_argument);
  EXPECT_THROW(aws::check_put_events({{"s", "t", std::string(262'144, 'x'), "", {}}}),
               std::invalid_argument);

  const auto r = aws::parse_put_events(
      R"({"FailedEntryCount":2,"Entries":[{"EventId":"a"},{"ErrorCode":"MalformedDetail","ErrorMessage":"not JSON"},)"
      R"({"ErrorCode":"ThrottlingException","ErrorMessage":"slow down"}]})",
      3);
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_TRUE(r.entries[0].ok());
  EXPECT_EQ(r.entries[0].event_id, "a");
  EXPECT_FALSE(r.entries[1].ok());
  EXPECT_EQ(r.entries[1].kind, aws::FailureKind::kFinal);
  EXPECT_EQ(r.entries[1].error_code, "MalformedDetail");
  EXPECT_EQ(r.entries[2].kind, aws::FailureKind::kRetryable);
  EXPECT_TRUE(aws::parse_put_events(R"({"Entries":[{"EventId":"a"}]})", 2).error);
  EXPECT_TRUE(aws::parse_put_events(R"({"Entries":[{}]})", 1).error);
  EXPECT_TRUE(aws::parse_put_events("nope", 1).error);
}

}  // namespace
