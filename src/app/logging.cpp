#include "outbox/app/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <set>
#include <vector>

#include "outbox/common/log_text.hpp"

namespace outbox::app {
namespace {

std::string_view view(spdlog::string_view_t s) { return {s.data(), s.size()}; }

bool is_key_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

bool is_json_number(std::string_view v) {
  if (v.empty() || v.size() > 15) return false;
  std::size_t i = v[0] == '-' ? 1 : 0;
  if (i >= v.size() || !std::isdigit(static_cast<unsigned char>(v[i]))) return false;
  if (v[i] == '0' && i + 1 < v.size() && v[i + 1] != '.') return false;  // no leading zeros
  bool dot = false;
  for (; i < v.size(); ++i) {
    if (v[i] == '.' && !dot && i + 1 < v.size()) {
      dot = true;
    } else if (!std::isdigit(static_cast<unsigned char>(v[i]))) {
      return false;
    }
  }
  return true;
}

struct Field {
  std::string_view key;
  std::string_view value;
  bool quoted;  // value is the inside of "...", escapes and all
};

// key=value and key="quoted value" pairs of a message, in order; free text is skipped. A quoted
// value is written by common::quoted(): a backslash escapes the next character, and the value
// ends at the first quote not escaped, so no text inside a value can end it and add a field.
// `value` keeps its escapes (unescape() reads them).
std::vector<Field> parse_fields(std::string_view m) {
  std::vector<Field> fields;
  std::size_t i = 0;
  while (i < m.size()) {
    while (i < m.size() && m[i] == ' ') ++i;
    std::size_t k = i;
    if (k < m.size() && is_key_start(m[k])) {
      while (k < m.size() && is_key_char(m[k])) ++k;
    }
    if (k > i && k < m.size() && m[k] == '=') {
      std::string_view key = m.substr(i, k - i);
      std::size_t v = k + 1;
      if (v < m.size() && m[v] == '"') {
        std::size_t e = v + 1;
        while (e < m.size() && m[e] != '"') e += m[e] == '\\' ? 2 : 1;
        e = std::min(e, m.size());
        fields.push_back({key, m.substr(v + 1, e - v - 1), true});
        i = e + 1;
      } else {
        std::size_t e = m.find(' ', v);
        if (e == std::string_view::npos) e = m.size();
        std::string_view value = m.substr(v, e - v);
        // "confirmed=0/16B2: they will be sent again": the colon belongs to the sentence.
        while (!value.empty() &&
               (value.back() == ':' || value.back() == ',' || value.back() == ';')) {
          value.remove_suffix(1);
        }
        fields.push_back({key, value, false});
        i = e;
      }
    } else {
      std::size_t e = m.find(' ', i);
      i = e == std::string_view::npos ? m.size() : e;
    }
  }
  return fields;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<std::uint32_t> hex4(std::string_view v, std::size_t at) {
  if (at + 4 > v.size()) return std::nullopt;
  std::uint32_t cp = 0;
  for (std::size_t k = at; k < at + 4; ++k) {
    const char c = v[k];
    cp <<= 4;
    if (c >= '0' && c <= '9') {
      cp |= static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      cp |= static_cast<std::uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      cp |= static_cast<std::uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
  }
  return cp;
}

// The text of a quoted value: the escapes common::quoted() writes (JSON's) read back. Anything
// else after a backslash is kept as written; a lone surrogate becomes U+FFFD.
std::string unescape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '\\' || i + 1 >= v.size()) {
      out += v[i];
      continue;
    }
    const char c = v[++i];
    switch (c) {
      case '"':
      case '\\':
      case '/':
        out += c;
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        auto cp = hex4(v, i + 1);
        if (!cp) {
          out += "\\u";
          break;
        }
        i += 4;
        if (*cp >= 0xD800 && *cp <= 0xDBFF && i + 2 < v.size() && v[i + 1] == '\\' &&
            v[i + 2] == 'u') {
          auto low = hex4(v, i + 3);
          if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
            append_utf8(out, 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00));
            i += 6;
            break;
          }
        }
        append_utf8(out, *cp >= 0xD800 && *cp <= 0xDFFF ? 0xFFFD : *cp);
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  common::append_escaped(out, text, common::Escape::kAll);
  out += '"';
}

class JsonFormatter : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string slot) : slot_(std::move(slot)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line =
        format_json_line(msg.time, msg.level, view(msg.logger_name), slot_, view(msg.payload));
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(slot_);
  }

 private:
  std::string slot_;
};

// %* in the text pattern: "slot=<name> " unless the message already has a slot field ("slot="
// inside a quoted value is not one: a name from outside cannot hide the slot).
class SlotFlag : public spdlog::custom_flag_formatter {
 public:
  explicit SlotFlag(std::string slot) : text_(slot.empty() ? "" : "slot=" + slot + " ") {}
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (text_.empty()) return;
    const std::string_view m = view(msg.payload);
    if (m.find("slot=") != std::string_view::npos) {
      for (const Field& f : parse_fields(m)) {
        if (f.key == "slot") return;
      }
    }
    dest.append(text_.data(), text_.data() + text_.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SlotFlag>(*this);
  }

 private:
  std::string text_;
};

// %& in the text pattern: the message with every control character escaped and invalid UTF-8
// replaced (common::Escape::kControlsOnly), so that a line stays one line even when text from
// outside reached the message without common::quoted().
class PayloadFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string text;
    common::append_escaped(text, view(msg.payload), common::Escape::kControlsOnly);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PayloadFlag>();
  }
};

std::string rate_key(const spdlog::details::log_msg& msg) {
  std::string key(view(msg.logger_name));
  std::string_view m = view(msg.payload);
  for (const auto& f : parse_fields(m)) {
    if (f.key == "event") return key + " " + (f.quoted ? unescape(f.value) : std::string(f.value));
  }
  return key + " " + std::string(m.substr(0, 40));
}

std::shared_ptr<RateLimitedSink> g_rate_limited;

}  // namespace

std::string format_json_line(std::chrono::system_clock::time_point time,
                             spdlog::level::level_enum level, std::string_view logger,
                             std::string_view slot, std::string_view message) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(time.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  std::string out = "{\"ts\":\"";
  out += ts;
  out += "\",\"level\":";
  append_json_string(out, view(spdlog::level::to_string_view(level)));
  out += ",\"logger\":";
  append_json_string(out, logger);
  std::set<std::string_view> seen = {"ts", "level", "logger", "msg"};
  if (!slot.empty()) {
    out += ",\"slot\":";
    append_json_string(out, slot);
    seen.insert("slot");
  }
  for (const auto& f : parse_fields(message)) {
    if (!seen.insert(f.key).second) continue;
    out += ',';
    append_json_string(out, f.key);
    out += ':';
    if (f.quoted) {
      append_json_string(out, unescape(f.value));
    } else if (is_json_number(f.value)) {
      out += f.value;
    } else {
      append_json_string(out, f.value);
    }
  }
  out += ",\"msg\":";
  append_json_string(out, message);
  out += '}';
  return out;
}

RateLimitedSink::RateLimitedSink(std::shared_ptr<spdlog::sinks::sink> inner,
                                 std::chrono::milliseconds window, std::size_t burst)
    : inner_(std::move(inner)), window_(window), burst_(burst) {}

void RateLimitedSink::log(const spdlog::details::log_msg& msg) {
  if (msg.level != spdlog::level::warn) {
    inner_->log(msg);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  std::string key = rate_key(msg);
  auto [it, fresh] = windows_.try_emplace(key);
  Window& w = it->second;
  if (fresh) {
    w.start = now;
    w.logger = std::string(view(msg.logger_name));
  } else if (now - w.start >= window_) {
    report_locked(key, w);
    w.start = now;
    w.passed = 0;
  }
  if (w.passed < burst_) {
    ++w.passed;
    inner_->log(msg);
  } else {
    ++w.suppressed;
  }
}

void RateLimitedSink::report_locked(const std::string& key, Window& w) {
  if (w.suppressed == 0) return;
  std::string text = "event=warnings_suppressed key=" +
                     common::quoted(std::string_view(key).substr(key.find(' ') + 1)) +
                     " count=" + std::to_string(w.suppressed) +
                     " window_s=" + std::to_string(window_.count() / 1000);
  spdlog::details::log_msg note(w.logger, spdlog::level::warn, text);
  inner_->log(note);
  w.suppressed = 0;
}

void RateLimitedSink::report(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (all || now - it->second.start >= window_) {
      report_locked(it->first, it->second);
      it = windows_.erase(it);
    } else {
      ++it;
    }
  }
}

void RateLimitedSink::flush() { inner_->flush(); }

void RateLimitedSink::set_pattern(const std::string& pattern) { inner_->set_pattern(pattern); }

void RateLimitedSink::set_formatter(std::unique_ptr<spdlog::formatter> formatter) {
  inner_->set_formatter(std::move(formatter));
}

std::unique_ptr<spdlog::formatter> make_formatter(const LoggingConfig& config) {
  if (config.format == LogFormat::kJson) return std::make_unique<JsonFormatter>(config.slot);
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<SlotFlag>('*', config.slot)
      .add_flag<PayloadFlag>('&')
      .set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %n %*%&");
  return f;
}

void setup_logging(const LoggingConfig& config) {
  auto stderr_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  stderr_sink->set_formatter(make_formatter(config));
  g_rate_limited =
      std::make_shared<RateLimitedSink>(stderr_sink, config.warn_window, config.warn_burst);
  auto root = std::make_shared<spdlog::logger>("app", g_rate_limited);
  root->set_level(spdlog::level::from_str(config.level));
  root->flush_on(spdlog::level::info);
  spdlog::set_default_logger(root);
  // One named logger per module, cloned from the root so they share sink, format and level.
  for (const char* name : {"relay", "pg", "kafka", "http"}) {
    if (!spdlog::get(name)) spdlog::register_logger(root->clone(name));
  }
}

void report_suppressed_warnings() {
  if (g_rate_limited) g_rate_limited->report(false);
}

}  // namespace outbox::app
