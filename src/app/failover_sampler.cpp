#include "outbox/app/failover_sampler.hpp"

#include <spdlog/spdlog.h>

#include <sstream>

#include "outbox/common/log_text.hpp"
#include "outbox/lifecycle/failover.hpp"
#include "sampler_thread.hpp"

namespace outbox::app {

std::string render_failover_prometheus(const FailoverSample& s) {
  std::ostringstream out;
  if (s.checked) {
    out << "# HELP outbox_relay_failover_ready 1 when the standby of --standby holds a synced, "
           "persistent, valid copy of the slot and has sync_replication_slots and "
           "hot_standby_feedback on (a promotion now keeps the slot), as of the last check.\n"
        << "# TYPE outbox_relay_failover_ready gauge\n"
        << "outbox_relay_failover_ready " << (s.ready ? 1 : 0) << '\n';
  }
  out << "# HELP outbox_relay_failover_checks_total Checks of the standby's copy of the slot, by "
         "result.\n"
      << "# TYPE outbox_relay_failover_checks_total counter\n"
      << "outbox_relay_failover_checks_total{result=\"ready\"} " << s.ready_checks << '\n'
      << "outbox_relay_failover_checks_total{result=\"not_ready\"} " << s.not_ready_checks << '\n'
      << "outbox_relay_failover_checks_total{result=\"error\"} " << s.failed_checks << '\n';
  return out.str();
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
