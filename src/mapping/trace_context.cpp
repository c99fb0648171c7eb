#include "trace_context.hpp"

namespace outbox::mapping {

namespace {

bool is_lower_hex(std::string_view text) {
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

bool is_valid_traceparent(std::string_view text) {
  if (text.size() < 55 || text[2] != '-' || text[35] != '-' || text[52] != '-') return false;
  const std::string_view version = text.substr(0, 2), trace_id = text.substr(3, 32),
                         parent_id = text.substr(36, 16), flags = text.substr(53, 2);
  if (!is_lower_hex(version) || !is_lower_hex(trace_id) || !is_lower_hex(parent_id) ||
      !is_lower_hex(flags) || version == "ff") {
    return false;
  }
  if (trace_id.find_first_not_of('0') == std::string_view::npos ||
      parent_id.find_first_not_of('0') == std::string_view::npos) {
    return false;
  }
  if (version == "00") return text.size() == 55;
  return text.size() == 55 || text[55] == '-';
}

}  // namespace outbox::mapping
