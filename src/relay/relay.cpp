#include "outbox/relay/relay.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <optional>
#include <random>
#include <unordered_set>
#include <variant>

#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"
#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/ack_tracker.hpp"
#include "outbox/relay/read_pacer.hpp"

namespace outbox::relay {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;
using pgoutput::Lsn;

namespace {

// A condition that ends the relay with a specific exit code and message.
struct Fatal {
  int code;
  std::string message;
};

struct FatalError : std::runtime_error {
  explicit FatalError(Fatal f) : std::runtime_error(f.message), fatal(std::move(f)) {}
  Fatal fatal;
};

// A log field value inside double quotes: inner quotes and backslashes escaped, so that
// key="value" fields stay parseable.
std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  out += '"';
  return out;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::get("relay");
  return l ? l : spdlog::default_logger()->clone("relay");
}

// Errors after which reconnecting can help (pg::classify): connection trouble, server shutting
// down or starting, too many connections, slot held by another relay (standby).
bool retryable(const pg::Error& e) { return pg::retryable(pg::classify(e)); }

// kResolveRelation: a Relation message of a relation that may be a partition of the outbox created
// after the last publication check; handle the frame again once the catalog was read.
// kWaitDelivery: the event must wait for delivery reports (librdkafka's queue is full, or a record
// sent alone must be acknowledged first); handle the frame again after one.
enum class Handled { kDone, kWaitDelivery, kResolveRelation };

// Shortest time between two publication checks while the confirmed position waits for one.
constexpr std::chrono::milliseconds kMinCheckGap{1000};

// Marks the opaque of a dead-letter record (transaction sequence numbers stay far below).
constexpr std::uint64_t kDlqFlag = 1ULL << 63;
// Marks a record sent again alone, to tell a bad record from the good ones rejected with it.
constexpr std::uint64_t kIsolatedFlag = 1ULL << 62;

// reason_code of an event dead-lettered because an earlier event of its aggregate was.
constexpr std::string_view kParked = "PARKED";

// Lets a set of strings be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view key) const noexcept {
    return std::hash<std::string_view>{}(key);
  }
};

// Frames handled between two turns of the io_context.
constexpr std::size_t kYieldFrames = 256;

}  // namespace

class Relay::Impl {
 public:
  Impl(asio::io_context& io, RelayConfig config)
      : io_(io),
        config_(std::move(config)),
        log_(make_logger()),
        mapper_(config_.mapper),
        wake_(io),
        pace_timer_(io),
        status_timer_(io),
        backoff_timer_(io),
        check_timer_(io),
        rng_(std::random_device{}()) {
    // Created here so that a bad -X property fails before anything runs.
    producer_ = make_producer();
  }

  awaitable<int> run() {
    int attempt = 0;
    bool standby_logged = false;
    while (!stopping_ && !fatal_) {
      bool streamed = false;
      std::string reason;
      if (!standby_logged) set_state(State::kConnecting, "connecting to PostgreSQL");
      try {
        co_await session(streamed);
      } catch (const FatalError& f) {
        fail(f.fatal);
      } catch (const pg::Error& e) {
        if (!retryable(e)) {
          fail({kExitError, e.what()});
        } else if (pg::classify(e) == pg::ErrorKind::kSlotInUse) {
          reason = "slot in use by another connection";
          set_state(State::kStandby, "standby: " + std::string(e.what()));
          if (!standby_logged) {
            log_->info("event=standby slot={} reason={}: waiting to take over", config_.slot,
                       quoted(e.what()));
            standby_logged = true;
          }
        } else {
          reason = e.what();
        }
      } catch (const boost::system::system_error& e) {
        if (!stopping_ && !fatal_) fail({kExitError, std::string("I/O error: ") + e.what()});
      } catch (const std::exception& e) {
        fail({kExitError, std::string("unexpected error: ") + e.what()});
      }
      status_timer_.cancel();
      cancel_check_timer();
      tracker_.abandon_open();
      txn_.reset();
      conn_.reset();
      catalog_.reset();
      if (stopping_ || fatal_) break;
      if (rewinding_) {
        rewind();
        reason = "rewinding after a batch refused by the broker";
        attempt = 0;
      }
      ++metrics_.reconnects;
      if (metrics_.state != State::kStandby) set_state(State::kConnecting, reason);
      if (streamed) {
        attempt = 0;
        standby_logged = false;
      }
      // A standby retries at a steady short pace so that it takes over soon after the active
      // relay lets go; other failures back off exponentially.
      auto delay = metrics_.state == State::kStandby ? jittered(1000) : backoff(attempt++);
      if (metrics_.state != State::kStandby) {
        log_->warn("event=reconnect slot={} attempt={} in_ms={} reason={}", config_.slot, attempt,
                   delay.count(), quoted(reason));
      }
      backoff_timer_.expires_after(delay);
      boost::system::error_code ec;
      co_await backoff_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    status_timer_.cancel();
    if (tracker_.inflight_events() > 0) {
      log_->warn(
          "event=stopped_with_unacknowledged slot={} events={} confirmed={}: they will be sent "
          "again on the next start",
          config_.slot, tracker_.inflight_events(), confirm_lsn().to_string());
    }
    isolation_producer_.reset();
    producer_.reset();
    if (fatal_) {
      log_->error("event=fatal slot={} exit_code={} confirmed={} error={}", config_.slot,
                  fatal_->code, confirm_lsn().to_string(), quoted(fatal_->message));
      co_return fatal_->code;
    }
    log_->info("event=stopped slot={} confirmed={}", config_.slot, confirm_lsn().to_string());
    co_return kExitOk;
  }

  const Metrics& metrics() {
    metrics_.confirmed_lsn = confirm_lsn();
    metrics_.publication_verified_lsn = verified_lsn_;
    metrics_.received_lsn = received_;
    metrics_.server_wal_end = server_wal_end_;
    metrics_.events_in_flight = tracker_.inflight_events();
    metrics_.bytes_in_flight = tracker_.inflight_bytes();
    metrics_.transactions_confirmed = tracker_.confirmed_transactions();
    auto oldest = tracker_.oldest_unacked_commit_time_ms();
    metrics_.oldest_unacked_age_seconds =
        oldest ? std::max<double>(0, static_cast<double>(now_unix_ms() - *oldest) / 1000.0) : 0;
    metrics_.producer_healthy = !fatal_;
    return metrics_;
  }

  const RelayConfig& config() const { return config_; }

  void request_stop() {
    if (stopping_) return;
    set_state(State::kStopping, "stopping");
    log_->info("event=stopping slot={}", config_.slot);
    stopping_ = true;
    wake_all();
  }

 private:
  std::chrono::milliseconds backoff(int attempt) {
    // Capped exponential backoff with jitter, so several relays do not retry in lockstep.
    return jittered(std::min<std::int64_t>(30'000, 200LL << std::min(attempt, 8)));
  }

  std::chrono::milliseconds jittered(std::int64_t base_ms) {
    std::uniform_int_distribution<std::int64_t> jitter(base_ms / 2, base_ms);
    return std::chrono::milliseconds(jitter(rng_));
  }

  void set_state(State s, std::string reason) {
    metrics_.state = s;
    metrics_.state_reason = std::move(reason);
  }

  void fail(Fatal f) {
    if (!fatal_) fatal_ = std::move(f);
    wake_all();
  }

  // The session ends: stop, failure, or a rewind after a refused batch.
  bool leaving() const { return stopping_ || fatal_ || rewinding_; }

  void wake_all() {
    if (conn_) conn_->cancel();
    if (catalog_) catalog_->cancel();
    wake_.cancel();
    pace_timer_.cancel();
    backoff_timer_.cancel();
  }

  // Waits until notified (a delivery, a stop) or `until`.
  awaitable<void> wait_for_change(Clock::time_point until) {
    waiting_ = true;
    wake_.expires_at(until);
    boost::system::error_code ec;
    co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
    waiting_ = false;
  }

  awaitable<void> session(bool& streamed) {
    conn_ = std::make_unique<pg::ReplicationConnection>(io_.get_executor());
    co_await conn_->connect(config_.conninfo, config_.connect_timeout);
    pg::SystemInfo sys = co_await conn_->identify_system(config_.connect_timeout);
    if (system_id_ && *system_id_ != sys.system_id) {
      throw FatalError({kExitSlotLost, "connected to a different PostgreSQL system (id " +
                                           sys.system_id + ", was " + *system_id_ +
                                           "): the slot's history does not carry over"});
    }
    system_id_ = sys.system_id;
    co_await ensure_publication_and_slot();
    // Before the stream starts, on every connect: refuse a publication that hides outbox inserts.
    co_await check_publication();
    const std::string command = pg::start_replication_command(
        config_.slot, config_.publication,
        [&](const std::string& v) { return conn_->quote_literal(v); },
        [&](const std::string& v) { return conn_->quote_identifier(v); });
    co_await conn_->start_replication(command, config_.connect_timeout);
    had_slot_ = true;
    streamed = true;
    set_state(State::kStreaming, "");
    log_->info("event=streaming slot={} publication={} server_wal={} timeline={}", config_.slot,
               config_.publication, sys.xlogpos.to_string(), sys.timeline);
    arm_status_timer();
    schedule_check();
    try {
      co_await stream();
    } catch (const FatalError& f) {
      fail(f.fatal);
    } catch (const std::logic_error& e) {
      fail({kExitError, std::string("broken invariant: ") + e.what()});
    }
    // Only stop or failure leave the loop normally: run the shutdown sequence.
    co_await finish();
  }

  // The publication and the slot (pg::SlotBootstrap, as the setup command): created when missing
  // unless --no-create; a slot that vanished after the relay had it, or was invalidated, is a
  // loss (kExitSlotLost). The publication first, logged before the slot is looked at.
  awaitable<void> ensure_publication_and_slot() {
    const auto& m = config_.mapper;
    auto refused = [&](pg::BootstrapRefusal r, const std::optional<pg::SlotState>& slot) -> Fatal {
      switch (r) {
        case pg::BootstrapRefusal::kPublicationMissing:
          return {kExitError, "publication " + config_.publication +
                                  " does not exist and --no-create was given"};
        case pg::BootstrapRefusal::kSlotMissing:
          return {kExitError,
                  "replication slot " + config_.slot + " does not exist and --no-create was given"};
        case pg::BootstrapRefusal::kSlotVanished:
          return {kExitSlotLost,
                  "replication slot " + config_.slot +
                      " disappeared while the relay was using it; events committed after its last "
                      "confirmed position " +
                      confirm_lsn().to_string() +
                      " may never reach Kafka. Recreate the slot (outbox-relay recreates it when "
                      "started anew) and reconcile the outbox rows committed since then."};
        case pg::BootstrapRefusal::kSlotDroppedMeanwhile:
          return {kExitError, "replication slot " + config_.slot +
                                  " was created by another connection while the relay created "
                                  "it, and dropped again"};
        case pg::BootstrapRefusal::kSlotNotPgoutput:
          return {kExitError, "replication slot " + config_.slot + " uses plugin " +
                                  (slot ? slot->plugin.value_or("?") : "?") + ", not pgoutput"};
        case pg::BootstrapRefusal::kSlotLost:
          return {kExitSlotLost,
                  "replication slot " + config_.slot +
                      " was invalidated (wal_status lost, confirmed " +
                      (slot && slot->confirmed_flush_lsn ? slot->confirmed_flush_lsn->to_string()
                                                         : "?") +
                      "): the WAL it needed was removed (max_slot_wal_keep_size), so outbox rows "
                      "committed since then were never relayed. Drop the slot, start the relay to "
                      "create a new one, and reconcile the outbox rows committed after that "
                      "position."};
      }
      return {kExitError, "replication slot " + config_.slot + " cannot be used"};
    };
    pg::BootstrapOptions options{publication_target(), config_.slot, config_.create, had_slot_};
    const std::array<pg::BootstrapPart, 2> parts{pg::BootstrapPart::kPublication,
                                                 pg::BootstrapPart::kSlot};
    for (const pg::BootstrapPart part : parts) {
      options.part = part;
      const pg::BootstrapResult r =
          co_await pg::ensure_slot_and_publication(*conn_, options, config_.connect_timeout);
      if (r.created_publication) {
        log_->info("event=created_publication publication={} table={}.{}", config_.publication,
                   m.schema, m.table);
      }
      if (r.created_slot) log_->info("event=created_slot slot={}", config_.slot);
      if (r.refusal) throw FatalError(refused(*r.refusal, r.slot));
    }
  }

  pg::PublicationTarget publication_target() const {
    return {config_.publication, config_.mapper.schema, config_.mapper.table};
  }

  // The slot is confirmed up to what Kafka acknowledged, and never past the WAL position of the
  // last publication check that passed: inserts hidden by a publication altered since are
  // then at least never confirmed.
  Lsn confirm_lsn() const { return std::min(tracker_.confirmable(), verified_lsn_); }

  // Reads the catalog on the plain connection: the publication must publish every insert into
  // the table, and must not have been written since the previous check. Throws FatalError
  // (kExitConfig) otherwise, pg::Error when the catalog cannot be read.
  awaitable<void> check_publication() {
    const auto timeout = config_.connect_timeout;
    if (!catalog_ || !catalog_->connected()) {
      catalog_ = std::make_unique<pg::ReplicationConnection>(io_.get_executor());
      co_await catalog_->connect(config_.conninfo, timeout, /*replication=*/false);
    }
    // Read before the check's snapshot: every commit before this position is visible to it.
    pg::Rows at = co_await catalog_->exec("SELECT pg_catalog.pg_current_wal_lsn()::text", timeout);
    std::optional<Lsn> before;
    if (at.size() == 1 && at[0].size() == 1 && at[0][0]) before = Lsn::parse(*at[0][0]);
    if (!before) {
      const bool one = at.size() == 1 && at[0].size() == 1 && at[0][0];
      throw pg::Error::unexpected_reply(
          "SELECT pg_current_wal_lsn()", "one LSN",
          one ? "'" + *at[0][0] + "'" : std::to_string(at.size()) + " rows");
    }
    const pg::PublicationTarget target = publication_target();
    pg::Rows rows = co_await catalog_->exec(
        pg::publication_check_sql(target,
                                  [&](const std::string& v) { return catalog_->quote_literal(v); }),
        timeout);
    pg::PublicationCheck check = pg::assess_publication(target, rows);
    last_check_ = Clock::now();
    if (!check.ok()) {
      throw FatalError({kExitConfig, check.problem + "; slot " + config_.slot +
                                         " is not confirmed past " + confirm_lsn().to_string()});
    }
    if (fingerprint_ && *fingerprint_ != check.fingerprint) {
      throw FatalError(
          {kExitConfig,
           "publication " + config_.publication + " was altered while the relay ran (its " +
               "settings or its rows for table " + target.schema + "." + target.table +
               " were written after the check at " + verified_lsn_.to_string() +
               "): inserts committed in between may have been hidden from the stream, so slot " +
               config_.slot + " is not confirmed past " + confirm_lsn().to_string() +
               ". Compare the outbox with Kafka (outbox-relay reconcile), then start the relay "
               "again"});
    }
    if (!fingerprint_) {
      log_->info(
          "event=publication_verified slot={} publication={} table={}.{} partitioned={} "
          "published_relations={} at={}",
          config_.slot, config_.publication, target.schema, target.table, check.partitioned,
          check.published_relids.size(), before->to_string());
    }
    fingerprint_ = check.fingerprint;
    outbox_partitioned_ = check.partitioned;
    tree_relids_ =
        std::unordered_set<std::uint32_t>(check.tree_relids.begin(), check.tree_relids.end());
    if (*before > verified_lsn_) verified_lsn_ = *before;
    ++metrics_.publication_checks;
  }

  // A check while streaming. A check that cannot run ends the session (reconnect with backoff):
  // the catalog and the stream come from the same server, and a server shutting down waits for
  // the slot to be confirmed up to what it sent, which waits for a check; after the reconnect
  // the stream resumes at the confirmed position, so nothing is lost.
  awaitable<void> periodic_check() {
    const Lsn was = confirm_lsn();
    try {
      co_await check_publication();
    } catch (const boost::system::system_error& e) {
      // Cancelled by a stop, a failure or a rewind: the stop sequence goes on.
      if (e.code() != asio::error::operation_aborted || !leaving()) throw;
      co_return;
    } catch (const pg::Error& e) {
      log_->warn("event=publication_check_failed slot={} confirmed={} error={}: reconnecting",
                 config_.slot, confirm_lsn().to_string(), quoted(e.what()));
      throw;
    }
    schedule_check();
    if (confirm_lsn() > was) send_status();
  }

  // Arms the check timer: soon while the confirmed position waits for a check, else at the
  // check interval.
  void schedule_check() {
    if (!conn_ || leaving()) return;
    const bool waiting_for_check = tracker_.confirmable() > verified_lsn_;
    const auto due =
        last_check_ + (waiting_for_check ? kMinCheckGap : config_.publication_check_interval);
    if (check_armed_ && check_timer_.expiry() <= due) return;
    check_armed_ = true;
    check_timer_.expires_at(due);
    check_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // re-armed or cancelled
      check_armed_ = false;
      check_due_ = true;
      if (reading_wait_ && conn_) conn_->cancel();
      if (waiting_) wake_.cancel();
    });
  }

  void cancel_check_timer() {
    check_timer_.cancel();
    check_armed_ = false;
    check_due_ = false;
  }

  // A relation the last check did not know, while the outbox is partitioned: read the catalog
  // again (it may be a partition created since), and whether the relation still exists.
  awaitable<void> resolve_relation(std::uint32_t relid) {
    co_await check_publication();
    if (tree_relids_.contains(relid)) co_return;
    pg::Rows rows = co_await catalog_->exec(
        "SELECT 1 FROM pg_catalog.pg_class WHERE oid = " + std::to_string(relid),
        config_.connect_timeout);
    if (rows.empty()) {
      vanished_relids_.insert(relid);
    } else {
      other_relids_.insert(relid);
    }
  }

  // Why a change of the stream is not an event; the label of outbox_relay_skipped_changes_total.
  enum class Skip : std::uint8_t { kOtherTable, kUpdate, kDelete, kTruncate };
  static constexpr std::array<const char*, 4> kSkipReasons = {"other_table", "update", "delete",
                                                              "truncate"};

  void count_skip(std::uint32_t relid, Skip skip, std::string_view table) {
    const char* reason = kSkipReasons[static_cast<std::size_t>(skip)];
    auto it = metrics_.skipped_changes.find(std::string_view(reason));
    if (it == metrics_.skipped_changes.end()) {
      it = metrics_.skipped_changes.emplace(reason, 0).first;
    }
    ++it->second;
    // Once per relation and reason: a skip is never invisible, and never floods the log.
    if (logged_skips_.insert((std::uint64_t{relid} << 2) | static_cast<std::uint64_t>(skip))
            .second) {
      log_->info(
          "event=skipping slot={} reason={} table={} relid={}: not an insert into {}.{}; "
          "counted in outbox_relay_skipped_changes_total, logged once",
          config_.slot, reason, table.empty() ? "?" : table, relid, config_.mapper.schema,
          config_.mapper.table);
    }
  }

  awaitable<void> stream() {
    std::size_t handled = 0;  // frames handled since the last yield to the io_context
    ReadPacer pacer(config_.read_pause);
    for (;;) {
      if (leaving()) co_return;
      if (check_due_) {
        check_due_ = false;
        co_await periodic_check();
        continue;
      }
      if (backpressured()) {
        // Stop reading the socket until acknowledgements free room; status updates go on.
        set_state(State::kBackpressured, "in-flight bound reached");
        auto t0 = Clock::now();
        co_await wait_for_change(t0 + config_.status_interval);
        metrics_.backpressure_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        if (!backpressured() && !stopping_) set_state(State::kStreaming, "");
        continue;
      }
      std::optional<std::span<const std::byte>> frame = conn_->try_read();
      if (!frame) {
        if (pacer.busy(Clock::now())) {
          // Its own timer: delivery reports, which wake wait_for_change(), must not cut it short.
          auto read_now = [&] {
            const pg::ReplicationConnection::Backlog b = conn_->backlog();
            return pacer.read_now(b.queued, b.capacity);
          };
          if (!read_now()) {
            pace_timer_.expires_after(pacer.pause());
            boost::system::error_code ec;
            co_await pace_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
            read_now();
          }
          if (leaving()) co_return;
          conn_->read_available();
          continue;
        }
        try {
          reading_wait_ = true;
          co_await conn_->wait_readable();
          reading_wait_ = false;
        } catch (const boost::system::system_error& e) {
          reading_wait_ = false;
          if (e.code() != asio::error::operation_aborted || !(leaving() || check_due_)) {
            throw;
          }
        }
        continue;
      }
      pacer.on_frame(frame->size());
      if (++handled % kYieldFrames == 0) {
        // A stream that never runs dry must not starve delivery reports and status updates.
        // The frame stays valid: nothing reads the connection meanwhile.
        co_await asio::post(io_.get_executor(), use_awaitable);
      }
      for (Handled h; (h = handle_frame(*frame)) != Handled::kDone;) {
        if (h == Handled::kResolveRelation) {
          try {
            co_await resolve_relation(resolving_relid_);
          } catch (const boost::system::system_error& e) {
            if (e.code() != asio::error::operation_aborted || !leaving()) throw;
          }
        } else {
          // Wait for delivery reports (room in librdkafka's queue, or the record sent alone).
          co_await wait_for_change(Clock::now() + std::chrono::milliseconds(100));
        }
        if (leaving()) co_return;
      }
    }
  }

  // Hysteresis: reading stops at the bounds and resumes only once half of them is free, so the
  // reader drains the socket in long bursts instead of waking for every acknowledgement.
  bool backpressured() {
    if (!paused_) {
      paused_ = tracker_.inflight_events() >= config_.max_inflight_events ||
                tracker_.inflight_bytes() >= config_.max_inflight_bytes;
    } else {
      paused_ = !below_low_watermark();
    }
    return paused_;
  }

  bool below_low_watermark() const {
    return tracker_.inflight_events() <= config_.max_inflight_events / 2 &&
           tracker_.inflight_bytes() <= config_.max_inflight_bytes / 2;
  }

  Handled handle_frame(std::span<const std::byte> frame) {
    pgoutput::CopyDecodeResult cr = pgoutput::decode_copy_message(frame);
    if (auto* err = std::get_if<pgoutput::DecodeError>(&cr)) {
      throw FatalError({kExitError, "undecodable replication frame after " + received_.to_string() +
                                        ": " + err->reason + " (offset " +
                                        std::to_string(err->offset) + ")"});
    }
    auto& cm = std::get<pgoutput::CopyMessage>(cr);
    if (auto* k = std::get_if<pgoutput::Keepalive>(&cm)) {
      on_keepalive(*k);
      return Handled::kDone;
    }
    auto& x = std::get<pgoutput::XLogData>(cm);
    if (x.wal_end > received_) received_ = x.wal_end;
    // Inserts decode into their own Message so that its tuple storage is reused from one event
    // to the next; Begin/Commit in between would otherwise replace it.
    pgoutput::Message& msg =
        !x.payload.empty() && x.payload[0] == std::byte{'I'} ? insert_msg_ : msg_;
    if (const pgoutput::DecodeError* err = pgoutput::decode_into(x.payload, msg, decode_error_)) {
      throw FatalError({kExitError, "pgoutput message at " + x.wal_start.to_string() +
                                        " cannot be decoded: " + err->reason + " (offset " +
                                        std::to_string(err->offset) + ")"});
    }
    return std::visit([&](auto& m) { return on_message(m, x); }, msg);
  }

  void on_keepalive(const pgoutput::Keepalive& k) {
    if (k.wal_end > server_wal_end_) server_wal_end_ = k.wal_end;
    // Everything received before this keepalive has been handled; with nothing in flight its
    // walEnd is safe to confirm, which keeps an idle slot from retaining WAL.
    bool advanced = !tracker_.has_open() && tracker_.advance_idle(k.wal_end);
    if (advanced) schedule_check();
    // The server sends an unrequested keepalive when our reported position lags its own while it
    // waits for WAL (e.g. busy unpublished tables): answer soon so the slot does not hold WAL.
    if (k.reply_requested ||
        (advanced && Clock::now() - last_status_sent_ >= std::chrono::seconds(1))) {
      send_status();
    }
  }

  Handled on_message(const pgoutput::Begin& b, const pgoutput::XLogData&) {
    commit_lsn_ = b.final_lsn;
    commit_time_ms_ = pgoutput::to_unix_millis(b.commit_time);
    metrics_.commit_to_read_seconds.observe(
        static_cast<double>(std::max<std::int64_t>(0, now_unix_ms() - commit_time_ms_)) / 1000.0);
    txn_ = tracker_.begin(b.final_lsn, commit_time_ms_);
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Commit& c, const pgoutput::XLogData&) {
    if (!txn_)
      throw FatalError({kExitError, "Commit at " + c.commit_lsn.to_string() + " without Begin"});
    tracker_.commit(*txn_, c.end_lsn);
    txn_.reset();
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Relation& r, const pgoutput::XLogData&) {
    bool outbox = mapper_.is_outbox_name(r) || tree_relids_.contains(r.relid);
    if (!outbox && outbox_partitioned_ && !other_relids_.contains(r.relid)) {
      if (!vanished_relids_.contains(r.relid)) {
        resolving_relid_ = r.relid;
        return Handled::kResolveRelation;
      }
      // Dropped since it was written to: with the outbox's columns it was most likely one of its
      // partitions (dropped after its retention). Relay rather than lose.
      outbox = mapper_.has_outbox_columns(r);
      log_->warn(
          "event=vanished_relation slot={} relid={} table={}.{} treated_as_outbox={}: the "
          "relation no longer exists, so whether it was a partition of {}.{} cannot be "
          "read from the catalog; judged by its columns",
          config_.slot, r.relid, r.nspname, r.relname, outbox, config_.mapper.schema,
          config_.mapper.table);
    }
    mapper_.on_relation(r, outbox);
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Update& u, const pgoutput::XLogData&) {
    count_skip(u.relid, Skip::kUpdate, mapper_.relation_name(u.relid));
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Delete& d, const pgoutput::XLogData&) {
    count_skip(d.relid, Skip::kDelete, mapper_.relation_name(d.relid));
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Truncate& t, const pgoutput::XLogData&) {
    for (std::uint32_t relid : t.relids)
      count_skip(relid, Skip::kTruncate, mapper_.relation_name(relid));
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Insert& ins, const pgoutput::XLogData& x) {
    if (!txn_) {
      throw FatalError(
          {kExitError, "Insert at " + x.wal_start.to_string() + " outside a transaction"});
    }
    // Nothing passes a record sent alone before its report: it may yet turn out to be poison.
    if (isolation_inflight_) return Handled::kWaitDelivery;
    mapping::MapResult mapped = mapper_.map_insert(ins);
    if (auto* err = std::get_if<mapping::MapError>(&mapped)) {
      std::string reason = "column " + err->column + " " + err->reason;
      if (err->column.empty()) reason = err->reason;
      Poison p{err->id,    err->aggregateid, err->payload,    err->type, err->topic,
               err->table, reason,           "MAPPING_ERROR", false};
      return poison_in_stream(p);
    }
    if (auto* other = std::get_if<mapping::NotOutbox>(&mapped)) {
      count_skip(ins.relid, Skip::kOtherTable, other->table);
      return Handled::kDone;
    }
    const auto& ev = std::get<mapping::Event>(mapped);
    if (!parked_.empty() || parked_null_key_) {
      if (is_parked(ev.key)) {
        Poison p{ev.id,
                 ev.key,
                 ev.value,
                 ev.type,
                 ev.topic,
                 config_.mapper.schema + "." + config_.mapper.table,
                 "parked: an earlier event of aggregate " + std::string(ev.key.value_or("(null)")) +
                     " was dead-lettered, so its later events follow it to the dead-letter "
                     "topic (none may pass it)",
                 std::string(kParked),
                 false};
        return poison_in_stream(p);
      }
    }
    headers_[0] = {"id", ev.id};
    std::size_t nheaders = 1;
    if (ev.type) headers_[nheaders++] = {"type", *ev.type};
    kafka::Record rec{ev.topic, ev.key, ev.value,
                      std::span<const kafka::Header>(headers_.data(), nheaders), commit_time_ms_};
    const bool suspect = !suspects_.empty() && suspects_.contains(ev.id);
    // A record of a refused batch goes alone, once everything before it is acknowledged.
    if (suspect && tracker_.inflight_events() > 0) return Handled::kWaitDelivery;
    kafka::ProduceResult pr = suspect ? isolation_producer().produce(rec, *txn_ | kIsolatedFlag)
                                      : producer_->produce(rec, *txn_);
    switch (pr.status) {
      case kafka::ProduceStatus::kQueued:
        tracker_.add_event(*txn_,
                           (ev.key ? ev.key->size() : 0) + (ev.value ? ev.value->size() : 0));
        if (suspect) {
          isolation_inflight_ = true;
          suspects_.erase(suspects_.find(ev.id));
        }
        return Handled::kDone;
      case kafka::ProduceStatus::kQueueFull:
        return Handled::kWaitDelivery;
      case kafka::ProduceStatus::kFailed: {
        // The producer stopped at a refused batch, before its fatal error was served.
        if (producer_->stopped_at_gap()) {
          begin_rewind(pr.error);
          return Handled::kWaitDelivery;
        }
        // Rejected before it left the process (e.g. larger than message.max.bytes).
        Poison p{ev.id,        ev.key,
                 ev.value,     ev.type,
                 ev.topic,     config_.mapper.schema + "." + config_.mapper.table,
                 pr.error,     first_word(pr.error),
                 pr.size_error};
        return poison_in_stream(p);
      }
    }
    return Handled::kDone;
  }

  // An event that cannot reach its topic: what is known of it, for the error or the DLQ record.
  struct Poison {
    std::string_view id;
    std::optional<std::string_view> key;
    std::optional<std::string_view> value;
    std::optional<std::string_view> type;
    std::string_view original_topic;
    std::string table;
    std::string reason;
    std::string reason_code;  // short label for metrics
    bool size_error;          // the value itself is too large: leave it out of the DLQ record
  };

  // Per-aggregate order under --on-error dlq: once an event of an aggregate (key) is
  // dead-lettered, its later events go to the dead-letter topic too, in order, for as long as the
  // process runs, so that no later event of the aggregate reaches its topic before an operator has
  // dealt with the dead-lettered one.
  void park(std::optional<std::string_view> key) {
    if (!key) {
      parked_null_key_ = true;
    } else if (parked_.emplace(*key).second) {
      log_->warn(
          "event=aggregate_parked slot={} key={} dlq_topic={}: its later events go to the "
          "dead-letter topic until the relay is restarted",
          config_.slot, quoted(*key), config_.dlq_topic);
    }
    metrics_.parked_aggregates = parked_.size() + (parked_null_key_ ? 1 : 0);
  }

  bool is_parked(std::optional<std::string_view> key) const {
    return key ? parked_.find(*key) != parked_.end() : parked_null_key_;
  }

  // Byte count of the DLQ record, as its delivery report will give it.
  static std::size_t dlq_bytes(const Poison& p) {
    return (p.key ? p.key->size() : 0) + (p.size_error || !p.value ? 0 : p.value->size());
  }

  static std::string first_word(const std::string& s) { return s.substr(0, s.find(':')); }

  std::string describe(const Poison& p, Lsn lsn) const {
    return "event" + (p.id.empty() ? std::string() : " id=" + std::string(p.id)) + " of table " +
           p.table +
           (p.original_topic.empty() ? "" : " for topic " + std::string(p.original_topic)) +
           " (transaction commit LSN " + lsn.to_string() + "): " + p.reason;
  }

  // A poison event met while reading the stream (mapping or local produce failure).
  Handled poison_in_stream(const Poison& p) {
    const bool parked = p.reason_code == kParked;
    if (parked) {
      ++metrics_.parked_events;
    } else {
      ++metrics_.delivery_errors[p.reason_code];
    }
    if (config_.on_error == OnError::kFail) {
      throw FatalError({kExitPoisonEvent, "cannot relay " + describe(p, commit_lsn_) + "; slot " +
                                              config_.slot + " is not confirmed past it"});
    }
    const kafka::ProduceStatus status = dead_letter(p, *txn_, commit_lsn_);
    if (status == kafka::ProduceStatus::kQueued) {
      tracker_.add_event(*txn_, dlq_bytes(p));
      park(p.key);
      return Handled::kDone;
    }
    const bool stopped = status == kafka::ProduceStatus::kFailed && producer_->stopped_at_gap();
    if (status == kafka::ProduceStatus::kQueueFull || stopped) {
      // Counted again when handled again (after the wait, or after the rewind).
      if (parked) {
        --metrics_.parked_events;
      } else {
        --metrics_.delivery_errors[p.reason_code];
      }
      if (stopped) begin_rewind("dead-letter record not accepted: producer stopped at a refused batch");
      return Handled::kWaitDelivery;
    }
    throw FatalError({kExitPoisonEvent, "cannot dead-letter " + describe(p, commit_lsn_) +
                                            " to topic " + config_.dlq_topic});
  }

  // Publishes the poison event to the dead-letter topic; the record's acknowledgement counts
  // for the original event.
  kafka::ProduceStatus dead_letter(const Poison& p, AckTracker::TxnSeq txn, Lsn lsn) {
    std::string lsn_text = lsn.to_string();
    std::array<kafka::Header, 7> h;
    std::size_t n = 0;
    h[n++] = {"id", p.id};
    if (p.type) h[n++] = {"type", *p.type};
    h[n++] = {"outbox.error", p.reason};
    h[n++] = {"outbox.original.topic", p.original_topic};
    h[n++] = {"outbox.table", p.table};
    h[n++] = {"outbox.lsn", lsn_text};
    if (p.size_error) h[n++] = {"outbox.value.omitted", "too large for the broker"};
    kafka::Record rec{config_.dlq_topic, p.key, p.size_error ? std::nullopt : p.value,
                      std::span<const kafka::Header>(h.data(), n), tracker_.commit_time_ms_of(txn)};
    kafka::ProduceResult r = producer_->produce(rec, txn | kDlqFlag);
    if (r.status == kafka::ProduceStatus::kQueued) {
      ++metrics_.dlq_events;
      log_->warn("event=dead_lettered slot={} dlq_topic={} detail={}", config_.slot,
                 config_.dlq_topic, quoted(describe(p, lsn)));
    }
    return r.status;
  }

  // Published only with a user-made publication or unused pgoutput features: nothing to relay.
  template <typename M>
  Handled on_message(const M&, const pgoutput::XLogData&) {
    return Handled::kDone;
  }

  void on_delivery(const kafka::Delivery& d) {
    const bool dlq_record = (d.opaque & kDlqFlag) != 0;
    const bool isolated = (d.opaque & kIsolatedFlag) != 0;
    const AckTracker::TxnSeq txn = d.opaque & ~(kDlqFlag | kIsolatedFlag);
    if (isolated) isolation_inflight_ = false;
    if (d.ok) {
      if (auto t = tracker_.commit_time_ms_of(txn); t > 0) {
        metrics_.commit_to_ack_seconds.observe(static_cast<double>(now_unix_ms() - t) / 1000.0);
      }
      tracker_.ack(txn, d.bytes);
      auto it = metrics_.events_published.find(d.topic);
      if (it == metrics_.events_published.end()) {
        it = metrics_.events_published.emplace(std::string(d.topic), 0).first;
      }
      ++it->second;
      metrics_.bytes_published += d.bytes;
    } else {
      // librdkafka retries transient failures by itself, without a deadline; what arrives here
      // is final for this record. Unless dead-lettered, it is never acknowledged, so nothing at
      // or after it is confirmed.
      if (!isolated && !rewinding_ && producer_->stopped_at_gap()) begin_rewind(d.error);
      if (rewinding_ && !isolated) {
        // Never acknowledged: the rewind forgets it and the stream sends it again. A record the
        // broker saw and refused, with the bad one or after it, goes alone next time; one purged
        // from the queue was never sent. A refused dead-letter record is a failure (below).
        const bool purged = d.error_name == "_PURGE_QUEUE";
        if (!dlq_record || purged) {
          if (!dlq_record) suspects_.emplace(d.id_header);
          if (waiting_) wake_.cancel();
          return;
        }
      }
      ++metrics_.delivery_errors[std::string(d.error_name)];
      Lsn lsn = tracker_.commit_lsn_of(txn).value_or(Lsn{});
      Poison p{d.id_header, d.key,
               d.value,     d.type_header,
               d.topic,     config_.mapper.schema + "." + config_.mapper.table,
               d.error,     std::string(d.error_name),
               d.size_error};
      if (dlq_record || config_.on_error == OnError::kFail) {
        fail({kExitPoisonEvent,
              std::string(dlq_record ? "dead-letter record of " : "delivery of ") +
                  describe(p, lsn) + "; slot " + config_.slot + " is not confirmed past it"});
      } else if (dead_letter(p, txn, lsn) != kafka::ProduceStatus::kQueued) {
        if (producer_->stopped_at_gap()) {
          // The main producer stopped at a refused batch meanwhile: this record goes alone again.
          suspects_.emplace(d.id_header);
          begin_rewind("dead-letter record not accepted: producer stopped at a refused batch");
          if (waiting_) wake_.cancel();
          return;
        }
        fail({kExitPoisonEvent, "cannot dead-letter " + describe(p, lsn) + " to topic " +
                                    config_.dlq_topic + " (producer queue full or rejected)"});
      } else {
        // The original record's place in its transaction passes to the DLQ record.
        tracker_.resize_event(txn, d.bytes, dlq_bytes(p));
        park(p.key);
      }
    }
    if (waiting_ && (!paused_ || leaving() || below_low_watermark())) wake_.cancel();
  }

  // The producer: idempotent, and stopping at the first refused batch rather than letting later
  // records of its partition pass the refused ones (enable.gapless.guarantee, set last so that
  // -X cannot turn it off). See begin_rewind().
  std::unique_ptr<kafka::Producer> make_producer() {
    kafka::ProducerConfig c = config_.producer;
    c.properties.emplace_back("enable.gapless.guarantee", "true");
    return std::make_unique<kafka::Producer>(
        io_.get_executor(), c, [this](const kafka::Delivery& d) { on_delivery(d); },
        [this](const std::string& m) {
          if (producer_ && producer_->stopped_at_gap()) {
            begin_rewind(m);
          } else {
            fail({kExitError, "Kafka producer fatal error: " + m});
          }
        });
  }

  // For the records of a refused batch: one record a batch, sent when nothing else is in flight,
  // and nothing produced after it until its report, so that the bad one is told from its
  // neighbours and no later record passes either.
  kafka::Producer& isolation_producer() {
    if (!isolation_producer_) {
      kafka::ProducerConfig single = config_.producer;
      single.properties.emplace_back("batch.num.messages", "1");
      single.properties.emplace_back("linger.ms", "0");
      isolation_producer_ = std::make_unique<kafka::Producer>(
          io_.get_executor(), single, [this](const kafka::Delivery& r) { on_delivery(r); },
          [this](const std::string& m) {
            fail({kExitError, "Kafka producer fatal error: " + m});
          });
    }
    return *isolation_producer_;
  }

  // The broker refused a batch (an invalid record, too large for the topic, not authorized):
  // librdkafka failed its records and stopped, so no later record of the partition was written.
  // The session ends; its in-flight records are reported (acknowledged, or failed and marked as
  // suspects), and rewind() then starts over from the confirmed position with a new producer.
  void begin_rewind(const std::string& error) {
    if (rewinding_ || stopping_ || fatal_) return;
    rewinding_ = true;
    ++metrics_.rejected_batch_rewinds;
    log_->warn(
        "event=rejected_batch slot={} confirmed={} error={}: the broker refused a batch; "
        "rewinding to the confirmed position, its records then go one at a time, in order",
        config_.slot, confirm_lsn().to_string(), quoted(error));
    wake_all();
  }

  void rewind() {
    isolation_producer_.reset();
    producer_.reset();  // reports still due are dropped: those records are sent again
    tracker_.forget_unacknowledged();
    isolation_inflight_ = false;
    producer_ = make_producer();
    rewinding_ = false;
    log_->info("event=rewound slot={} confirmed={} to_send_alone={}", config_.slot,
               confirm_lsn().to_string(), suspects_.size());
  }

  std::size_t producers_queued() const {
    return producer_->queued() + (isolation_producer_ ? isolation_producer_->queued() : 0);
  }

  static std::int64_t now_unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  void arm_status_timer() {
    status_timer_.expires_after(config_.status_interval);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      send_status();
      arm_status_timer();
    });
  }

  void send_status() {
    if (!conn_ || !conn_->connected()) return;
    schedule_check();
    Lsn flush = confirm_lsn();
    try {
      // write: what the relay has handled (pg_stat_replication.write_lsn); only flush, the
      // verified position, moves the slot.
      conn_->send_status(std::max(flush, tracker_.confirmable()), flush, false);
      last_status_sent_ = Clock::now();
    } catch (const pg::Error& e) {
      // The read loop sees the broken connection and reconnects.
      log_->debug("event=status_failed slot={} error={}", config_.slot, quoted(e.what()));
      return;
    }
    if (flush != last_reported_) {
      log_->debug("event=confirmed slot={} lsn={} received={}", config_.slot, flush.to_string(),
                  received_.to_string());
      last_reported_ = flush;
    }
  }

  // Stop sequence: reading has stopped; flush deliveries with a deadline, confirm what was
  // acknowledged, end the copy, close.
  awaitable<void> finish() {
    auto deadline = Clock::now() + config_.shutdown_timeout;
    while (producers_queued() > 0 && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
    send_status();
    status_timer_.cancel();
    log_->info("event=final_confirm slot={} lsn={} unacknowledged={}", config_.slot,
               confirm_lsn().to_string(), tracker_.inflight_events());
    try {
      co_await conn_->end_copy(std::chrono::seconds(5));
    } catch (const std::exception& e) {
      log_->warn("event=end_copy_failed slot={} error={}", config_.slot, quoted(e.what()));
    }
  }

  asio::io_context& io_;
  RelayConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  mapping::Mapper mapper_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<kafka::Producer> isolation_producer_;  // created on the first refused batch
  // Ids of records a refused batch failed: each is sent alone when the stream brings it again.
  std::unordered_set<std::string, StringHash, std::equal_to<>> suspects_;
  bool isolation_inflight_ = false;  // a record sent alone awaits its report
  bool rewinding_ = false;           // a refused batch stopped the producer: the session ends
  std::unique_ptr<pg::ReplicationConnection> conn_;
  AckTracker tracker_;
  asio::steady_timer wake_;
  asio::steady_timer pace_timer_;  // the read pause of stream()
  asio::steady_timer status_timer_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer check_timer_;  // the next publication check
  std::mt19937_64 rng_;
  // Publication checks: a plain connection for catalog reads while streaming; what the last
  // check saw; the WAL position below which a passing check covers the stream.
  std::unique_ptr<pg::ReplicationConnection> catalog_;
  std::optional<std::string> fingerprint_;
  Lsn verified_lsn_;
  Clock::time_point last_check_;
  bool check_armed_ = false;
  bool check_due_ = false;
  bool reading_wait_ = false;  // stream() waits on the replication socket
  bool outbox_partitioned_ = false;
  std::unordered_set<std::uint32_t> tree_relids_;      // the table and its partitions
  std::unordered_set<std::uint32_t> other_relids_;     // relations known not to be of the outbox
  std::unordered_set<std::uint32_t> vanished_relids_;  // dropped before they could be looked up
  std::uint32_t resolving_relid_ = 0;
  std::unordered_set<std::uint64_t> logged_skips_;  // relid << 2 | Skip, see count_skip()
  // Keys of aggregates with a dead-lettered event (see park()).
  std::unordered_set<std::string, StringHash, std::equal_to<>> parked_;
  bool parked_null_key_ = false;
  bool waiting_ = false;
  bool paused_ = false;  // backpressure: stopped reading until in-flight falls to half the bounds
  bool stopping_ = false;
  bool had_slot_ = false;
  std::optional<Fatal> fatal_;
  std::optional<std::string> system_id_;
  std::optional<AckTracker::TxnSeq> txn_;
  Lsn commit_lsn_;
  std::int64_t commit_time_ms_ = 0;
  Lsn received_;
  Lsn server_wal_end_;
  Lsn last_reported_;
  Clock::time_point last_status_sent_;
  pgoutput::Message msg_;
  pgoutput::Message insert_msg_;
  pgoutput::DecodeError decode_error_;
  std::array<kafka::Header, 2> headers_;
  Metrics metrics_;
};

Relay::Relay(asio::io_context& io, RelayConfig config)
    : impl_(std::make_unique<Impl>(io, std::move(config))) {}
Relay::~Relay() = default;
awaitable<int> Relay::run() { return impl_->run(); }
void Relay::request_stop() { impl_->request_stop(); }
const Metrics& Relay::metrics() { return impl_->metrics(); }
const RelayConfig& Relay::config() const { return impl_->config(); }

}  // namespace outbox::relay
