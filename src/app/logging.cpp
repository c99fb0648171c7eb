#include "outbox/app/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <set>
#include <vector>

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

// After a closing quote at `p - 1`: the end, " key=...", or ':' ',' ';' ')' before a space or
// the end.
bool closes_value(std::string_view m, std::size_t p) {
  if (p >= m.size()) return true;
  if (m[p] == ':' || m[p] == ',' || m[p] == ';' || m[p] == ')') {
    return p + 1 >= m.size() || m[p + 1] == ' ';
  }
  if (m[p] != ' ') return false;
  std::size_t k = p + 1;
  if (k >= m.size() || !is_key_start(m[k])) return false;
  while (k < m.size() && is_key_char(m[k])) ++k;
  return k < m.size() && m[k] == '=';
}

struct Field {
  std::string_view key;
  std::string_view value;
};

// key=value and key="quoted value" pairs of a message, in order; free text is skipped.
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
        // Quoted values are not escaped by the loggers (reason="... slot "x" is active"), so
        // the closing quote is the first one followed by the end, by another key=, or by
        // punctuation that ends a clause.
        std::size_t e = v + 1;
        while (e < m.size() && !(m[e] == '"' && closes_value(m, e + 1))) ++e;
        fields.push_back({key, m.substr(v + 1, e - v - 1)});
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
        fields.push_back({key, value});
        i = e;
      }
    } else {
      std::size_t e = m.find(' ', i);
      i = e == std::string_view::npos ? m.size() : e;
    }
  }
  return fields;
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
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

// %* in the text pattern: "slot=<name> " unless the message already names the slot.
class SlotFlag : public spdlog::custom_flag_formatter {
 public:
  explicit SlotFlag(std::string slot) : text_(slot.empty() ? "" : "slot=" + slot + " ") {}
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (text_.empty() || view(msg.payload).find("slot=") != std::string_view::npos) return;
    dest.append(text_.data(), text_.data() + text_.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SlotFlag>(*this);
  }

 private:
  std::string text_;
};

std::string rate_key(const spdlog::details::log_msg& msg) {
  std::string key(view(msg.logger_name));
  std::string_view m = view(msg.payload);
  for (const auto& f : parse_fields(m)) {
    if (f.key == "event") return key + " " + std::string(f.value);
  }
  return key + " " + std::string(m.substr(0, 40));
}

std::shared_ptr<RateLimitedSink> g_rate_limited;

}  // namespace

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

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
    if (is_json_number(f.value)) {
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
  std::string text = "event=warnings_suppressed key=\"" + key.substr(key.find(' ') + 1) +
                     "\" count=" + std::to_string(w.suppressed) +
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

void setup_logging(const LoggingConfig& config) {
  auto stderr_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  if (config.format == LogFormat::kJson) {
    stderr_sink->set_formatter(std::make_unique<JsonFormatter>(config.slot));
  } else {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<SlotFlag>('*', config.slot).set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %n %*%v");
    stderr_sink->set_formatter(std::move(f));
  }
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
