#include "outbox/app/backlog_sampler.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <sstream>
#include <system_error>

#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/lifecycle/status.hpp"
#include "outbox/pg/admin.hpp"
#include "sampler_thread.hpp"

namespace outbox::app {
using common::now_unix_ms;

namespace {

// The shortest text that reads back as the same double: a stream's default 6 significant digits
// would show a Unix time as 1.76461e+09, 10 s off.
std::string number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}
std::string number(std::uint64_t v) { return std::to_string(v); }
std::string number(int v) { return std::to_string(v); }

}  // namespace

std::string render_backlog_prometheus(const BacklogSample& s, std::int64_t now_unix_ms) {
  std::ostringstream out;
  auto series = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << number(value) << '\n';
  };
  if (s.counted) {
    series("outbox_relay_pending_events", "gauge",
           "Outbox events committed and not yet confirmed by the slot, counted from a copy of the "
           "slot every --backlog-interval (a lower bound while "
           "outbox_relay_pending_events_lower_bound is 1).",
           s.pending_events);
    series("outbox_relay_pending_events_lower_bound", "gauge",
           "1 when the last backlog scan stopped at its change limit.", s.lower_bound ? 1 : 0);
    const double age =
        s.oldest_commit_unix_ms
            ? std::max<double>(0,
                               static_cast<double>(now_unix_ms - *s.oldest_commit_unix_ms) / 1000.0)
            : 0.0;
    series("outbox_relay_oldest_pending_age_seconds", "gauge",
           "Seconds since the commit of the oldest outbox event not yet confirmed by the slot, as "
           "of the last backlog scan's count; 0 when none is pending.",
           age);
    series("outbox_relay_backlog_scan_duration_seconds", "gauge",
           "Seconds the last successful backlog scan took.", s.scan_seconds);
    series("outbox_relay_backlog_scan_timestamp_seconds", "gauge",
           "Unix time of the last successful backlog scan.",
           static_cast<double>(s.scanned_at_unix_ms) / 1000.0);
  }
  out << "# HELP outbox_relay_backlog_scans_total Backlog scans, by result.\n"
      << "# TYPE outbox_relay_backlog_scans_total counter\n"
      << "outbox_relay_backlog_scans_total{result=\"ok\"} " << s.scans_ok << '\n'
      << "outbox_relay_backlog_scans_total{result=\"error\"} " << s.scans_failed << '\n';
  return out.str();
}

BacklogSampler::BacklogSampler(lifecycle::StatusOptions where, std::chrono::milliseconds every)
    : where_(std::move(where)), every_(every) {}

BacklogSampler::~BacklogSampler() = default;

void BacklogSampler::start() {
  auto log = spdlog::get("app");
  if (!log) log = spdlog::default_logger();
  auto measure = [where = where_, log]() -> SamplerThread<BacklogSample>::Record {
    lifecycle::BacklogStatus status;
    try {
      pg::AdminSession db(where.conninfo);
      status = lifecycle::count_pending(where, db.slot(where.slot));
    } catch (const pg::Error& e) {
      status.error = e.what();
    }
    return [status = std::move(status), slot = where.slot, log](BacklogSample& s, bool stopping) {
      if (status.count) {
        s.counted = true;
        s.pending_events = status.count->pending_events;
        s.lower_bound = status.stopped_at_limit;
        s.oldest_commit_unix_ms.reset();
        if (status.count->oldest_commit_time) {
          s.oldest_commit_unix_ms = pgoutput::to_unix_millis(*status.count->oldest_commit_time);
        }
        s.scan_seconds = status.scan_seconds;
        s.scanned_at_unix_ms = now_unix_ms();
        ++s.scans_ok;
      } else if (!stopping) {
        ++s.scans_failed;
        log->warn("event=backlog_scan_failed slot={} error={}", slot, common::quoted(status.error));
      }
    };
  };
  thread_ = std::make_unique<SamplerThread<BacklogSample>>();
  // The first count waits one interval: a relay catching up at start needs the server's CPU more
  // than the figure (each count decodes up to the scan limit a second time).
  thread_->start(std::move(measure), every_, /*wait_first=*/true);
}

BacklogSample BacklogSampler::sample() const { return thread_ ? thread_->last() : BacklogSample{}; }

}  // namespace outbox::app
