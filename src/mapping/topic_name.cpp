#include "topic_name.hpp"

#include <cstddef>

namespace outbox::mapping {

namespace {

constexpr std::size_t kMaxTopicLength = 249;

}  // namespace

bool is_topic_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool is_valid_topic(std::string_view topic) {
  if (topic.empty() || topic.size() > kMaxTopicLength || topic == "." || topic == "..") {
    return false;
  }
  for (const char c : topic) {
    if (!is_topic_char(c)) return false;
  }
  return true;
}

std::string invalid_topic_reason(std::string_view topic, std::string_view template_text) {
  return "renders topic \"" + std::string(topic) + "\" from template \"" +
         std::string(template_text) +
         "\", which is not a valid Kafka topic name (1 to 249 characters of [a-zA-Z0-9._-], not "
         "\".\" or \"..\")";
}

}  // namespace outbox::mapping
