// Logging setup of the process: one named spdlog logger per module, all writing to stderr, in
// text or JSON, every line carrying the slot; warnings rate-limited per event so that a hot path
// cannot flood the log.
// setup_logging() runs once on the main thread before anything logs; the sinks are thread-safe
// (librdkafka's threads log too).
#pragma once

#include <spdlog/common.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>
#include <spdlog/sinks/sink.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "outbox/app/options.hpp"

namespace outbox::app {

struct LoggingConfig {
  std::string level = "info";
  LogFormat format = LogFormat::kText;
  std::string slot;  // empty: the commands, which log no slot
  std::chrono::milliseconds warn_window{10'000};
  std::size_t warn_burst = 5;  // warnings of one event per window before suppressing
};

// Creates and registers the loggers "app" (default), "relay", "pg", "kafka" and "http".
void setup_logging(const LoggingConfig& config);

// Logs, for each event whose warnings were suppressed, how many were (the summary timer calls it;
// a window that ended logs its count on the next warning of the event anyway).
void report_suppressed_warnings();

// The formatter of every line: text ("<time> <level> <logger> slot=<slot> <message>", the
// message with control characters escaped and invalid UTF-8 replaced) or JSON
// (format_json_line). Either way one line per message, whatever the message holds.
std::unique_ptr<spdlog::formatter> make_formatter(const LoggingConfig& config);

// One JSON object per line: ts (UTC, ms), level, logger, slot, the message's key=value fields
// (numbers as numbers, everything else as strings; a key already present is not repeated) and
// msg, the whole message text. A quoted value (key="...", written by common::quoted()) ends at
// its first unescaped quote and its escapes are read back, so text inside a value cannot add a
// field. Always valid JSON: control characters escaped, invalid UTF-8 replaced by U+FFFD.
std::string format_json_line(std::chrono::system_clock::time_point time,
                             spdlog::level::level_enum level, std::string_view logger,
                             std::string_view slot, std::string_view message);

// Passes everything to `inner` except warnings beyond `burst` per `window` for one key (logger
// plus the message's event= value, else its first words). Errors and worse always pass.
class RateLimitedSink : public spdlog::sinks::sink {
 public:
  RateLimitedSink(std::shared_ptr<spdlog::sinks::sink> inner, std::chrono::milliseconds window,
                  std::size_t burst);
  void log(const spdlog::details::log_msg& msg) override;
  void flush() override;
  void set_pattern(const std::string& pattern) override;
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override;
  // Logs the counts of suppressed warnings whose window has ended, or all of them with `all`.
  void report(bool all);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    std::size_t passed = 0;
    std::size_t suppressed = 0;
    std::string logger;
  };
  void report_locked(const std::string& key, Window& w);

  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::chrono::milliseconds window_;
  std::size_t burst_;
  std::mutex mutex_;
  std::map<std::string, Window> windows_;
};

}  // namespace outbox::app
