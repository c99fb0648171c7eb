#include "json_checker.hpp"

#include <simdjson.h>

#include <cstring>

namespace outbox::mapping {

struct JsonChecker::Parser {
  simdjson::dom::parser parser;
};

JsonChecker::JsonChecker() : parser_(std::make_unique<Parser>()) {}

JsonChecker::~JsonChecker() = default;

std::string_view JsonChecker::check(std::string_view text) {
  padded_.resize(text.size() + simdjson::SIMDJSON_PADDING);
  if (!text.empty()) std::memcpy(padded_.data(), text.data(), text.size());
  std::memset(padded_.data() + text.size(), 0, simdjson::SIMDJSON_PADDING);
  const simdjson::error_code code =
      parser_->parser.parse(padded_.data(), text.size(), /*realloc_if_needed=*/false).error();
  if (code == simdjson::SUCCESS) return {};
  return simdjson::error_message(code);
}

}  // namespace outbox::mapping
