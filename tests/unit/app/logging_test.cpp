// Log lines: JSON lines carry ts, level, logger, slot and the message's fields; hot-path warnings
// are rate-limited per event with a count of what was suppressed.
#include "outbox/app/logging.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <vector>

#include "outbox/common/log_text.hpp"

namespace outbox::app {
namespace {

using namespace std::chrono_literals;

TEST(JsonLog, FieldsSlotAndWholeMessage) {
  const auto t = std::chrono::system_clock::time_point(1'700'000'000'123ms);
  std::string line = format_json_line(t, spdlog::level::warn, "relay", "s1",
                                      "event=reconnect slot=s1 attempt=3 in_ms=400 reason=" +
                                          common::quoted("could not \\ connect: \"x\""));
  EXPECT_EQ(line,
            "{\"ts\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warning\",\"logger\":\"relay\","
            "\"slot\":\"s1\",\"event\":\"reconnect\",\"attempt\":3,\"in_ms\":400,"
            "\"reason\":\"could not \\\\ connect: \\\"x\\\"\","
            "\"msg\":\"event=reconnect slot=s1 attempt=3 in_ms=400 reason=\\\"could not \\\\\\\\ "
            "connect: \\\\\\\"x\\\\\\\"\\\"\"}");
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

TEST(JsonLog, QuotedValueEndsAtItsFirstUnescapedQuote) {
  std::string line =
      format_json_line({}, spdlog::level::info, "relay", "s",
                       "event=standby slot=s reason=" +
                           common::quoted("ERROR:  replication slot \"s\" is active for PID 1") +
                           ": waiting to take over");
  EXPECT_NE(line.find("\"reason\":\"ERROR:  replication slot \\\"s\\\" is active for PID 1\","),
            std::string::npos)
      << line;
  // Written without quoted(): the value ends at the first quote, the rest is sentence text.
  line = format_json_line({}, spdlog::level::info, "relay", "s", "event=x a=\"one \"two b=2");
  EXPECT_NE(line.find("\"a\":\"one \",\"b\":2"), std::string::npos) << line;
}

TEST(JsonLog, ControlCharactersAreEscaped) {
  // A JSON line's values are written as common::quoted() writes them.
  EXPECT_EQ(common::quoted("a\x01\tb\n"), "\"a\\u0001\\tb\\n\"");
  EXPECT_EQ(common::quoted("bad\xff"), "\"bad\xEF\xBF\xBD\"");
  const std::string line =
      format_json_line({}, spdlog::level::info, "relay", "s", "event=x a=\"\\u0001\"");
  EXPECT_NE(line.find("\"a\":\"\\u0001\""), std::string::npos) << line;
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

// What a hostile outbox can put into a logged name or value.
const std::vector<std::string>& hostile_values() {
  using namespace std::string_literals;
  static const std::vector<std::string> v = {
      "outbox\n evil=1",                                        // a table name with a newline
      "x\" evil=1 level=error",                                 // closes the quotes, adds fields
      "\"\n{\"level\":\"error\"}",                              // a forged JSON line
      "bad\xff\xfe utf8 \xC3\x28 \xE2\x82 \xED\xA0\x80",        // invalid UTF-8
      "nul\0inside"s,                                           // a NUL
      "trailing backslash \\",                                  // would escape the closing quote
      "\\u0022 evil=1",                                         // an escape written as text
      "cr\rtab\tesc\x1b[2Jdel\x7f c1\xC2\x9b sep\xE2\x80\xA8",  // other control characters
  };
  return v;
}

// The object of a JSON line, or a test failure naming the line.
simdjson::dom::object parse_json(simdjson::dom::parser& parser, const std::string& line) {
  auto doc = parser.parse(line);
  EXPECT_EQ(doc.error(), simdjson::SUCCESS) << "not JSON: " << line;
  simdjson::dom::object o;
  EXPECT_EQ(doc.get_object().get(o), simdjson::SUCCESS) << "not an object: " << line;
  return o;
}

std::vector<std::string_view> keys_of(simdjson::dom::object o) {
  std::vector<std::string_view> keys;
  for (auto field : o) keys.push_back(field.key);
  return keys;
}

TEST(JsonLog, HostileQuotedValueStaysOneFieldWithItsTextReadBack) {
  simdjson::dom::parser parser;
  for (const std::string& v : hostile_values()) {
    const std::string message =
        "event=skipping slot=s reason=other_table table=" + common::quoted(v) + " relid=7";
    const std::string line = format_json_line({}, spdlog::level::info, "relay", "s", message);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    auto o = parse_json(parser, line);
    EXPECT_EQ(keys_of(o), (std::vector<std::string_view>{"ts", "level", "logger", "slot", "event",
                                                         "reason", "table", "relid", "msg"}))
        << line;
    EXPECT_EQ(std::string_view(o["level"]), "info") << line;
    EXPECT_EQ(int64_t(o["relid"]), 7) << line;
    // The value as logged: the original where it was valid UTF-8, each bad byte as U+FFFD.
    std::string expected;
    common::append_escaped(expected, v, common::Escape::kAll);
    EXPECT_EQ(common::quoted(std::string_view(o["table"])), "\"" + expected + "\"") << line;
  }
}

TEST(JsonLog, EveryLineIsJsonWhateverTheMessageHolds) {
  // Messages that did not go through quoted(): raw text, broken escapes, unterminated quotes.
  simdjson::dom::parser parser;
  std::vector<std::string> messages;
  for (const std::string& v : hostile_values()) {
    messages.push_back("event=x table=" + v + " relid=1");
    messages.push_back("event=x error=\"" + v + "\" relid=1");
    messages.push_back(v);
  }
  messages.push_back("event=x a=\"\\ud800\\u12 \\q\" b=\"unterminated \\");
  for (const std::string& m : messages) {
    const std::string line = format_json_line({}, spdlog::level::warn, "relay", "s\n\xff", m);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    auto o = parse_json(parser, line);
    EXPECT_EQ(std::string_view(o["level"]), "warning") << line;
  }
}

// Every line a logger writes through the process's formatter, text or JSON.
std::vector<std::string> log_lines(LogFormat format, const std::vector<std::string>& messages) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  LoggingConfig config;
  config.format = format;
  config.slot = "s";
  sink->set_formatter(make_formatter(config));
  spdlog::logger log("relay", sink);
  for (const std::string& m : messages) log.warn("event=dead_lettered detail={}", m);
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(TextLog, OneLinePerMessageEvenWithoutQuoted) {
  std::vector<std::string> lines = log_lines(LogFormat::kText, hostile_values());
  ASSERT_EQ(lines.size(), hostile_values().size());
  for (const std::string& l : lines) {
    EXPECT_NE(l.find(" warning relay slot=s event=dead_lettered detail="), std::string::npos) << l;
    EXPECT_EQ(l.find('\r'), std::string::npos) << l;
    EXPECT_EQ(l.find('\0'), std::string::npos) << l;
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
    EXPECT_EQ(l.find('\xff'), std::string::npos) << l;
  }
  EXPECT_NE(lines[0].find("detail=outbox\\n evil=1"), std::string::npos) << lines[0];
}

TEST(TextLog, SlotInsideAQuotedValueDoesNotHideTheSlot) {
  std::vector<std::string> lines = log_lines(LogFormat::kText, {common::quoted("slot=evil")});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" relay slot=s event=dead_lettered detail=\"slot=evil\""),
            std::string::npos)
      << lines[0];
}

TEST(TextLog, QuotedValuesAreWrittenAsQuoted) {
  std::vector<std::string> quoted_values;
  for (const std::string& v : hostile_values()) quoted_values.push_back(common::quoted(v));
  std::vector<std::string> lines = log_lines(LogFormat::kText, quoted_values);
  ASSERT_EQ(lines.size(), quoted_values.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_TRUE(lines[i].ends_with("detail=" + quoted_values[i])) << lines[i];
  }
}

TEST(JsonLog, OneParsableLinePerMessageThroughTheLogger) {
  std::vector<std::string> messages = hostile_values();
  for (const std::string& v : hostile_values()) messages.push_back(common::quoted(v));
  std::vector<std::string> lines = log_lines(LogFormat::kJson, messages);
  ASSERT_EQ(lines.size(), messages.size());
  simdjson::dom::parser parser;
  for (const std::string& l : lines) {
    auto o = parse_json(parser, l);
    EXPECT_EQ(std::string_view(o["event"]), "dead_lettered") << l;
  }
}

}  // namespace
}  // namespace outbox::app
