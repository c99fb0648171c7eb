#include "outbox/app/backlog_sampler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "metric_table.hpp"
#include "outbox/app/metric_defs.hpp"
#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/lifecycle/status.hpp"
#include "outbox/pg/admin.hpp"
#include "sampler_thread.hpp"

namespace outbox::app {
using common::now_unix_ms;

namespace {

// What the backlog's families are read from.
struct BacklogInput {
  const BacklogSample& s;
  std::int64_t now_unix_ms;
};
using Family = MetricFamily<BacklogInput>;

// A gauge of the last successful scan's, served once a scan succeeded; `get` reads its value.
// Numbers are written as the shortest text that reads back as the same double: a stream's
// default 6 significant digits would show a Unix time as 1.76461e+09, 10 s off.
template <typename Get>
Family scanned(std::string_view name, std::string_view help, Get get) {
  return {{name, MetricType::kGauge, {}, help}, [get](Series& series, const BacklogInput& in) {
            if (!in.s.counted) return false;
            series.value(get(in));
            return true;
          }};
}

const std::vector<Family>& families() {
  static const std::vector<Family> rows = {
      scanned("outbox_relay_pending_events",
              "Outbox events committed and not yet confirmed by the slot, counted from a copy of "
              "the slot every --backlog-interval (a lower bound while "
              "outbox_relay_pending_events_lower_bound is 1).",
              [](const BacklogInput& in) { return in.s.pending_events; }),
      scanned("outbox_relay_pending_events_lower_bound",
              "1 when the last backlog scan stopped at its change limit.",
              [](const BacklogInput& in) { return std::uint64_t{in.s.lower_bound ? 1u : 0u}; }),
      scanned("outbox_relay_oldest_pending_age_seconds",
              "Seconds since the commit of the oldest outbox event not yet confirmed by the slot, "
              "as of the last backlog scan's count; 0 when none is pending.",
              [](const BacklogInput& in) {
                const auto& oldest = in.s.oldest_commit_unix_ms;
                return oldest ? std::max<double>(
                                    0, static_cast<double>(in.now_unix_ms - *oldest) / 1000.0)
                              : 0.0;
              }),
      scanned("outbox_relay_backlog_scan_duration_seconds",
              "Seconds the last successful backlog scan took.",
              [](const BacklogInput& in) { return in.s.scan_seconds; }),
      scanned("outbox_relay_backlog_scan_timestamp_seconds",
              "Unix time of the last successful backlog scan.",
              [](const BacklogInput& in) {
                return static_cast<double>(in.s.scanned_at_unix_ms) / 1000.0;
              }),
      {{"outbox_relay_backlog_scans_total",
        MetricType::kCounter,
        {"result"},
        "Backlog scans, by result."},
       [](Series& series, const BacklogInput& in) {
         series.labelled({"ok"}, in.s.scans_ok);
         series.labelled({"error"}, in.s.scans_failed);
         return true;
       }},
  };
  return rows;
}

}  // namespace

std::vector<MetricDef> backlog_metric_defs() { return defs_of(families()); }

std::string render_backlog_prometheus(const BacklogSample& s, std::int64_t now_unix_ms) {
  return render_families(families(), BacklogInput{s, now_unix_ms});
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
