#include "stream_loop.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <optional>
#include <span>

#include "outbox/relay/read_pacer.hpp"

namespace outbox::relay {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

StreamLoop::StreamLoop(asio::any_io_executor io, const RelayConfig& config, Pipeline& pipeline,
                       PublicationChecker& checker, StatusReporter& status, Metrics& metrics,
                       const RunMachine& run, ChangeWait& change, Hooks hooks)
    : io_(io),
      config_(config),
      pipeline_(pipeline),
      checker_(checker),
      status_(status),
      metrics_(metrics),
      run_(run),
      change_(change),
      hooks_(std::move(hooks)),
      pace_timer_(io) {}

awaitable<void> StreamLoop::run(pg::ReplicationConnection& conn) {
  const bool exactly_once = config_.delivery == DeliveryMode::kExactlyOnce;
  std::size_t handled = 0;  // frames handled since the last yield to the io_context
  ReadPacer pacer(config_.read_pause);
  for (;;) {
    if (hooks_.ends()) co_return;
    checker_.on_stream_turn();  // a check due starts beside the stream; a failed one throws
    if (exactly_once &&
        transactions_->commit_due(transactions_->interval_passed() || pipeline_.paused())) {
      co_await transactions_->commit();
      continue;
    }
    if (pipeline_.backpressured()) {
      // Stop reading the socket until acknowledgements free room; status updates go on.
      set_state(State::kBackpressured, "in-flight bound reached");
      auto t0 = Clock::now();
      co_await change_.wait(t0 + config_.status_interval);
      metrics_.backpressure_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      if (!pipeline_.backpressured() && !run_.stop_requested()) {
        set_state(State::kStreaming, "");
      }
      continue;
    }
    std::optional<std::span<const std::byte>> frame = conn.try_read();
    if (!frame) {
      if (pacer.busy(Clock::now())) {
        // Its own timer: delivery reports, which wake a wait for a change, must not cut it short.
        auto read_now = [&] {
          const pg::ReplicationConnection::Backlog b = conn.backlog();
          return pacer.read_now(b.queued, b.capacity);
        };
        if (!read_now()) {
          pace_timer_.expires_after(pacer.pause());
          boost::system::error_code ec;
          co_await pace_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
          read_now();
        }
        if (hooks_.ends()) co_return;
        conn.read_available();
        continue;
      }
      // Nothing to read: a Kafka transaction with records commits now.
      if (exactly_once && transactions_->commit_due(true)) {
        co_await transactions_->commit();
        continue;
      }
      try {
        // Reset on every way out: left set after a lost connection (pg::Error), it made the
        // next check due cancel the next session's connect (event=unowned_cancel; before,
        // "I/O error: Operation canceled", exit 1, after a PostgreSQL crash).
        ChangeWait::Reading reading(change_);
        co_await conn.wait_readable();
      } catch (const boost::system::system_error& e) {
        if (e.code() != asio::error::operation_aborted ||
            !(hooks_.leaving() || checker_.due() || checker_.failed())) {
          throw;
        }
      }
      continue;
    }
    pacer.on_frame(frame->size());
    if (++handled % kYieldFrames == 0) {
      // A stream that never runs dry must not starve delivery reports and status updates.
      // The frame stays valid: nothing reads the connection meanwhile.
      co_await asio::post(io_, use_awaitable);
      if (hooks_.ends()) co_return;  // a rewind or a stop began meanwhile: the frame waits
    }
    for (;;) {
      const Pipeline::Step step = pipeline_.on_frame(*frame);
      if (step == Pipeline::Step::kDone) break;
      if (step == Pipeline::Step::kKeepalive) {
        on_keepalive(conn);
        break;
      }
      if (hooks_.ends()) co_return;  // e.g. the producer stopped at a refused batch
      if (step == Pipeline::Step::kResolveRelation) {
        try {
          co_await checker_.resolve_relation(pipeline_.resolving_relid());
        } catch (const boost::system::system_error& e) {
          if (e.code() != asio::error::operation_aborted || !hooks_.leaving()) throw;
        }
      } else {
        // Wait for delivery reports (room in the sink's queue, or the record sent alone).
        co_await change_.wait(Clock::now() + std::chrono::milliseconds(100));
      }
      if (hooks_.ends()) co_return;
    }
  }
}

void StreamLoop::on_keepalive(pg::ReplicationConnection& conn) {
  const Pipeline::Keepalive k = pipeline_.keepalive();
  if (k.idle_advanced) checker_.schedule();
  // The server sends an unrequested keepalive when our reported position lags its own while it
  // waits for WAL (e.g. busy unpublished tables): answer soon so the slot does not hold WAL.
  if (k.reply_requested ||
      (k.idle_advanced && Clock::now() - status_.last_sent() >= std::chrono::seconds(1))) {
    if (conn.connected()) status_.send_now();
  }
}

}  // namespace outbox::relay
