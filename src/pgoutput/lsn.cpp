#include "outbox/pgoutput/lsn.hpp"

#include <cinttypes>
#include <cstdio>

namespace outbox::pgoutput {
namespace {

// PostgreSQL's pg_lsn input takes 1 to 8 hex digits per half; so do we, so that anything we accept
// the server accepts too (and leading zeros cannot hide an overflow).
constexpr std::size_t kMaxHalfDigits = 8;

std::optional<std::uint32_t> parse_half(std::string_view text) {
  if (text.empty() || text.size() > kMaxHalfDigits) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : text) {
    std::uint32_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    v = (v << 4) | digit;
  }
  return v;
}

}  // namespace

std::string Lsn::to_string() const {
  char buf[2 * kMaxHalfDigits + 2];  // "FFFFFFFF/FFFFFFFF" and the NUL
  const int n =
      std::snprintf(buf, sizeof buf, "%" PRIX32 "/%" PRIX32,
                    static_cast<std::uint32_t>(value >> 32), static_cast<std::uint32_t>(value));
  return std::string(buf, static_cast<std::size_t>(n));
}

std::optional<Lsn> Lsn::parse(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto hi = parse_half(text.substr(0, slash));
  const auto lo = parse_half(text.substr(slash + 1));  // a second '/' fails as a non-hex digit
  if (!hi || !lo) return std::nullopt;
  return Lsn{(std::uint64_t{*hi} << 32) | *lo};
}

}  // namespace outbox::pgoutput
