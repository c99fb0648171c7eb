#include "outbox/app/failover_sampler.hpp"

#include <spdlog/spdlog.h>

#include "metric_table.hpp"
#include "outbox/app/metric_defs.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/lifecycle/failover.hpp"
#include "sampler_thread.hpp"

namespace outbox::app {

namespace {

using Family = MetricFamily<FailoverSample>;

const std::vector<Family>& families() {
  static const std::vector<Family> rows = {
      {{"outbox_relay_failover_ready",
        MetricType::kGauge,
        {},
        "1 when the standby of --standby holds a synced, persistent, valid copy of the slot and "
        "has sync_replication_slots and hot_standby_feedback on (a promotion now keeps the "
        "slot), as of the last check."},
       [](Series& series, const FailoverSample& s) {
         if (!s.checked) return false;  // served once a check answered
         series.value(std::uint64_t{s.ready ? 1u : 0u});
         return true;
       }},
      {{"outbox_relay_failover_checks_total",
        MetricType::kCounter,
        {"result"},
        "Checks of the standby's copy of the slot, by result."},
       [](Series& series, const FailoverSample& s) {
         series.labelled({"ready"}, s.ready_checks);
         series.labelled({"not_ready"}, s.not_ready_checks);
         series.labelled({"error"}, s.failed_checks);
         return true;
       }},
  };
  return rows;
}

}  // namespace

std::vector<MetricDef> failover_metric_defs() { return defs_of(families()); }

std::string render_failover_prometheus(const FailoverSample& s) {
  return render_families(families(), s);
}

FailoverSampler::FailoverSampler(std::vector<std::string> standby_conninfos, std::string slot,
                                 std::chrono::milliseconds every)
    : conninfos_(std::move(standby_conninfos)), slot_(std::move(slot)), every_(every) {}

FailoverSampler::~FailoverSampler() = default;

void FailoverSampler::start() {
  auto log = spdlog::get("app");
  if (!log) log = spdlog::default_logger();
  // The readiness last logged; the thread's own.
  auto was_ready = std::make_shared<std::optional<bool>>();
  auto measure = [conninfos = conninfos_, slot = slot_, log,
                  was_ready]() -> SamplerThread<FailoverSample>::Record {
    lifecycle::StandbyCopy copy = lifecycle::inspect_standbys(conninfos, slot);
    return [copy = std::move(copy), slot, log, was_ready](FailoverSample& s, bool stopping) {
      if (!copy.error.empty()) {
        ++s.failed_checks;
        if (!stopping) {
          log->warn("event=failover_check_failed slot={} error={}", slot,
                    common::quoted(copy.error));
        }
        return;
      }
      const bool ready = copy.ready();
      s.checked = true;
      s.ready = ready;
      ++(ready ? s.ready_checks : s.not_ready_checks);
      if (*was_ready != ready) {
        std::string why;
        for (const auto& p : copy.problems()) why += (why.empty() ? "" : "; ") + p;
        log->info("event=failover_readiness slot={} ready={} problems={}", slot, ready,
                  common::quoted(why));
        *was_ready = ready;
      }
    };
  };
  thread_ = std::make_unique<SamplerThread<FailoverSample>>();
  thread_->start(std::move(measure), every_, /*wait_first=*/false);
}

FailoverSample FailoverSampler::sample() const {
  return thread_ ? thread_->last() : FailoverSample{};
}

}  // namespace outbox::app
