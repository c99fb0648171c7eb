#include "progress_recorder.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "outbox/common/log_text.hpp"

namespace outbox::relay {
namespace asio = boost::asio;
using common::quoted;

namespace {

// A record without an outcome this long is taken as lost and written again.
constexpr std::chrono::seconds kProgressLost{30};
constexpr std::size_t kProgressPendingMax = 64;
// The store could not be made: tried again this long after.
constexpr std::chrono::seconds kProgressRetry{5};

}  // namespace

ProgressRecorder::ProgressRecorder(asio::any_io_executor io, std::string slot,
                                   std::shared_ptr<spdlog::logger> log, Hooks hooks)
    : io_(io), slot_(std::move(slot)), log_(std::move(log)), hooks_(std::move(hooks)), timer_(io) {}

void ProgressRecorder::said(const std::string& error) {
  log_->warn(
      "event=progress_record_failed slot={} store={} error={}: the slot is confirmed once a "
      "record is written",
      slot_, quoted(store_->where()), quoted(error));
}

// The checkpoint topic, compacted (exactly-once also makes it in its Transactions::prepare()).
asio::awaitable<void> ProgressRecorder::ensure() {
  if (store_ == nullptr || ready_ || closed_) co_return;
  const std::string error = co_await store_->ensure(std::chrono::seconds(10));
  if (error.empty()) {
    ready_ = true;
  } else if (error != error_) {
    error_ = error;
    said(error);
  }
}

// In the background, for write(): the record is written once the store is there.
asio::awaitable<void> ProgressRecorder::make() {
  co_await ensure();
  making_ = false;
  if (!ready_) at_ = Clock::now();  // the next try after the interval
  write();
  hooks_.made();
}

// The progress record follows the confirmable position, at most every kProgressInterval
// (one small record; a timer writes the one due meanwhile). `lsn`: a position to record now.
void ProgressRecorder::write(std::optional<Lsn> lsn) {
  if (!lsn && !hooks_.may_write()) return;
  if (closed_) return;
  const Lsn target = lsn ? *lsn : hooks_.target();
  const auto now = Clock::now();
  if (!ready_) {
    if (!making_ && now - at_ >= kProgressRetry) {
      making_ = true;
      asio::co_spawn(io_, make(), asio::detached);
    }
    return;
  }
  // A report that never came (its producer was replaced): written again.
  if (written_ > acked_ && now - at_ > kProgressLost) written_ = acked_;
  if (target <= written_ || timer_armed_) return;
  // Only keepalives moved the position since the last record: a store whose writes make WAL the
  // server then confirms (PostgreSQL's) is written at its idle pace, by the next confirmation
  // or status update that finds it due.
  const std::uint64_t delivered = hooks_.delivered ? hooks_.delivered() : 0;
  if (!lsn && delivered == delivered_written_ && store_->idle_interval() > kProgressInterval &&
      now - at_ < store_->idle_interval()) {
    return;
  }
  if (now - at_ < kProgressInterval) {
    timer_armed_ = true;
    timer_.expires_at(at_ + kProgressInterval);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      timer_armed_ = false;
      if (!ec) write();
    });
    return;
  }
  const std::string key = hooks_.key();
  const std::string value = progress_value(target, hooks_.timeline());
  const std::uint64_t seq = ++seq_;
  at_ = now;  // a write not queued is tried again after the interval
  if (!store_->write(key, value, seq)) return;
  if (pending_.size() >= kProgressPendingMax) pending_.pop_front();
  pending_.emplace_back(seq, target);
  written_ = target;
  delivered_written_ = delivered;
}

void ProgressRecorder::on_written(std::uint64_t seq, const std::string& error) {
  std::optional<Lsn> lsn;
  while (!pending_.empty() && pending_.front().first <= seq) {
    if (pending_.front().first == seq) lsn = pending_.front().second;
    pending_.pop_front();
  }
  if (error.empty()) {
    error_.reset();
    if (lsn && *lsn > acked_) acked_ = *lsn;
    hooks_.stored();
    return;
  }
  // Written again after the interval, when the next confirmation or the timer comes.
  written_ = acked_;
  if (error != error_) said(error);
  error_ = error;  // said once per distinct error
  write();
}

void ProgressRecorder::cancel_timer() {
  timer_.cancel();
  timer_armed_ = false;
}

}  // namespace outbox::relay
