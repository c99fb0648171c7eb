#include "outbox/mapping/topic_template.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace outbox::mapping {
namespace {

std::string render(const TopicTemplate& t, const std::vector<std::string_view>& values) {
  std::string out = "stale content";
  t.render(values, out);
  return out;
}

// Returns the message of the std::invalid_argument the template throws, or "" if none.
std::string parse_error(std::string_view text) {
  try {
    TopicTemplate t(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TopicTemplate, DebeziumDefaultHasOneReference) {
  const TopicTemplate t("outbox.event.${aggregatetype}");
  EXPECT_EQ(t.columns(), std::vector<std::string>{"aggregatetype"});
  EXPECT_EQ(t.text(), "outbox.event.${aggregatetype}");
  EXPECT_EQ(render(t, {"Order"}), "outbox.event.Order");
}

TEST(TopicTemplate, MultipleReferencesAndLiteralsBetween) {
  const TopicTemplate t("${tenant}.events.${aggregatetype}-${tenant}.v1");
  EXPECT_EQ(t.columns(), (std::vector<std::string>{"tenant", "aggregatetype", "tenant"}));
  EXPECT_EQ(render(t, {"acme", "Order", "acme"}), "acme.events.Order-acme.v1");
}

TEST(TopicTemplate, AdjacentReferences) {
  const TopicTemplate t("${a}${b}");
  EXPECT_EQ(t.columns(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(render(t, {"x", "y"}), "xy");
}

TEST(TopicTemplate, LiteralOnly) {
  const TopicTemplate t("all-events");
  EXPECT_TRUE(t.columns().empty());
  EXPECT_EQ(render(t, {}), "all-events");
}

TEST(TopicTemplate, DollarNotFollowedByBraceIsLiteral) {
  const TopicTemplate t("$price$.${aggregatetype}$");
  EXPECT_EQ(t.columns(), std::vector<std::string>{"aggregatetype"});
  EXPECT_EQ(render(t, {"Order"}), "$price$.Order$");
}

TEST(TopicTemplate, UnterminatedReferenceNamesPositionAndTemplate) {
  const std::string message = parse_error("outbox.${aggregatetype");
  EXPECT_NE(message.find("unterminated"), std::string::npos) << message;
  EXPECT_NE(message.find("position 7"), std::string::npos) << message;
  EXPECT_NE(message.find("outbox.${aggregatetype"), std::string::npos) << message;
}

TEST(TopicTemplate, TrailingDollarBraceIsUnterminated) {
  const std::string message = parse_error("events.${");
  EXPECT_NE(message.find("unterminated"), std::string::npos) << message;
  EXPECT_NE(message.find("position 7"), std::string::npos) << message;
}

TEST(TopicTemplate, EmptyReferenceNamesPosition) {
  const std::string message = parse_error("a.${x}.${}");
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
  EXPECT_NE(message.find("position 7"), std::string::npos) << message;
  EXPECT_NE(message.find("a.${x}.${}"), std::string::npos) << message;
}

TEST(TopicTemplate, RenderReusesCapacity) {
  const TopicTemplate t("outbox.event.${aggregatetype}");
  std::string out;
  t.render({"SomeRatherLongAggregateTypeName"}, out);
  const char* const storage = out.data();
  const std::size_t capacity = out.capacity();
  t.render({"Order"}, out);
  EXPECT_EQ(out, "outbox.event.Order");
  EXPECT_EQ(out.data(), storage);
  EXPECT_EQ(out.capacity(), capacity);
}

TEST(TopicTemplate, WrongNumberOfValuesIsRejected) {
  const TopicTemplate t("${a}.${b}");
  std::string out;
  EXPECT_THROW(t.render({"only-one"}, out), std::invalid_argument);
}

}  // namespace
}  // namespace outbox::mapping
