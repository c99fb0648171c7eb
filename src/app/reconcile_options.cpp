#include "outbox/app/reconcile_options.hpp"

#include <charconv>
#include <cstdio>

#include "flags.hpp"

namespace outbox::app {
namespace {

// Reads exactly `digits` decimal digits at `pos`; advances it.
bool read_fixed(const std::string& s, std::size_t& pos, std::size_t digits, int& out) {
  if (pos + digits > s.size()) return false;
  out = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += digits;
  return true;
}

std::optional<std::int64_t> parse_timestamp(const std::string& s) {
  std::size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!read_fixed(s, pos, 4, y) || pos >= s.size() || s[pos++] != '-' ||
      !read_fixed(s, pos, 2, mo) || pos >= s.size() || s[pos++] != '-' ||
      !read_fixed(s, pos, 2, d)) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(y), std::chrono::month(mo),
                                         std::chrono::day(d)};
  if (!date.ok()) return std::nullopt;
  std::int64_t micros = 0;
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == 't' || s[pos] == ' ')) {
    ++pos;
    if (!read_fixed(s, pos, 2, h) || pos >= s.size() || s[pos++] != ':' ||
        !read_fixed(s, pos, 2, mi)) {
      return std::nullopt;
    }
    if (pos < s.size() && s[pos] == ':') {
      ++pos;
      if (!read_fixed(s, pos, 2, sec)) return std::nullopt;
      if (pos < s.size() && s[pos] == '.') {
        ++pos;
        std::int64_t scale = 100'000;
        const std::size_t first = pos;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
          micros += (s[pos] - '0') * scale;  // digits beyond microseconds are dropped
          scale /= 10;
          ++pos;
        }
        if (pos == first) return std::nullopt;
      }
    }
    if (h > 23 || mi > 59 || sec > 59) return std::nullopt;
  }
  std::int64_t offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int sign = s[pos++] == '-' ? -1 : 1;
    int oh = 0, om = 0;
    if (!read_fixed(s, pos, 2, oh)) return std::nullopt;
    if (pos < s.size() && s[pos] == ':') ++pos;
    if (pos < s.size() && !read_fixed(s, pos, 2, om)) return std::nullopt;
    if (oh > 23 || om > 59) return std::nullopt;
    offset_minutes = sign * (oh * 60 + om);
  }
  if (pos != s.size()) return std::nullopt;
  const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const std::int64_t seconds = days * 86'400 + h * 3600 + mi * 60 + sec - offset_minutes * 60;
  return seconds * 1'000'000 + micros;
}

std::optional<std::chrono::microseconds> parse_age(const std::string& s) {
  std::uint64_t n = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, n);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  const std::string unit(p, end);
  std::uint64_t per = 0;
  if (unit == "ms") per = 1000;
  if (unit == "s") per = 1'000'000;
  if (unit == "m" || unit == "min") per = 60'000'000;
  if (unit == "h") per = 3'600'000'000;
  if (unit == "d") per = 86'400'000'000;
  // At most about 290 years: the result stays within 64 bits.
  if (per == 0 || n > 9'000'000'000'000'000ULL / per) return std::nullopt;
  return std::chrono::microseconds(static_cast<std::int64_t>(n * per));
}

}  // namespace

TimeBound parse_time_bound(const std::string& flag, const std::string& text) {
  TimeBound bound;
  bound.text = text;
  if (auto age = parse_age(text)) {
    bound.ago = *age;
    return bound;
  }
  if (auto at = parse_timestamp(text)) {
    bound.epoch_us = *at;
    return bound;
  }
  throw flags::invalid(flag, "time", text,
                       "expected an age such as 30m, 2h, 7d, or a timestamp such as "
                       "2026-11-30T10:00:00Z; without an offset, UTC");
}

}  // namespace outbox::app
