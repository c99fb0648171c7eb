#include "outbox/mapping/topic_template.hpp"

#include <stdexcept>
#include <string>

namespace outbox::mapping {

namespace {

[[noreturn]] void throw_template_error(std::string_view text, std::string_view what,
                                       std::size_t position) {
  std::string message = "topic template \"";
  message += text;
  message += "\": ";
  message += what;
  message += " at position ";
  message += std::to_string(position);
  throw std::invalid_argument(message);
}

}  // namespace

TopicTemplate::TopicTemplate(std::string_view text) : text_(text) {
  std::string literal;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      const std::size_t name_begin = i + 2;
      const std::size_t close = text.find('}', name_begin);
      if (close == std::string_view::npos) {
        throw_template_error(text, "unterminated \"${\"", i);
      }
      if (close == name_begin) {
        throw_template_error(text, "empty \"${}\"", i);
      }
      literals_.push_back(std::move(literal));
      literal.clear();
      columns_.emplace_back(text.substr(name_begin, close - name_begin));
      i = close + 1;
    } else {
      // A '$' not followed by '{' is ordinary text.
      literal += text[i];
      ++i;
    }
  }
  literals_.push_back(std::move(literal));
}

void TopicTemplate::render(const std::vector<std::string_view>& values, std::string& out) const {
  if (values.size() != columns_.size()) {
    throw std::invalid_argument("topic template \"" + text_ + "\" has " +
                                std::to_string(columns_.size()) + " references but " +
                                std::to_string(values.size()) + " values were given");
  }
  out.clear();
  out += literals_[0];
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    out += values[i];
    out += literals_[i + 1];
  }
}

}  // namespace outbox::mapping
