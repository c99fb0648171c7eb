#include "sink_reports.hpp"

#include "outbox/relay/session_rules.hpp"

namespace outbox::relay {

SinkReports::SinkReports(boost::asio::any_io_executor io, const RelayConfig& config,
                         Pipeline& pipeline, RunMachine& run, ChangeWait& change, Hooks hooks)
    : config_(config),
      pipeline_(pipeline),
      run_(run),
      change_(change),
      hooks_(std::move(hooks)),
      watch_(std::move(io)) {}

RecordSink::Handlers SinkReports::handlers() {
  return {[this](const sink::Delivery& d) { on_delivery(d); },
          [this](const std::string& m) { on_sink_stopped(m); },
          [this](const std::string& m) { on_refused(m); }};
}

sink::ProduceResult SinkReports::produce(const sink::Record& record, std::uint64_t opaque,
                                         Pipeline::Route route) {
  if (exactly_once()) transactions_->before_record();
  if (sink_->queued() == 0) last_report_ = Clock::now();  // the deadline starts now
  // Exactly-once: every record goes in the transaction (nothing else is in flight anyway).
  return sink_->produce(record, opaque, route == Pipeline::Route::kAlone);
}

void SinkReports::after_delivery() {
  hooks_.confirm_soon();
  if (pipeline_.fatal() && !run_.failed()) hooks_.fail(*pipeline_.fatal());
  // Once per rewind (RunMachine::answer_rewind()): the stop sequence's own waits must not be
  // cut short again.
  if (pipeline_.rewinding() && run_.answer_rewind()) {
    // A sink that goes on (a delivery timed out; not a refused batch, which stops it) would
    // send the records queued behind the failed one when the broker answers again, ahead of
    // it. Exactly-once aborts the Kafka transaction instead: nothing of it becomes visible.
    if (halt_on_rewind(exactly_once(), sink_->stopped())) sink_->halt();
    hooks_.wake_all();
  }
  if (change_.waiting() &&
      reader_goes_on(transactions_ && transactions_->committing(), pipeline_.paused(),
                     hooks_.leaving(), pipeline_.below_low_watermark())) {
    change_.notify();
  }
}

// Every delivery report, of any producer: a checkpoint record's is the commit's
// (Transactions::take); the others are the Pipeline's.
void SinkReports::on_delivery(const sink::Delivery& d) {
  // A progress record's report is not the events' (its own producer): counted, a progress
  // record timing out every message.timeout.ms kept the events' deadline from ever passing
  // while the broker was frozen (no rewind, the events waited for the thaw).
  if (progress_ && progress_->take(d)) return;
  last_report_ = Clock::now();
  if (!(transactions_ && transactions_->take(d))) pipeline_.on_delivery(d);
  after_delivery();
}

// A fatal producer error (a refused batch under the gapless guarantee, an idempotent sequence
// lost after a broker restart): what was not acknowledged is sent again from the confirmed
// position by a new producer; nothing is lost, nothing passes an earlier record.
void SinkReports::on_sink_stopped(const std::string& message) {
  switch (answer_sink_stop(transactions_ && transactions_->fenced(), run_.stop_requested(),
                           exactly_once())) {
    case SinkStop::kFenced:
      transactions_->on_fenced(message);
      return;
    case SinkStop::kFail:
      hooks_.fail({kExitError, sink_->client() + " fatal error while stopping: " + message});
      return;
    case SinkStop::kAbortTransaction:
      pipeline_.abort_kafka_transaction(sink_->client() + " fatal error: " + message);
      break;
    case SinkStop::kRewind:
      pipeline_.begin_rewind(message);
      break;
  }
  after_delivery();
}

// A broker refused the relay's credentials or certificate. librdkafka would reconnect and be
// refused for ever while the relay held the slot, looked alive and delivered nothing, and a
// standby with good credentials could not take over. Credentials are read at start, so only a
// restart (by the supervisor, exit code 1) picks up a fixed --kafka-config or certificate.
void SinkReports::on_refused(const std::string& what) {
  if (run_.failed()) return;
  hooks_.fail_refused({kExitError, what + "; " + sink_->refusal_advice() + "; slot " +
                                       config_.slot + " is not confirmed past " +
                                       pipeline_.confirmable().to_string()});
}

void SinkReports::rewind() {
  sink_->renew();  // reports still due are dropped: those records are sent again
  if (transactions_) transactions_->producers_renewed();
  pipeline_.rewound();
}

// -X message.timeout.ms, at-least-once: the relay's deadline, not librdkafka's (which fails the
// oldest queued records while later ones of their partition still go: out of order). Records
// in flight and no report for that long: the broker did not answer; the producers are halted
// (every queued record fails at once) and the relay rewinds.
void SinkReports::watch_deliveries() {
  const std::optional<std::chrono::milliseconds> timeout = sink_->delivery_timeout();
  if (!timeout) return;
  watch_.expires_after(delivery_watch_period(*timeout));
  watch_.async_wait([this, timeout](const boost::system::error_code& ec) {
    if (ec || !hooks_.connected() || hooks_.leaving()) return;
    if (deliveries_overdue(sink_->queued(), Clock::now() - last_report_, *timeout)) {
      pipeline_.begin_rewind("no delivery report within message.timeout.ms (" +
                             std::to_string(timeout->count()) + " ms): the broker did not answer");
      after_delivery();
      return;
    }
    watch_deliveries();
  });
}

}  // namespace outbox::relay
