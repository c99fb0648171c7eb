// Log lines: JSON lines carry ts, level, logger, slot and the message's fields; hot-path warnings
// are rate-limited per event with a count of what was suppressed.
#include "outbox/app/logging.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace outbox::app {
namespace {

using namespace std::chrono_literals;

TEST(JsonLog, FieldsSlotAndWholeMessage) {
  const auto t = std::chrono::system_clock::time_point(1'700'000'000'123ms);
  std::string line = format_json_line(
      t, spdlog::level::warn, "relay", "s1",
      "event=reconnect slot=s1 attempt=3 in_ms=400 reason=\"could not \\ connect: \"x\"\"");
  EXPECT_EQ(line,
            "{\"ts\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warning\",\"logger\":\"relay\","
            "\"slot\":\"s1\",\"event\":\"reconnect\",\"attempt\":3,\"in_ms\":400,"
            "\"reason\":\"could not \\\\ connect: \\\"x\\\"\","
            "\"msg\":\"event=reconnect slot=s1 attempt=3 in_ms=400 reason=\\\"could not \\\\ "
            "connect: \\\"x\\\"\\\"\"}");
}

TEST(JsonLog, LsnsStayStringsAndSentenceTextIsNotAField) {
  std::string line = format_json_line(
      {}, spdlog::level::info, "relay", "s",
      "event=stopped_with_unacknowledged events=5 confirmed=0/16B2: they will be sent again "
      "lag=007 ratio=0.5");
  EXPECT_NE(line.find("\"confirmed\":\"0/16B2\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"events\":5"), std::string::npos) << line;
  EXPECT_NE(line.find("\"lag\":\"007\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"ratio\":0.5"), std::string::npos) << line;
  EXPECT_EQ(line.find("\"they\""), std::string::npos) << line;
}

TEST(JsonLog, UnescapedQuotesInsideAQuotedValue) {
  std::string line = format_json_line(
      {}, spdlog::level::info, "relay", "s",
      "event=standby slot=s reason=\"ERROR:  replication slot \"s\" is active for PID 1\": "
      "waiting to take over");
  EXPECT_NE(line.find("\"reason\":\"ERROR:  replication slot \\\"s\\\" is active for PID 1\","),
            std::string::npos)
      << line;
  line = format_json_line({}, spdlog::level::info, "relay", "s",
                          "event=x a=\"one \"two\" three\" b=2");
  EXPECT_NE(line.find("\"a\":\"one \\\"two\\\" three\",\"b\":2"), std::string::npos) << line;
}

TEST(JsonLog, ControlCharactersAreEscaped) {
  EXPECT_EQ(json_string("a\x01\tb\n"), "\"a\\u0001\\tb\\n\"");
}

class RateLimit : public ::testing::Test {
 protected:
  RateLimit() {
    inner_ = std::make_shared<spdlog::sinks::ostream_sink_st>(out_);
    inner_->set_pattern("%l %v");
  }
  void warn(RateLimitedSink& sink, const std::string& text,
            spdlog::level::level_enum level = spdlog::level::warn) {
    spdlog::details::log_msg msg("relay", level, text);
    sink.log(msg);
  }
  int count(const std::string& needle) const {
    int n = 0;
    std::string s = out_.str();
    for (auto p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
    return n;
  }
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_st> inner_;
};

TEST_F(RateLimit, BurstPerEventThenCountOfSuppressed) {
  RateLimitedSink sink(inner_, 1h, 3);
  for (int i = 0; i < 10; ++i) warn(sink, "event=queue_full n=" + std::to_string(i));
  for (int i = 0; i < 2; ++i) warn(sink, "event=other n=" + std::to_string(i));
  for (int i = 0; i < 10; ++i) warn(sink, "event=fatal", spdlog::level::err);
  EXPECT_EQ(count("event=queue_full"), 3);
  EXPECT_EQ(count("event=other"), 2);
  EXPECT_EQ(count("event=fatal"), 10);  // errors always pass
  sink.report(true);
  EXPECT_EQ(count("event=warnings_suppressed key=\"queue_full\" count=7"), 1) << out_.str();
}

TEST_F(RateLimit, NewWindowLetsWarningsThroughAgain) {
  RateLimitedSink sink(inner_, 0ms, 1);
  for (int i = 0; i < 3; ++i) warn(sink, "event=queue_full");
  EXPECT_EQ(count("warning event=queue_full"), 3);
  EXPECT_EQ(count("suppressed"), 0);
}

}  // namespace
}  // namespace outbox::app
