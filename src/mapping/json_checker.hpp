// Private to src/mapping: --require-json's check of a payload, with simdjson (linked privately
// into outbox_mapping, seen by no other module). Changes with the JSON parser only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::mapping {

// Validates whole JSON documents with simdjson's DOM parser. The parser and the padded copy are
// reused, so after the largest payload has been seen no check allocates. Single-threaded.
class JsonChecker {
 public:
  JsonChecker();
  ~JsonChecker();
  JsonChecker(const JsonChecker&) = delete;
  JsonChecker& operator=(const JsonChecker&) = delete;

  // Empty when `text` is one valid JSON document, else simdjson's words for what is wrong.
  std::string_view check(std::string_view text);

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
  std::vector<char> padded_;
};

}  // namespace outbox::mapping
