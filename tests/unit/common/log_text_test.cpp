// quoted(): whatever a relation name, a column value or an error text holds, the log field it
// becomes is one line, valid UTF-8, a valid JSON string, and ends where its value ends.
#include "outbox/common/log_text.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox::common {
namespace {

using namespace std::string_literals;

// The text after the field: what a reader of `key=<quoted> next=1` sees past the value.
std::string rest_after_value(const std::string& field) {
  // The closing quote is the first '"' not preceded by a backslash escape.
  for (std::size_t i = 1; i < field.size(); ++i) {
    if (field[i] == '\\') {
      ++i;
    } else if (field[i] == '"') {
      return field.substr(i + 1);
    }
  }
  return "<unterminated>";
}

TEST(Quoted, PlainTextIsOnlyQuoted) { EXPECT_EQ(quoted("public.outbox"), "\"public.outbox\""); }

TEST(Quoted, QuotesAndBackslashesCannotCloseTheValue) {
  const std::string q = quoted(R"(x" evil=1 \" more=2)");
  EXPECT_EQ(q, R"("x\" evil=1 \\\" more=2")");
  EXPECT_EQ(rest_after_value(q), "");
}

TEST(Quoted, NewlinesAndOtherControlCharactersAreEscaped) {
  EXPECT_EQ(quoted("outbox\n evil=1"), R"("outbox\n evil=1")");
  EXPECT_EQ(quoted("a\rb\tc\bd\fe"), R"("a\rb\tc\bd\fe")");
  EXPECT_EQ(quoted("nul\0here"s), R"("nul\u0000here")");
  EXPECT_EQ(quoted("\x1b[31mred\x7f"), R"("\u001b[31mred\u007f")");
}

TEST(Quoted, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(quoted("a\xff"
                   "b"),
            "\"a\xEF\xBF\xBD"
            "b\"");
  EXPECT_EQ(quoted("\xC3"), "\"\xEF\xBF\xBD\"");                  // truncated sequence
  EXPECT_EQ(quoted("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");  // overlong '/'
  EXPECT_EQ(quoted("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // surrogate
  EXPECT_EQ(quoted("\xF4\x90\x80\x80"),                                           // above U+10FFFF
            "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(Quoted, ValidUtf8PassesExceptInvisibleControlsAndLineSeparators) {
  EXPECT_EQ(quoted("Bestellung \xC3\xBC \xE2\x82\xAC \xF0\x9F\x93\xA6"),
            "\"Bestellung \xC3\xBC \xE2\x82\xAC \xF0\x9F\x93\xA6\"");
  EXPECT_EQ(quoted("\xC2\x9B"
                   "2J"),
            R"("\u009b2J")");  // C1 CSI
  EXPECT_EQ(quoted("a\xE2\x80\xA8"
                   "b\xE2\x80\xA9"),
            R"("a\u2028b\u2029")");
}

TEST(AppendEscaped, ControlsOnlyKeepsQuotesAndBackslashes) {
  std::string out;
  append_escaped(out, "k=\"v\\\"\"\nx\xff", Escape::kControlsOnly);
  EXPECT_EQ(out, "k=\"v\\\"\"\\nx\xEF\xBF\xBD");
}

}  // namespace
}  // namespace outbox::common
