#include "outbox/relay/relay.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <optional>
#include <random>
#include <variant>

#include "outbox/pg/replication_connection.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/ack_tracker.hpp"

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

std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::get("relay");
  return l ? l : spdlog::default_logger()->clone("relay");
}

// SQLSTATEs after which reconnecting can help: connection trouble, server shutting down or
// starting, too many connections, slot held by another relay (standby).
bool retryable(const pg::Error& e) {
  if (e.connection_lost()) return true;
  const std::string& s = e.sqlstate();
  return s.rfind("08", 0) == 0 || s == "57P01" || s == "57P02" || s == "57P03" || s == "53300" ||
         s == "55006" || s.empty();
}

enum class Handled { kDone, kQueueFull };

}  // namespace

class Relay::Impl {
 public:
  Impl(asio::io_context& io, RelayConfig config)
      : io_(io),
        config_(std::move(config)),
        log_(make_logger()),
        mapper_(config_.mapper),
        wake_(io),
        status_timer_(io),
        backoff_timer_(io),
        rng_(std::random_device{}()) {
    // Created here so that a bad -X property fails before anything runs.
    producer_ = std::make_unique<kafka::Producer>(
        io_.get_executor(), config_.producer,
        [this](const kafka::Delivery& d) { on_delivery(d); },
        [this](const std::string& m) { fail({kExitError, "Kafka producer fatal error: " + m}); });
  }

  awaitable<int> run() {
    int attempt = 0;
    bool standby_logged = false;
    while (!stopping_ && !fatal_) {
      bool streamed = false;
      std::string reason;
      try {
        co_await session(streamed);
      } catch (const FatalError& f) {
        fail(f.fatal);
      } catch (const pg::Error& e) {
        if (!retryable(e)) {
          fail({kExitError, e.what()});
        } else if (e.sqlstate() == "55006") {
          reason = "slot in use by another connection";
          if (!standby_logged) {
            log_->info("event=standby slot={} reason=\"{}\": waiting to take over", config_.slot,
                       e.what());
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
      tracker_.abandon_open();
      txn_.reset();
      conn_.reset();
      if (stopping_ || fatal_) break;
      if (streamed) {
        attempt = 0;
        standby_logged = false;
      }
      auto delay = backoff(attempt++);
      if (!reason.starts_with("slot in use") || attempt == 1) {
        log_->warn("event=reconnect slot={} attempt={} in_ms={} reason=\"{}\"", config_.slot,
                   attempt, delay.count(), reason);
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
          config_.slot, tracker_.inflight_events(), tracker_.confirmable().to_string());
    }
    producer_.reset();
    if (fatal_) {
      log_->error("event=fatal slot={} exit_code={} confirmed={} error=\"{}\"", config_.slot,
                  fatal_->code, tracker_.confirmable().to_string(), fatal_->message);
      co_return fatal_->code;
    }
    log_->info("event=stopped slot={} confirmed={}", config_.slot,
               tracker_.confirmable().to_string());
    co_return kExitOk;
  }

  void request_stop() {
    if (stopping_) return;
    log_->info("event=stopping slot={}", config_.slot);
    stopping_ = true;
    wake_all();
  }

 private:
  std::chrono::milliseconds backoff(int attempt) {
    // Capped exponential backoff with jitter, so several relays do not retry in lockstep.
    auto base = std::min<std::int64_t>(30'000, 200LL << std::min(attempt, 8));
    std::uniform_int_distribution<std::int64_t> jitter(base / 2, base);
    return std::chrono::milliseconds(jitter(rng_));
  }

  void fail(Fatal f) {
    if (!fatal_) fatal_ = std::move(f);
    wake_all();
  }

  void wake_all() {
    if (conn_) conn_->cancel();
    wake_.cancel();
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
    std::string command = "START_REPLICATION SLOT " + conn_->quote_identifier(config_.slot) +
                          " LOGICAL 0/0 (proto_version '1', publication_names " +
                          conn_->quote_literal(conn_->quote_identifier(config_.publication)) + ")";
    co_await conn_->start_replication(command, config_.connect_timeout);
    had_slot_ = true;
    streamed = true;
    log_->info("event=streaming slot={} publication={} server_wal={} timeline={}", config_.slot,
               config_.publication, sys.xlogpos.to_string(), sys.timeline);
    arm_status_timer();
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

  awaitable<void> ensure_publication_and_slot() {
    const auto timeout = config_.connect_timeout;
    const auto& m = config_.mapper;
    pg::Rows pubs = co_await conn_->exec(
        "SELECT 1 FROM pg_publication WHERE pubname = " + conn_->quote_literal(config_.publication),
        timeout);
    if (pubs.empty()) {
      if (!config_.create) {
        throw FatalError({kExitError, "publication " + config_.publication +
                                          " does not exist and --no-create was given"});
      }
      co_await conn_->exec("CREATE PUBLICATION " + conn_->quote_identifier(config_.publication) +
                               " FOR TABLE " + conn_->quote_identifier(m.schema) + "." +
                               conn_->quote_identifier(m.table) + " WITH (publish = 'insert')",
                           timeout);
      log_->info("event=created_publication publication={} table={}.{}", config_.publication,
                 m.schema, m.table);
    }
    pg::Rows slots = co_await conn_->exec(
        "SELECT plugin, wal_status, confirmed_flush_lsn FROM pg_replication_slots "
        "WHERE slot_name = " +
            conn_->quote_literal(config_.slot),
        timeout);
    if (slots.empty()) {
      if (had_slot_) {
        throw FatalError(
            {kExitSlotLost,
             "replication slot " + config_.slot +
                 " disappeared while the relay was using it; events committed after its last "
                 "confirmed position " +
                 tracker_.confirmable().to_string() +
                 " may never reach Kafka. Recreate the slot (outbox-relay recreates it when "
                 "started anew) and reconcile the outbox rows committed since then."});
      }
      if (!config_.create) {
        throw FatalError({kExitError, "replication slot " + config_.slot +
                                          " does not exist and --no-create was given"});
      }
      try {
        co_await conn_->exec("CREATE_REPLICATION_SLOT " + conn_->quote_identifier(config_.slot) +
                                 " LOGICAL pgoutput NOEXPORT_SNAPSHOT",
                             timeout);
        log_->info("event=created_slot slot={}", config_.slot);
      } catch (const pg::Error& e) {
        if (e.sqlstate() != "42710") throw;  // created meanwhile by another relay: fine
      }
      co_return;
    }
    const auto& row = slots.front();
    if (row[0].value_or("") != "pgoutput") {
      throw FatalError({kExitError, "replication slot " + config_.slot + " uses plugin " +
                                        row[0].value_or("?") + ", not pgoutput"});
    }
    if (row[1].value_or("") == "lost") {
      throw FatalError(
          {kExitSlotLost,
           "replication slot " + config_.slot + " was invalidated (wal_status lost, confirmed " +
               row[2].value_or("?") +
               "): the WAL it needed was removed (max_slot_wal_keep_size), so outbox rows "
               "committed since then were never relayed. Drop the slot, start the relay to "
               "create a new one, and reconcile the outbox rows committed after that position."});
    }
  }

  awaitable<void> stream() {
    for (;;) {
      if (stopping_ || fatal_) co_return;
      if (backpressured()) {
        co_await wait_for_change(Clock::now() + config_.status_interval);
        continue;
      }
      std::optional<std::span<const std::byte>> frame = conn_->try_read();
      if (!frame) {
        try {
          co_await conn_->wait_readable();
        } catch (const boost::system::system_error& e) {
          if (e.code() != asio::error::operation_aborted || !(stopping_ || fatal_)) throw;
        }
        continue;
      }
      while (handle_frame(*frame) == Handled::kQueueFull) {
        // librdkafka's queue is full: wait for delivery reports to make room, then retry.
        co_await wait_for_change(Clock::now() + std::chrono::milliseconds(100));
        if (stopping_ || fatal_) co_return;
      }
    }
  }

  bool backpressured() const {
    return tracker_.inflight_events() >= config_.max_inflight_events ||
           tracker_.inflight_bytes() >= config_.max_inflight_bytes;
  }

  Handled handle_frame(std::span<const std::byte> frame) {
    pgoutput::CopyDecodeResult cr = pgoutput::decode_copy_message(frame);
    if (auto* err = std::get_if<pgoutput::DecodeError>(&cr)) {
      throw FatalError({kExitError, "undecodable replication frame after " +
                                        received_.to_string() + ": " + err->reason + " (offset " +
                                        std::to_string(err->offset) + ")"});
    }
    auto& cm = std::get<pgoutput::CopyMessage>(cr);
    if (auto* k = std::get_if<pgoutput::Keepalive>(&cm)) {
      on_keepalive(*k);
      return Handled::kDone;
    }
    auto& x = std::get<pgoutput::XLogData>(cm);
    if (x.wal_end > received_) received_ = x.wal_end;
    if (const pgoutput::DecodeError* err = pgoutput::decode_into(x.payload, msg_, decode_error_)) {
      throw FatalError({kExitError, "pgoutput message at " + x.wal_start.to_string() +
                                        " cannot be decoded: " + err->reason + " (offset " +
                                        std::to_string(err->offset) + ")"});
    }
    return std::visit([&](auto& m) { return on_message(m, x); }, msg_);
  }

  void on_keepalive(const pgoutput::Keepalive& k) {
    if (k.wal_end > server_wal_end_) server_wal_end_ = k.wal_end;
    // Everything received before this keepalive has been handled; with nothing in flight its
    // walEnd is safe to confirm, which keeps an idle slot from retaining WAL.
    if (!tracker_.has_open()) tracker_.advance_idle(k.wal_end);
    if (k.reply_requested) send_status();
  }

  Handled on_message(const pgoutput::Begin& b, const pgoutput::XLogData&) {
    txn_ = tracker_.begin(b.final_lsn);
    commit_lsn_ = b.final_lsn;
    commit_time_ms_ = pgoutput::to_unix_millis(b.commit_time);
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Commit& c, const pgoutput::XLogData&) {
    if (!txn_) throw FatalError({kExitError, "Commit at " + c.commit_lsn.to_string() + " without Begin"});
    tracker_.commit(*txn_, c.end_lsn);
    txn_.reset();
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Relation& r, const pgoutput::XLogData&) {
    mapper_.on_relation(r);
    return Handled::kDone;
  }

  Handled on_message(const pgoutput::Insert& ins, const pgoutput::XLogData& x) {
    if (!txn_) {
      throw FatalError({kExitError, "Insert at " + x.wal_start.to_string() + " outside a transaction"});
    }
    outbox::MapResult mapped = mapper_.map_insert(ins);
    if (auto* err = std::get_if<outbox::MapError>(&mapped)) {
      throw FatalError({kExitPoisonEvent,
                        "cannot map event" + (err->id.empty() ? std::string() : " id=" + err->id) +
                            " in table " + err->table + " (transaction commit LSN " +
                            commit_lsn_.to_string() + "): column " + err->column + " " +
                            err->reason + "; slot " + config_.slot + " stays at " +
                            tracker_.confirmable().to_string()});
    }
    if (std::holds_alternative<outbox::NotOutbox>(mapped)) return Handled::kDone;
    const auto& ev = std::get<outbox::Event>(mapped);
    headers_[0] = {"id", ev.id};
    std::size_t nheaders = 1;
    if (ev.type) headers_[nheaders++] = {"type", *ev.type};
    kafka::Record rec{ev.topic, ev.key, ev.value,
                      std::span<const kafka::Header>(headers_.data(), nheaders), commit_time_ms_};
    kafka::ProduceResult pr = producer_->produce(rec, *txn_);
    switch (pr.status) {
      case kafka::ProduceStatus::kQueued:
        tracker_.add_event(*txn_, (ev.key ? ev.key->size() : 0) + (ev.value ? ev.value->size() : 0));
        return Handled::kDone;
      case kafka::ProduceStatus::kQueueFull:
        return Handled::kQueueFull;
      case kafka::ProduceStatus::kFailed:
        throw FatalError({kExitPoisonEvent, "cannot produce event id=" + std::string(ev.id) +
                                                " to topic " + std::string(ev.topic) +
                                                " (transaction commit LSN " +
                                                commit_lsn_.to_string() + "): " + pr.error});
    }
    return Handled::kDone;
  }

  // Published only with a user-made publication or unused pgoutput features: nothing to relay.
  template <typename M>
  Handled on_message(const M&, const pgoutput::XLogData&) {
    return Handled::kDone;
  }

  void on_delivery(const kafka::Delivery& d) {
    if (d.ok) {
      tracker_.ack(d.opaque, d.bytes);
    } else {
      // librdkafka retries transient failures by itself without a deadline; what arrives here
      // is final for this record. It is never acknowledged, so nothing at or after it is
      // confirmed.
      auto lsn = tracker_.commit_lsn_of(d.opaque);
      fail({kExitPoisonEvent, "delivery of event id=" + d.id_header + " to topic " + d.topic +
                                  " failed: " + d.error + " (transaction commit LSN " +
                                  (lsn ? lsn->to_string() : std::string("?")) + "); slot " +
                                  config_.slot + " stays at " +
                                  tracker_.confirmable().to_string()});
    }
    if (waiting_) wake_.cancel();
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
    Lsn flush = tracker_.confirmable();
    try {
      conn_->send_status(flush, flush, false);
    } catch (const pg::Error& e) {
      // The read loop sees the broken connection and reconnects.
      log_->debug("event=status_failed slot={} error=\"{}\"", config_.slot, e.what());
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
    while (producer_->queued() > 0 && Clock::now() < deadline) {
      co_await wait_for_change(deadline);
    }
    send_status();
    status_timer_.cancel();
    log_->info("event=final_confirm slot={} lsn={} unacknowledged={}", config_.slot,
               tracker_.confirmable().to_string(), tracker_.inflight_events());
    try {
      co_await conn_->end_copy(std::chrono::seconds(5));
    } catch (const std::exception& e) {
      log_->warn("event=end_copy_failed slot={} error=\"{}\"", config_.slot, e.what());
    }
  }

  asio::io_context& io_;
  RelayConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  outbox::Mapper mapper_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<pg::ReplicationConnection> conn_;
  AckTracker tracker_;
  asio::steady_timer wake_;
  asio::steady_timer status_timer_;
  asio::steady_timer backoff_timer_;
  std::mt19937_64 rng_;
  bool waiting_ = false;
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
  pgoutput::Message msg_;
  pgoutput::DecodeError decode_error_;
  std::array<kafka::Header, 2> headers_;
};

Relay::Relay(asio::io_context& io, RelayConfig config)
    : impl_(std::make_unique<Impl>(io, std::move(config))) {}
Relay::~Relay() = default;
awaitable<int> Relay::run() { return impl_->run(); }
void Relay::request_stop() { impl_->request_stop(); }

}  // namespace outbox::relay
