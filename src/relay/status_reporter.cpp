#include "outbox/relay/status_reporter.hpp"

namespace outbox::relay {

StatusReporter::StatusReporter(boost::asio::any_io_executor executor,
                               std::chrono::milliseconds interval,
                               std::chrono::milliseconds confirm_delay,
                               std::function<Positions()> positions, Send send)
    : interval_(interval),
      confirm_delay_(confirm_delay),
      positions_(std::move(positions)),
      send_(std::move(send)),
      cadence_(executor),
      confirm_(executor) {}

void StatusReporter::start() {
  ++generation_;
  arm_cadence();
}

void StatusReporter::arm_cadence() {
  cadence_.expires_after(interval_);
  cadence_.async_wait([this, gen = generation_](const boost::system::error_code& ec) {
    if (ec || gen != generation_) return;  // cancelled, or expired just before stop()
    send_now();
    arm_cadence();
  });
}

void StatusReporter::confirm_soon() {
  if (confirm_armed_ || positions_().flush <= last_reported_) return;
  confirm_armed_ = true;
  confirm_.expires_after(confirm_delay_);
  confirm_.async_wait([this, gen = generation_](const boost::system::error_code& ec) {
    if (gen != generation_) return;  // stop() reset confirm_armed_
    confirm_armed_ = false;
    if (!ec) send_now();
  });
}

void StatusReporter::send_now() {
  const Positions p = positions_();
  if (!send_(p)) return;
  last_sent_ = Clock::now();
  last_reported_ = p.flush;
}

void StatusReporter::stop() {
  ++generation_;
  cadence_.cancel();
  confirm_.cancel();
  confirm_armed_ = false;
}

}  // namespace outbox::relay
