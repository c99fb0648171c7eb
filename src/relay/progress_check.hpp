// The slot compared with the progress record (DESIGN.md "The one rule"), at every start and
// reconnect: a missing slot with a record, a slot confirmed past the record (moved by another
// client, or made anew), or a server whose WAL ends before the record on its timeline (a
// restore) is a loss named in one line, exit 4, unless --accept-slot-loss (logged as an error,
// counted, and the record moved) or a gap repaired at start (--gap-repair-column). The decision
// is compare_with_record() (session_rules.hpp); this runs it: reads the record (the broker away:
// waited out with backoff), words the loss, moves the record when it is accepted, and bounds
// what the slot is told until the comparison passed (slot_confirm_bound()). Exactly-once awaits
// the comparison before its transactions start; at-least-once runs it beside the stream.
// Private to the relay; the io thread only.
#pragma once

// ProgressRecorder's header brings Asio's timer and awaitable, spdlog's logger, the standard
// library's and the ProgressStore.
#include "change_wait.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/run_machine.hpp"
#include "progress_recorder.hpp"
#include "server_history.hpp"

namespace outbox::relay {

class ProgressCheck {
 public:
  using Lsn = pgoutput::Lsn;
  using Clock = ProgressRecorder::Clock;

  // What the relay lends it.
  struct Hooks {
    std::function<std::string()> key;             // SYSTEM_ID/SLOT
    std::function<void(Fatal)> fail;              // a loss found beside the stream
    std::function<void(Fatal)> fail_refused;      // the broker refused the relay's credentials
    std::function<std::string()> refusal_advice;  // the sink's, for a refused read
    std::function<std::chrono::milliseconds(int attempt)> backoff;
    std::function<void(const std::string&)> waiting_for_broker;  // exactly-once's state
  };

  ProgressCheck(boost::asio::any_io_executor io, const RelayConfig& config,
                std::shared_ptr<spdlog::logger> log, Metrics& metrics, const RunMachine& run,
                const ServerHistory& server, ProgressRecorder& recorder, ChangeWait& change,
                Hooks hooks);

  // The sink's store (made with the sink, after this); null: nothing is recorded or compared.
  void attach(ProgressStore* store) { store_ = store; }

  // The slot is missing and about to be created: whether a slot of that name delivered before
  // (the record). Returns the recorded position when the loss is accepted; throws FatalError
  // (exit 4) when not, BrokerUnavailable when the record cannot be read.
  boost::asio::awaitable<std::optional<Lsn>> check_missing_slot();
  // A loss accepted: the record moves to `lsn` at once, so that the next start does not stop
  // on the same loss again.
  boost::asio::awaitable<void> record_accepted(Lsn lsn);

  // The stream of a new session started: a slot that existed (`found`) is compared with the
  // record, awaited (exactly-once) or beside the stream (at-least-once); none, or no store:
  // nothing to compare. Until it passed, the slot stays where the session found it (bound()).
  boost::asio::awaitable<void> start_session(const std::optional<pg::SlotState>& found,
                                             const pg::SystemInfo& sys);

  // The position the slot may be told (slot_confirm_bound()).
  Lsn bound(Lsn confirmable) const;
  bool has_store() const { return store_ != nullptr; }
  // At-least-once with a store: the slot is confirmed only through positions the record holds.
  bool records_progress() const;
  bool verified() const { return verified_; }
  // A stop soon after a start or a rewind while the comparison is under way: it ends first
  // (nothing is recorded before it), when something past the session's start is to be recorded.
  // Bounded by `until`.
  boost::asio::awaitable<void> await_verification(Lsn target, Clock::time_point until);
  // A progress record stored, or a stop: the comparison's waits look again.
  void wake() { timer_.cancel(); }

 private:
  boost::asio::awaitable<void> verify(pg::SlotState slot, pg::SystemInfo sys, std::uint64_t gen);
  boost::asio::awaitable<std::optional<Lsn>> check_slot(const pg::SlotState& slot,
                                                        const pg::SystemInfo& sys);
  boost::asio::awaitable<ProgressRead> read_record(const std::string& before);
  boost::asio::awaitable<void> wait(Clock::time_point until);
  void loss_found(const std::string& event, const std::string& what, const std::string& from,
                  const std::string& held, bool repairable = true);
  std::string record_words() const;
  std::string held_words() const;
  bool exactly_once() const { return config_.delivery == DeliveryMode::kExactlyOnce; }

  boost::asio::any_io_executor io_;
  const RelayConfig& config_;
  std::shared_ptr<spdlog::logger> log_;
  Metrics& metrics_;
  const RunMachine& run_;
  const ServerHistory& server_;
  ProgressRecorder& recorder_;
  ChangeWait& change_;
  Hooks hooks_;
  ProgressStore* store_ = nullptr;
  boost::asio::steady_timer timer_;  // wait()
  // RelayConfig::gap_repaired, for the first loss found only.
  bool gap_repair_unused_ = !config_.gap_repaired.empty();
  bool verified_ = false;   // the slot was compared with the record this session
  bool verifying_ = false;  // verify() runs
  Lsn session_from_;        // the slot's confirmed position when the session began
  std::uint64_t session_gen_ = 0;
};

}  // namespace outbox::relay
