// Topic templates such as "outbox.event.${aggregatetype}": literal text with ${column} references
// resolved against the row. Compiled once; rendering is allocation-free after warm-up.
// Thread-compatible: const methods may run concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace outbox::mapping {

class TopicTemplate {
 public:
  // Throws std::invalid_argument naming the position of an unterminated "${" or empty "${}".
  explicit TopicTemplate(std::string_view text);

  // Column names referenced, in order of appearance (may repeat).
  const std::vector<std::string>& columns() const { return columns_; }
  const std::string& text() const { return text_; }

  // Appends literals and values[i] for the i-th reference to `out` (cleared first).
  void render(const std::vector<std::string_view>& values, std::string& out) const;

 private:
  std::string text_;
  std::vector<std::string> literals_;  // literals_.size() == columns_.size() + 1
  std::vector<std::string> columns_;
};

}  // namespace outbox::mapping
