#include "progress_check.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "outbox/common/log_text.hpp"
#include "outbox/relay/session_rules.hpp"
#include "outbox/relay/transactions.hpp"

namespace outbox::relay {
using common::quoted;
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

ProgressCheck::ProgressCheck(asio::any_io_executor io, const RelayConfig& config,
                             std::shared_ptr<spdlog::logger> log, Metrics& metrics,
                             const RunMachine& run, const ServerHistory& server,
                             ProgressRecorder& recorder, ChangeWait& change, Hooks hooks)
    : io_(io),
      config_(config),
      log_(std::move(log)),
      metrics_(metrics),
      run_(run),
      server_(server),
      recorder_(recorder),
      change_(change),
      hooks_(std::move(hooks)),
      timer_(io) {}

bool ProgressCheck::records_progress() const { return !exactly_once() && store_ != nullptr; }

ProgressCheck::Lsn ProgressCheck::bound(Lsn confirmable) const {
  return slot_confirm_bound(confirmable,
                            {records_progress(), verified_, session_from_, recorder_.acked()});
}

awaitable<void> ProgressCheck::start_session(const std::optional<pg::SlotState>& found,
                                             const pg::SystemInfo& sys) {
  ++session_gen_;
  verified_ = !found || store_ == nullptr;
  session_from_ = found ? found->confirmed_flush_lsn.value_or(Lsn{}) : Lsn{};
  if (verified_) co_return;
  if (exactly_once()) {
    co_await verify(*found, sys, session_gen_);
  } else {
    asio::co_spawn(io_, verify(*found, sys, session_gen_), asio::detached);
  }
}

awaitable<void> ProgressCheck::await_verification(Lsn target, Clock::time_point until) {
  if (verified_ || target <= session_from_) co_return;
  while (verifying_ && !verified_ && Clock::now() < until) {
    co_await change_.wait(until);
  }
}

// The progress record of this system and slot (progress_record.hpp), read on a thread of its
// own. The broker refusing the relay: exit 1; unreachable: retried with backoff (nothing is
// created or streamed meanwhile).
awaitable<ProgressRead> ProgressCheck::read_record(const std::string& before) {
  std::string key = hooks_.key();
  ProgressRead read = co_await store_->read(std::move(key), config_.connect_timeout);
  if (read.refused) {
    const Fatal refused{
        kExitError, read.error + "; " + hooks_.refusal_advice() + "; " + before + " did not go on"};
    hooks_.fail_refused(refused);
    throw FatalError(refused);
  }
  if (!read.error.empty()) {
    throw BrokerUnavailable("reading the progress record of slot " + config_.slot + " in " +
                            store_->where() + " before " + before + ": " + read.error);
  }
  if (read.last) recorder_.read(*read.last);
  co_return read;
}

std::string ProgressCheck::record_words() const {
  return "its progress record (" + store_->where() + ", key " + hooks_.key() + ")";
}

// A loss found on start: with --accept-slot-loss said as an error and counted, the stream goes
// on; without, the relay stops (exit 4) before anything is created or streamed.
void ProgressCheck::loss_found(const std::string& event, const std::string& what,
                               const std::string& from, const std::string& held, bool repairable) {
  if (repairable && gap_repair_unused_) {
    gap_repair_unused_ = false;
    ++metrics_.slot_gaps_repaired;
    log_->warn(
        "event=slot_gap_repaired slot={} store={} key={}: {}; the outbox rows of the gap "
        "that the broker lacked were published before streaming: {}",
        config_.slot, quoted(store_->where()), quoted(hooks_.key()), what, config_.gap_repaired);
    return;
  }
  if (config_.accept_slot_loss) {
    ++metrics_.slot_losses_accepted;
    log_->error(
        "event={} slot={} store={} key={}: {}; --accept-slot-loss goes on, and events "
        "committed after {} may be missing (outbox-relay reconcile finds and repairs them)",
        event, config_.slot, quoted(store_->where()), quoted(hooks_.key()), what, from);
    return;
  }
  throw FatalError({kExitSlotLost, what + ". " + held + ". " + store_->repair_advice(from)});
}

// The slot is missing and about to be created. The progress record says whether a slot of
// that name delivered before: dropped or invalidated while the relay was down
// (max_slot_wal_keep_size, idle_replication_slot_timeout, a failover to a server without it, a
// restore, an operator), it takes with it the events committed after its last confirmed
// position, which a new slot starts past. No record: a first start.
awaitable<std::optional<ProgressCheck::Lsn>> ProgressCheck::check_missing_slot() {
  const ProgressRead read = co_await read_record("creating slot " + config_.slot);
  if (!read.last && read.bad.empty()) co_return std::nullopt;
  const std::string last = read.last ? read.last->to_string() : "'" + read.bad + "'";
  loss_found("slot_loss_accepted",
             "replication slot " + config_.slot + " does not exist, but " + record_words() +
                 " shows that the relay delivered through " + last +
                 " from a slot of that name: it was dropped or invalidated while the relay was "
                 "down, and a new slot starts past the events committed since then",
             last, "Nothing was created or streamed");
  co_return read.last.value_or(Lsn{});
}

// The slot exists: it must not be ahead of what the relay recorded, and the server's WAL must
// reach the recorded position (compare_with_record()). The relay confirms the slot only through
// positions its record holds (at-least-once: bound(); exactly-once: the committed checkpoint),
// so a slot ahead of the record was moved by another client (pg_replication_slot_advance, a
// consumer of pg_logical_slot_get_changes, a relay with other flags) or made anew after the
// record: the events between were never delivered. A server whose WAL ends before the record on
// the record's timeline is not the one the relay delivered from (restored from a backup, another
// cluster at the same address). Returns the position the record moves to when accepted.
awaitable<std::optional<ProgressCheck::Lsn>> ProgressCheck::check_slot(const pg::SlotState& slot,
                                                                       const pg::SystemInfo& sys) {
  const ProgressRead read = co_await read_record("streaming from slot " + config_.slot);
  const Lsn confirmed = slot.confirmed_flush_lsn.value_or(Lsn{});
  const RecordVerdict verdict = compare_with_record(
      {read.last, read.timeline, confirmed, sys.xlogpos, sys.timeline, server_.on_standby()});
  switch (verdict) {
    case RecordVerdict::kNoRecord:
    case RecordVerdict::kAgrees:
      co_return std::nullopt;
    case RecordVerdict::kServerBehind: {
      const Lsn recorded = *read.last;
      loss_found(
          "server_behind_record_accepted",
          "the server's WAL ends at " + sys.xlogpos.to_string() + " on timeline " +
              std::to_string(sys.timeline) + ", before " + recorded.to_string() +
              ", through which " + record_words() +
              " shows the relay delivered on that timeline: the server was restored from "
              "a backup or is not the one the relay delivered from. The broker holds events of "
              "transactions this server does not have, and events it commits at positions "
              "up to " +
              recorded.to_string() + " may be taken for delivered",
          confirmed.to_string(), held_words(), false);
      co_return confirmed;
    }
    case RecordVerdict::kSlotAhead: {
      const Lsn recorded = *read.last;
      loss_found("slot_ahead_accepted",
                 "replication slot " + config_.slot + " is confirmed through " +
                     confirmed.to_string() + ", past " + recorded.to_string() + ", through which " +
                     record_words() +
                     " shows the relay delivered: another client moved the slot, or it was "
                     "dropped and made anew since; the events committed between " +
                     recorded.to_string() + " and " + confirmed.to_string() +
                     " were never delivered and the slot would skip them",
                 recorded.to_string(), held_words());
      co_return confirmed;
    }
  }
  co_return std::nullopt;
}

// What a start stopped by check_slot() left as it was: exactly-once checks before anything is
// streamed; at-least-once beside the stream, confirming nothing meanwhile.
std::string ProgressCheck::held_words() const {
  return exactly_once() ? "Nothing was streamed"
                        : "Neither the slot nor the progress record moved (events read "
                          "meanwhile were sent and will be sent again)";
}

// check_slot() while the stream holds the slot (status updates go on); the broker away is
// waited out here with backoff, on the same connection. Exactly-once awaits it before
// Transactions::prepare(): nothing is committed, so the checkpoint cannot move past a gap
// unseen. At-least-once runs it beside the stream: events are produced meanwhile, but neither
// the slot nor the record moves until it passed (bound(), ProgressRecorder). Ends with its
// session (`gen`), a stop or a failure; a loss found is the relay's failure.
awaitable<void> ProgressCheck::verify(pg::SlotState slot, pg::SystemInfo sys, std::uint64_t gen) {
  // A stop or a failure lets a comparison under way finish (the stop sequence waits for it, to
  // record what was delivered), but nothing is tried again and no loss is recorded.
  auto current = [&] { return gen == session_gen_ && !run_.ending(); };
  verifying_ = true;
  struct Done {
    ProgressCheck& self;
    ~Done() {
      self.verifying_ = false;
      self.change_.notify();
    }
  } done{*this};
  int attempt = 0;
  while (current()) {
    std::string error;
    try {
      const std::optional<Lsn> accepted = co_await check_slot(slot, sys);
      if (gen != session_gen_ || (accepted && !current())) co_return;
      if (accepted) co_await record_accepted(*accepted);
      if (gen != session_gen_) co_return;
      verified_ = true;
      gap_repair_unused_ = false;  // the start's comparison is done
      log_->info("event=progress_verified slot={} store={} slot_confirmed={}", config_.slot,
                 quoted(store_->where()), slot.confirmed_flush_lsn.value_or(Lsn{}).to_string());
      recorder_.write();
      co_return;
    } catch (const BrokerUnavailable& e) {
      error = e.what();
    } catch (const FatalError& f) {
      if (!current()) co_return;
      if (exactly_once()) throw;
      hooks_.fail(f.fatal);
      co_return;
    }
    if (!current()) co_return;
    const auto delay = hooks_.backoff(attempt++);
    if (exactly_once()) hooks_.waiting_for_broker("waiting for the broker: " + error);
    log_->warn("event=kafka_unavailable slot={} attempt={} in_ms={} reason={}", config_.slot,
               attempt, delay.count(), quoted(error));
    co_await wait(Clock::now() + delay);
  }
}

// Waits on the comparison's timer until `until`, a progress record's report, or a stop.
awaitable<void> ProgressCheck::wait(Clock::time_point until) {
  timer_.expires_at(until);
  boost::system::error_code ec;
  co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
}

awaitable<void> ProgressCheck::record_accepted(Lsn lsn) {
  co_await recorder_.ensure();
  if (!recorder_.ready()) {
    throw BrokerUnavailable("making " + store_->where() + " for the progress record of slot " +
                            config_.slot);
  }
  recorder_.due_now();
  recorder_.write(lsn);
  const auto deadline = Clock::now() + config_.connect_timeout;
  while (recorder_.acked() < lsn && !run_.ending() && Clock::now() < deadline) {
    co_await wait(deadline);
  }
  if (recorder_.acked() < lsn && !run_.ending()) {
    throw BrokerUnavailable("writing the progress record of slot " + config_.slot + " to " +
                            store_->where() + ": " +
                            recorder_.error().value_or("no acknowledgement"));
  }
  log_->info("event=progress_recorded slot={} lsn={}", config_.slot, lsn.to_string());
}

}  // namespace outbox::relay
