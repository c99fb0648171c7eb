#include "timestamps.hpp"

namespace outbox::mapping {

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// Reads `n` digits at `pos`. False when they are not there.
bool read_digits(std::string_view text, std::size_t& pos, std::size_t n, std::int64_t& out) {
  if (pos + n > text.size()) return false;
  out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += n;
  return true;
}

// Date of a day since 1970-01-01, proleptic Gregorian (H. Hinnant's civil_from_days).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2);
}

}  // namespace

std::string_view parse_timestamp(std::string_view text, std::int64_t& out_us) {
  constexpr std::string_view kNotIso =
      "is not a timestamp as PostgreSQL prints it with DateStyle ISO (e.g. 2026-12-01 "
      "05:55:23.123+00)";
  if (text == "infinity" || text == "-infinity") {
    return "is infinite, which a Kafka timestamp cannot carry";
  }
  std::size_t pos = 0;
  std::int64_t year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  // The year has four digits or more.
  std::size_t year_digits = 0;
  while (pos + year_digits < text.size() && text[pos + year_digits] >= '0' &&
         text[pos + year_digits] <= '9') {
    ++year_digits;
  }
  if (year_digits < 4 || year_digits > 7) return kNotIso;
  read_digits(text, pos, year_digits, year);
  const auto expect = [&](char c) {
    if (pos >= text.size() || text[pos] != c) return false;
    ++pos;
    return true;
  };
  if (!expect('-') || !read_digits(text, pos, 2, month) || !expect('-') ||
      !read_digits(text, pos, 2, day) || !expect(' ') || !read_digits(text, pos, 2, hour) ||
      !expect(':') || !read_digits(text, pos, 2, minute) || !expect(':') ||
      !read_digits(text, pos, 2, second)) {
    return kNotIso;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 24 || minute > 59 || second > 60) {
    return kNotIso;
  }
  std::int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    std::int64_t scale = 100'000;
    std::size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits++ < 6) {
        micros += (text[pos] - '0') * scale;
        scale /= 10;
      }
      ++pos;
    }
    if (digits == 0) return kNotIso;
  }
  std::int64_t offset_seconds = 0;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const bool negative = text[pos] == '-';
    ++pos;
    std::int64_t oh = 0, om = 0, os = 0;
    if (!read_digits(text, pos, 2, oh)) return kNotIso;
    if (expect(':') && !read_digits(text, pos, 2, om)) return kNotIso;
    if (expect(':') && !read_digits(text, pos, 2, os)) return kNotIso;
    offset_seconds = (oh * 3600 + om * 60 + os) * (negative ? -1 : 1);
  }
  if (pos != text.size()) {
    if (text.substr(pos) == " BC") return "is a date BC, which a Kafka timestamp cannot carry";
    return kNotIso;
  }
  const std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const std::int64_t seconds = days * 86'400 + hour * 3600 + minute * 60 + second - offset_seconds;
  out_us = seconds * 1'000'000 + micros;
  // librdkafka takes 0 for "now" and the broker refuses negative timestamps.
  if (out_us / 1000 <= 0) {
    return "is not after 1970-01-01 00:00:00 UTC, which a Kafka timestamp needs";
  }
  return {};
}

std::size_t format_rfc3339(std::int64_t unix_us, std::array<char, 32>& out) {
  const std::int64_t seconds = unix_us >= 0 ? unix_us / 1'000'000 : (unix_us + 1) / 1'000'000 - 1;
  const std::int64_t micros = unix_us - seconds * 1'000'000;
  const std::int64_t days = seconds >= 0 ? seconds / 86'400 : (seconds + 1) / 86'400 - 1;
  const std::int64_t in_day = seconds - days * 86'400;
  std::int64_t year = 0;
  unsigned month = 0, day = 0;
  civil_from_days(days, year, month, day);
  if (year < 1 || year > 9999) return 0;
  const auto put = [&](std::size_t at, std::int64_t value, int digits) {
    for (int i = digits - 1; i >= 0; --i, value /= 10) {
      out[at + static_cast<std::size_t>(i)] = static_cast<char>('0' + value % 10);
    }
  };
  put(0, year, 4);
  out[4] = '-';
  put(5, month, 2);
  out[7] = '-';
  put(8, day, 2);
  out[10] = 'T';
  put(11, in_day / 3600, 2);
  out[13] = ':';
  put(14, in_day / 60 % 60, 2);
  out[16] = ':';
  put(17, in_day % 60, 2);
  out[19] = '.';
  put(20, micros, 6);
  out[26] = 'Z';
  return 27;
}

}  // namespace outbox::mapping
