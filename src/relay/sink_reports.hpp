// The relay's side of the broker (record_sink.hpp): the Pipeline's records handed to the sink
// (Pipeline::Sink), and what the sink reports answered: a delivery (a progress record's is its
// store's, a checkpoint's is exactly-once's commit, the others the Pipeline's), the sink stopped
// (a rewind, exactly-once's transaction aborted, a fence, or a failure while stopping), the
// broker refusing the relay's credentials (exit 1), the relay's own delivery deadline
// (-X message.timeout.ms, at-least-once), and the rewind's new clients. Its choices are
// session_rules.hpp's (answer_sink_stop(), halt_on_rewind(), reader_goes_on(),
// delivery_watch_period(), deliveries_overdue()). Private to the relay; the io thread only.
#pragma once

#include <spdlog/logger.h>

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>

#include "change_wait.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/progress_store.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/run_machine.hpp"
#include "outbox/relay/transactions.hpp"

namespace outbox::relay {

class SinkReports final : public Pipeline::Sink {
 public:
  using Clock = std::chrono::steady_clock;

  struct Hooks {
    std::function<void(Fatal)> fail;          // the relay fails (every wait woken)
    std::function<void(Fatal)> fail_refused;  // ... because the broker refused its credentials
    std::function<bool()> leaving;            // the session ends (stop, failure, rewind)
    std::function<bool()> connected;          // a session's connection lives
    std::function<void()> confirm_soon;       // the confirmable position may have moved
    std::function<void()> wake_all;           // a rewind answered: every wait cut short
  };

  // `pipeline` is only kept here: the Pipeline is made after this (this is its Sink).
  SinkReports(boost::asio::any_io_executor io, const RelayConfig& config, Pipeline& pipeline,
              RunMachine& run, ChangeWait& change, Hooks hooks);

  // The sink and its progress store (made after this, with the handlers()), and exactly-once's
  // cycle (null otherwise).
  void attach(RecordSink* sink, ProgressStore* progress) {
    sink_ = sink;
    progress_ = progress;
  }
  void attach(Transactions* transactions) { transactions_ = transactions; }
  // What the sink is made with: its reports answered here.
  RecordSink::Handlers handlers();

  // Pipeline::Sink over the broker's RecordSink.
  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              Pipeline::Route route) override;
  bool stopped() const override { return sink_->stopped(); }
  bool stops_at_refusal() const override { return sink_->stops_at_refusal(); }

  // After each delivery report (and an aborted transaction): a failure may end the relay or the
  // session; a waiting reader may go on.
  void after_delivery();
  // The session streams: the relay's delivery deadline is looked at until cancel() (when the
  // sink has one).
  void watch_deliveries();
  void cancel() { watch_.cancel(); }
  // The rewind's new clients: reports still due are dropped (those records are sent again).
  void rewind();

 private:
  void on_delivery(const sink::Delivery& d);
  void on_sink_stopped(const std::string& message);
  void on_refused(const std::string& what);
  bool exactly_once() const { return config_.delivery == DeliveryMode::kExactlyOnce; }

  const RelayConfig& config_;
  Pipeline& pipeline_;
  RunMachine& run_;
  ChangeWait& change_;
  Hooks hooks_;
  RecordSink* sink_ = nullptr;
  ProgressStore* progress_ = nullptr;
  Transactions* transactions_ = nullptr;
  boost::asio::steady_timer watch_;  // watch_deliveries()
  Clock::time_point last_report_;    // the last delivery report, or the first record since
};

}  // namespace outbox::relay
