#include "column_values.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <string>

namespace outbox::mapping {

namespace {

// Value of each byte as a hex digit; -1 for the others.
constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = c >= '0' && c <= '9'   ? static_cast<std::int8_t>(c - '0')
           : c >= 'a' && c <= 'f' ? static_cast<std::int8_t>(c - 'a' + 10)
           : c >= 'A' && c <= 'F' ? static_cast<std::int8_t>(c - 'A' + 10)
                                  : std::int8_t{-1};
  }
  return t;
}();

}  // namespace

int column_index(const pgoutput::Relation& relation, std::string_view name) {
  for (std::size_t i = 0; i < relation.columns.size(); ++i) {
    if (relation.columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string_view decode_bytea(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() >= 2 && text[0] == '\\' && text[1] == 'x') {
    if (text.size() % 2 != 0) return "is bytea hex output with an odd number of digits";
    out.resize((text.size() - 2) / 2);
    // No branch per byte: a non-digit makes `bad` negative, checked once at the end.
    const auto* in = reinterpret_cast<const unsigned char*>(text.data()) + 2;
    int bad = 0;
    for (std::size_t o = 0; o < out.size(); ++o, in += 2) {
      const int hi = kHexValue[in[0]];
      const int lo = kHexValue[in[1]];
      bad |= hi | lo;
      out[o] = static_cast<char>((hi << 4) | (lo & 15));
    }
    if (bad < 0) return "is bytea hex output with a character that is not a hex digit";
    return {};
  }
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '3' &&
               text[i + 2] >= '0' && text[i + 2] <= '7' && text[i + 3] >= '0' &&
               text[i + 3] <= '7') {
      out += static_cast<char>(((text[i + 1] - '0') << 6) | ((text[i + 2] - '0') << 3) |
                               (text[i + 3] - '0'));
      i += 3;
    } else {
      return "is neither hex nor escape bytea output (a backslash without \\\\ or \\ooo)";
    }
  }
  return {};
}

bool is_blank(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) > ' ') return false;
  }
  return true;
}

std::string_view parse_partition(std::string_view text, std::int32_t& out) {
  if (!text.empty() && text[0] == '-') return "is negative, which is no partition";
  if (text.empty()) return "is not an integer";
  std::int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return "is not an integer";
    value = value * 10 + (c - '0');
    if (value > std::numeric_limits<std::int32_t>::max()) {
      return "is larger than the largest partition number (2147483647)";
    }
  }
  out = static_cast<std::int32_t>(value);
  return {};
}

}  // namespace outbox::mapping
