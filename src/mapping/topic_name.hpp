// Private to src/mapping: Kafka's rule for a topic name (kafka.common.internals.Topic), which a
// rendered topic template must obey, for rows and messages alike. Changes with that rule only.
#pragma once

#include <string>
#include <string_view>

namespace outbox::mapping {

// One of [a-zA-Z0-9._-].
bool is_topic_char(char c);

// 1 to 249 of [a-zA-Z0-9._-], not "." or "..".
bool is_valid_topic(std::string_view topic);

// The reason a MapError gives for `topic`, rendered from template `template_text`, when
// is_valid_topic() refuses it.
std::string invalid_topic_reason(std::string_view topic, std::string_view template_text);

}  // namespace outbox::mapping
