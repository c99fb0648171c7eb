#include "stop_sequence.hpp"

#include <algorithm>

#include "outbox/common/log_text.hpp"
#include "outbox/relay/session_rules.hpp"

namespace outbox::relay {
using boost::asio::awaitable;
using common::quoted;

StopSequence::StopSequence(const RelayConfig& config, std::shared_ptr<spdlog::logger> log,
                           const RunMachine& run, Pipeline& pipeline, PublicationChecker& checker,
                           ProgressRecorder& recorder, ProgressCheck& progress,
                           StatusReporter& status, ChangeWait& change,
                           std::function<void(Fatal)> fail)
    : config_(config),
      log_(std::move(log)),
      run_(run),
      pipeline_(pipeline),
      checker_(checker),
      recorder_(recorder),
      progress_(progress),
      status_(status),
      change_(change),
      fail_(std::move(fail)) {}

// Reading has stopped: flush deliveries with a deadline, confirm what was acknowledged, end the
// copy, close.
awaitable<void> StopSequence::run(pg::ReplicationConnection& conn, Clock::time_point deadline) {
  // Nothing more can be acknowledged when the broker refuses the relay's credentials.
  while (!run_.broker_refused() && sink_->queued() > 0 && Clock::now() < deadline) {
    co_await change_.wait(deadline);
  }
  if (transactions_ && transactions_->phase() == TxnPhase::kOpen) {
    const bool failed = run_.failed();
    const bool rewinding = pipeline_.rewinding();
    const TxnEnd end = transaction_at_end({true, failed, rewinding,
                                           !failed && !rewinding && transactions_->commit_due(true),
                                           transactions_->records(), pipeline_.in_transaction()});
    if (end == TxnEnd::kCommit) {
      co_await transactions_->commit();
    } else if (end == TxnEnd::kAbort) {
      co_await transactions_->abort();
    }
  }
  co_await final_check();
  co_await flush_progress(deadline);
  if (conn.connected()) status_.send_now();
  status_.stop();
  recorder_.cancel_timer();
  log_->info("event=final_confirm slot={} lsn={} unacknowledged={}", config_.slot,
             progress_.bound(pipeline_.confirmable()).to_string(),
             pipeline_.tracker().inflight_events());
  try {
    co_await conn.end_copy(std::chrono::seconds(5));
  } catch (const std::exception& e) {
    log_->warn("event=end_copy_failed slot={} error={}", config_.slot, quoted(e.what()));
  }
}

// A stop with acknowledged transactions past the last passing publication check checks once
// more, so that the final confirmation covers them and the next start sends none of them
// again. On a connection of its own (a check cut short by the stop may have left the catalog
// connection mid-query). A check that fails here is the same exit 5 as while streaming; one
// that cannot run leaves the position where it was (those transactions are sent again).
awaitable<void> StopSequence::final_check() {
  // A stop, or a poison event (exit 3): what was delivered before it is confirmed. Not after a
  // publication problem (exit 5) or any other failure.
  const bool poison = run_.failed() && run_.fatal()->code == kExitPoisonEvent;
  if (!final_check_wanted(run_.stopping(), poison, pipeline_.rewinding(),
                          pipeline_.waiting_for_check())) {
    co_return;
  }
  co_await checker_.await_background(true);
  checker_.disconnect();
  try {
    co_await checker_.check();
  } catch (const FatalError& f) {
    fail_(f.fatal);
  } catch (const std::exception& e) {
    log_->warn("event=publication_check_failed slot={} confirmed={} error={}", config_.slot,
               pipeline_.confirmable().to_string(), quoted(e.what()));
  }
}

// At a stop: the last confirmable position is recorded before the final confirmation, so that
// the next start sends nothing delivered again. Bounded: `deadline`, at least a second. Only
// the relay's end: a rewind's session confirms again soon after.
awaitable<void> StopSequence::flush_progress(Clock::time_point deadline) {
  const pgoutput::Lsn target = pipeline_.confirmable();
  // A stop soon after a start or a rewind, while the comparison with the record is under way:
  // until it passed, the slot is told no more than where the session found it (bound()), also
  // when the record holds the target already (written by the session before, so nothing is
  // written below). A poison event refused alone at once after a rewind stopped the relay so
  // (Kinds/Poison.FailConfirmsTheGoodEventCommittedJustBeforeIt/InvalidRecord): the good event
  // acknowledged before it was not confirmed, and would have been sent again.
  if (progress_.records_progress() && !run_.broker_refused() && run_.ending()) {
    co_await progress_.await_verification(
        target, std::max(deadline, Clock::now() + std::chrono::seconds(1)));
  }
  if (!progress_flush_wanted(progress_.records_progress(), run_.broker_refused(), run_.ending(),
                             target, recorder_.acked())) {
    co_return;
  }
  const auto until = std::max(deadline, Clock::now() + std::chrono::seconds(1));
  // A stop soon after a start or a rewind, while the comparison with the record is under way:
  // it ends first (nothing is recorded before it), when something was delivered since the start.
  co_await progress_.await_verification(target, until);
  if (!progress_.verified()) co_return;
  recorder_.cancel_timer();
  recorder_.due_now();
  recorder_.write();
  if (recorder_.written() < target && !recorder_.making()) co_return;  // nothing under way
  // Also while the store is being made: its call holds the progress producer, which the stop
  // is about to end.
  while ((recorder_.acked() < target || recorder_.making()) && Clock::now() < until) {
    co_await change_.wait(until);
  }
}

}  // namespace outbox::relay
