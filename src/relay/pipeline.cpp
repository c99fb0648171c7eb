#include "outbox/relay/pipeline.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <variant>

#include "outbox/common/clock.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/event_record.hpp"

namespace outbox::relay {
using common::now_unix_ms;
using common::quoted;
namespace {

// Marks the opaque of a dead-letter record (transaction sequence numbers stay far below).
constexpr std::uint64_t kDlqFlag = 1ULL << 63;
// Marks a record sent alone, to tell a bad record from the good ones refused with it.
constexpr std::uint64_t kIsolatedFlag = 1ULL << 62;
// Marks a suspect sent batched in a window: a suspect still, should it fail again.
constexpr std::uint64_t kWindowedFlag = 1ULL << 61;

// reason_code of an event dead-lettered because an earlier event of its aggregate was.
constexpr std::string_view kParked = "PARKED";

// The label of outbox_relay_skipped_changes_total, by Pipeline::Skip.
constexpr std::array<const char*, 4> kSkipReasons = {"other_table", "update", "delete", "truncate"};

std::string first_word(const std::string& s) { return s.substr(0, s.find(':')); }

}  // namespace

// An event that cannot reach its topic: what is known of it, for the error or the DLQ record.
struct Pipeline::Poison {
  std::string_view id;
  std::optional<std::string_view> key;
  std::optional<std::string_view> value;
  std::optional<std::string_view> type;
  std::string_view original_topic;
  std::string table;
  std::string reason;
  std::string reason_code;  // short label for metrics
  bool size_error;          // the value itself is too large: leave it out of the DLQ record
  std::span<const sink::Header> extra_headers = {};  // header placements, when known
  // From a logical message of --messages: never a fail-stop, and never parks (poison_in_stream()).
  bool message = false;
};

namespace {
// A field of a dead-letter record that was too large, cut to this many bytes.
constexpr std::size_t kClipped = 1024;
std::string clip(std::string_view s, std::size_t at = kClipped) {
  if (s.size() <= at) return std::string(s);
  return std::string(s.substr(0, at)) + "... (" + std::to_string(s.size()) + " bytes)";
}
// Byte count of the DLQ record, as its delivery report will give it.
std::size_t dlq_bytes(const Pipeline::Poison& p);
}  // namespace

Pipeline::Pipeline(const RelayConfig& config, Sink& sink, Metrics& metrics,
                   std::shared_ptr<spdlog::logger> log)
    : config_(config),
      sink_(sink),
      metrics_(metrics),
      log_(std::move(log)),
      mapper_(config.mapper),
      exactly_once_(config.delivery == DeliveryMode::kExactlyOnce) {
  headers_.resize(2 + mapper_.max_headers());
}

void Pipeline::start_from_checkpoint(Lsn lsn) {
  kafka_committed(lsn);
  tracker_.advance_idle(lsn);
  if (lsn > produced_through_) produced_through_ = lsn;
}

std::string Pipeline::table_name() const {
  std::string name =
      config_.mapper.table.empty()
          ? ""
          : common::QualifiedName{config_.mapper.schema, config_.mapper.table}.text();
  // Several tables: the record does not say which it came from (a delivery report).
  for (const auto& [schema, table] : config_.mapper.more_tables) {
    name += ", " + common::QualifiedName{schema, table}.text();
  }
  if (!config_.mapper.message_prefix.empty()) {
    name += (name.empty() ? "" : " or ") + std::string("logical messages with prefix '") +
            config_.mapper.message_prefix + "'";
  }
  return name;
}

void Pipeline::fail(Fatal f) {
  if (!fatal_) fatal_ = std::move(f);
}

void Pipeline::on_disconnect() {
  // A cut transaction that is itself a re-send counts the inserts skipped in it too.
  if (txn_) cut_ = Cut{*txn_, commit_lsn_, inserts_in_txn_};
  tracker_.abandon_open();
  txn_.reset();
  skipping_txn_ = false;
  skip_inserts_ = 0;
  inserts_in_txn_ = 0;
}

void Pipeline::resume(bool history_continues) {
  skip_acknowledged_ = history_continues;
  // Its handled inserts are skipped only once Kafka acknowledged all of them; otherwise the
  // whole transaction is produced again (duplicates, never a gap).
  if (cut_ && !(history_continues && tracker_.all_acknowledged(cut_->txn))) cut_.reset();
  log_->info(
      "event=resuming slot={} acknowledged={} history_continues={} cut_transaction={} "
      "cut_inserts_acknowledged={}",
      config_.slot, tracker_.confirmable().to_string(), history_continues,
      cut_ ? cut_->final_lsn.to_string() : "none", cut_ ? cut_->inserts : 0);
}

Lsn Pipeline::timeline_switched(Lsn switch_point) {
  const Lsn past = std::max(tracker_.confirmable(), kafka_committed_);
  if (past <= switch_point) return Lsn{};
  tracker_.forget_unacknowledged();
  if (tracker_.confirmable() > switch_point) tracker_.rewind_to(switch_point);
  if (kafka_committed_ > switch_point) kafka_committed_ = switch_point;
  if (produced_through_ > switch_point) produced_through_ = switch_point;
  txn_.reset();
  cut_.reset();
  return past;
}

void Pipeline::set_outbox_tree(bool partitioned, const std::vector<std::uint32_t>& relids) {
  outbox_partitioned_ = partitioned;
  tree_relids_ = std::unordered_set<std::uint32_t>(relids.begin(), relids.end());
}

void Pipeline::publication_verified(Lsn before_check) {
  if (before_check > verified_lsn_) verified_lsn_ = before_check;
}

void Pipeline::relation_resolved(std::uint32_t relid, bool exists) {
  if (tree_relids_.contains(relid)) return;
  (exists ? other_relids_ : vanished_relids_).insert(relid);
}

void Pipeline::on_keepalive(const pgoutput::Keepalive& k) {
  if (k.wal_end > server_wal_end_) server_wal_end_ = k.wal_end;
  // Everything received before this keepalive has been handled; with nothing in flight its
  // walEnd is safe to confirm, which keeps an idle slot from retaining WAL.
  keepalive_.idle_advanced = !tracker_.has_open() && tracker_.advance_idle(k.wal_end);
  keepalive_.reply_requested = k.reply_requested;
}

void Pipeline::count_skip(std::uint32_t relid, Skip skip, std::string_view table) {
  if (skipping_txn_) return;  // counted when it was first sent
  const char* reason = kSkipReasons[static_cast<std::size_t>(skip)];
  auto it = metrics_.skipped_changes.find(std::string_view(reason));
  if (it == metrics_.skipped_changes.end()) {
    it = metrics_.skipped_changes.emplace(reason, 0).first;
  }
  ++it->second;
  // Once per relation and reason: a skip is never invisible, and never floods the log.
  if (logged_skips_.insert((std::uint64_t{relid} << 2) | static_cast<std::uint64_t>(skip)).second) {
    log_->info(
        "event=skipping slot={} reason={} table={} relid={}: not an insert into {}.{}; "
        "counted in outbox_relay_skipped_changes_total, logged once",
        config_.slot, reason, quoted(table.empty() ? "?" : table), relid, config_.mapper.schema,
        config_.mapper.table);
  }
}

// Hysteresis: reading stops at the bounds and resumes only once half of them is free, so the
// reader drains the socket in long bursts instead of waking for every acknowledgement.
bool Pipeline::backpressured() {
  if (!paused_) {
    paused_ = tracker_.inflight_events() >= config_.max_inflight_events ||
              tracker_.inflight_bytes() >= config_.max_inflight_bytes;
  } else {
    paused_ = !below_low_watermark();
  }
  return paused_;
}

bool Pipeline::below_low_watermark() const {
  return tracker_.inflight_events() <= config_.max_inflight_events / 2 &&
         tracker_.inflight_bytes() <= config_.max_inflight_bytes / 2;
}

Pipeline::Step Pipeline::on_frame(std::span<const std::byte> frame) {
  pgoutput::CopyDecodeResult cr = pgoutput::decode_copy_message(frame);
  if (auto* err = std::get_if<pgoutput::DecodeError>(&cr)) {
    throw FatalError({kExitError, "undecodable replication frame after " + received_.to_string() +
                                      ": " + err->reason + " (offset " +
                                      std::to_string(err->offset) + ")"});
  }
  auto& cm = std::get<pgoutput::CopyMessage>(cr);
  if (auto* k = std::get_if<pgoutput::Keepalive>(&cm)) {
    on_keepalive(*k);
    return Step::kKeepalive;
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

Pipeline::Step Pipeline::on_message(const pgoutput::Begin& b, const pgoutput::XLogData&) {
  // Sent again after a reconnect, and acknowledged in full before: the prefix ends past its
  // commit (within one session, every transaction commits after the prefix's end).
  if (skip_acknowledged_ && b.final_lsn < tracker_.confirmable()) {
    skipping_txn_ = true;
    ++metrics_.resent_transactions_skipped;
    return Pipeline::Step::kDone;
  }
  inserts_in_txn_ = 0;
  skip_inserts_ = 0;
  if (cut_ && b.final_lsn >= cut_->final_lsn) {
    if (b.final_lsn == cut_->final_lsn) skip_inserts_ = cut_->inserts;
    cut_.reset();
  }
  commit_lsn_ = b.final_lsn;
  commit_time_ms_ = pgoutput::to_unix_millis(b.commit_time);
  commit_time_us_ = pgoutput::to_unix_micros(b.commit_time);
  metrics_.commit_to_read_seconds.observe(
      static_cast<double>(std::max<std::int64_t>(0, now_unix_ms() - commit_time_ms_)) / 1000.0);
  txn_ = tracker_.begin(b.final_lsn, commit_time_ms_);
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Commit& c, const pgoutput::XLogData&) {
  if (skipping_txn_) {
    skipping_txn_ = false;
    return Pipeline::Step::kDone;
  }
  if (!txn_)
    throw FatalError({kExitError, "Commit at " + c.commit_lsn.to_string() + " without Begin"});
  tracker_.commit(*txn_, c.end_lsn);
  txn_.reset();
  if (c.end_lsn > produced_through_) produced_through_ = c.end_lsn;
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Relation& r, const pgoutput::XLogData&) {
  bool outbox = mapper_.is_outbox_name(r) || tree_relids_.contains(r.relid);
  if (!outbox && outbox_partitioned_ && !other_relids_.contains(r.relid)) {
    if (!vanished_relids_.contains(r.relid)) {
      resolving_relid_ = r.relid;
      return Pipeline::Step::kResolveRelation;
    }
    // Dropped since it was written to: with the outbox's columns it was most likely one of its
    // partitions (dropped after its retention). Relay rather than lose.
    outbox = mapper_.has_outbox_columns(r);
    log_->warn(
        "event=vanished_relation slot={} relid={} table={} treated_as_outbox={}: the "
        "relation no longer exists, so whether it was a partition of {} cannot be "
        "read from the catalog; judged by its columns",
        config_.slot, r.relid,
        quoted(common::QualifiedName{std::string(r.nspname), std::string(r.relname)}.text()),
        outbox, common::QualifiedName{config_.mapper.schema, config_.mapper.table}.text());
  }
  mapper_.on_relation(r, outbox);
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Update& u, const pgoutput::XLogData&) {
  count_skip(u.relid, Skip::kUpdate, mapper_.relation_name(u.relid));
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Delete& d, const pgoutput::XLogData&) {
  count_skip(d.relid, Skip::kDelete, mapper_.relation_name(d.relid));
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Truncate& t, const pgoutput::XLogData&) {
  for (std::uint32_t relid : t.relids)
    count_skip(relid, Skip::kTruncate, mapper_.relation_name(relid));
  return Pipeline::Step::kDone;
}

Pipeline::Step Pipeline::on_message(const pgoutput::Insert& ins, const pgoutput::XLogData& x) {
  if (skipping_txn_) {
    ++metrics_.resent_inserts_skipped;
    return Pipeline::Step::kDone;
  }
  if (skip_inserts_ > 0) {
    --skip_inserts_;
    ++inserts_in_txn_;
    ++metrics_.resent_inserts_skipped;
    return Pipeline::Step::kDone;
  }
  invalid_traceparent_id_.reset();
  const Step step = produce_insert(ins, x);
  if (step == Pipeline::Step::kDone) {
    ++inserts_in_txn_;
    // Counted once the event is handled: a wait hands the same insert again.
    if (invalid_traceparent_id_) count_invalid_traceparent(*invalid_traceparent_id_);
  }
  return step;
}

Pipeline::Step Pipeline::produce_insert(const pgoutput::Insert& ins, const pgoutput::XLogData& x) {
  if (!txn_) {
    throw FatalError(
        {kExitError, "Insert at " + x.wal_start.to_string() + " outside a transaction"});
  }
  // Nothing passes a record sent alone before its report: it may yet turn out to be poison.
  if (held_back()) return Pipeline::Step::kWaitDelivery;
  mapping::MapResult mapped = mapper_.map_insert(ins, commit_time_us_);
  if (auto* err = std::get_if<mapping::MapError>(&mapped)) return map_error(*err);
  if (auto* other = std::get_if<mapping::NotOutbox>(&mapped)) {
    count_skip(ins.relid, Skip::kOtherTable, other->table);
    return Pipeline::Step::kDone;
  }
  return produce_event(std::get<mapping::Event>(mapped), false);
}

Pipeline::Step Pipeline::map_error(const mapping::MapError& err, bool message) {
  std::string reason = "column " + err.column + " " + err.reason;
  if (err.column.empty()) reason = err.reason;
  Poison p{err.id,    err.aggregateid, err.payload,     err.type, err.topic,
           err.table, reason,          "MAPPING_ERROR", false};
  p.message = message;
  return poison_in_stream(p);
}

Pipeline::Step Pipeline::on_message(const pgoutput::LogicalMessage& m, const pgoutput::XLogData&) {
  // Without --messages the server sends none (messages 'true' is not asked for).
  if (config_.mapper.message_prefix.empty()) return Pipeline::Step::kDone;
  if (!m.transactional) {
    if (m.prefix != config_.mapper.message_prefix) {
      count_other_prefix(m.prefix);
      return Pipeline::Step::kDone;
    }
    return message_outside_transaction(m);
  }
  // A change of the transaction like an insert: counted the same way for resume().
  if (skipping_txn_) {
    if (m.prefix == config_.mapper.message_prefix) ++metrics_.resent_inserts_skipped;
    return Pipeline::Step::kDone;
  }
  if (skip_inserts_ > 0) {
    --skip_inserts_;
    ++inserts_in_txn_;
    if (m.prefix == config_.mapper.message_prefix) ++metrics_.resent_inserts_skipped;
    return Pipeline::Step::kDone;
  }
  if (!txn_) {
    throw FatalError({kExitError, "transactional logical message at " + m.lsn.to_string() +
                                      " outside a transaction"});
  }
  const Step step = produce_message(m);
  if (step == Pipeline::Step::kDone) ++inserts_in_txn_;
  return step;
}

Pipeline::Step Pipeline::produce_message(const pgoutput::LogicalMessage& m) {
  if (held_back()) return Pipeline::Step::kWaitDelivery;
  mapping::MessageMapResult mapped = mapper_.map_message(m);
  if (auto* err = std::get_if<mapping::MapError>(&mapped)) return map_error(*err, true);
  if (auto* other = std::get_if<mapping::OtherPrefix>(&mapped)) {
    count_other_prefix(other->prefix);
    return Pipeline::Step::kDone;
  }
  return produce_event(std::get<mapping::Event>(mapped), true);
}

// pgoutput sends a non-transactional message as soon as it is decoded, between transactions.
// It is a mapping error (fail, or dead-lettered), tracked as a transaction of its own that ends
// just past the message: confirming that makes the server skip it after a restart.
Pipeline::Step Pipeline::message_outside_transaction(const pgoutput::LogicalMessage& m) {
  if (txn_ || skipping_txn_) {
    throw FatalError({kExitError, "non-transactional logical message at " + m.lsn.to_string() +
                                      " inside a transaction"});
  }
  const Lsn end{m.lsn.value + 1};
  if (skip_acknowledged_ && end <= tracker_.confirmable()) {
    ++metrics_.resent_inserts_skipped;
    return Pipeline::Step::kDone;
  }
  if (held_back()) return Pipeline::Step::kWaitDelivery;
  commit_lsn_ = m.lsn;
  commit_time_ms_ = now_unix_ms();
  txn_ = tracker_.begin(m.lsn, commit_time_ms_);
  mapping::MessageMapResult mapped = mapper_.map_message(m);
  const auto* err = std::get_if<mapping::MapError>(&mapped);
  if (!err) throw std::logic_error("a non-transactional message mapped to an event");
  const Step step = map_error(*err, true);
  if (step != Pipeline::Step::kDone) {
    // Handed again after the wait: nothing of it stays tracked meanwhile.
    tracker_.abandon_open();
    txn_.reset();
    return step;
  }
  tracker_.commit(*txn_, end);
  txn_.reset();
  if (end > produced_through_) produced_through_ = end;
  return Pipeline::Step::kDone;
}

void Pipeline::count_other_prefix(std::string_view prefix) {
  if (skipping_txn_) return;
  ++metrics_.other_prefix_messages;
  if (logged_prefixes_.size() < 100 && logged_prefixes_.emplace(prefix).second) {
    log_->info(
        "event=skipping slot={} reason=other_prefix prefix={}: a logical message of another "
        "prefix than {}; counted in outbox_relay_ignored_messages_total, logged once",
        config_.slot, quoted(prefix), quoted(config_.mapper.message_prefix));
  }
}

Pipeline::Step Pipeline::produce_event(const mapping::Event& ev, bool message) {
  // A rewind began (a delivery overdue, a refused batch): nothing more goes to the sink in this
  // session. The sink was halted, but a producer that goes on would send a record given now when
  // the broker answers again, ahead of the earlier records of its aggregate that the next session
  // sends again (seen: a broker frozen, one event produced after the halt reached Kafka before
  // its aggregate's earlier ones). The session ends; the rewind sends it in order.
  if (rewinding_) return Pipeline::Step::kWaitDelivery;
  if (ev.invalid_traceparent) invalid_traceparent_id_ = ev.id;
  const EventRecord built = event_record(ev, commit_time_ms_, headers_);
  const sink::Record& rec = built.record;
  const std::span<const sink::Header> extra = built.placed;
  // The event as poison, for poison_in_stream(). Built only on the way there: never per event.
  const auto poison = [&](std::string reason, std::string reason_code, bool size_error = false) {
    Poison p{ev.id,
             ev.key,
             ev.value,
             ev.type,
             ev.topic,
             message ? "logical messages with prefix '" + config_.mapper.message_prefix + "'"
                     : table_name(),
             std::move(reason),
             std::move(reason_code),
             size_error,
             extra};
    p.message = message;
    return p;
  };
  // The relay's own topics are no destination for an event, whatever the template renders: a
  // record in the checkpoint topic under a relay's key would make every later start of that
  // relay fail, one in the dead-letter topic would pass for a dead-lettered event.
  const bool checkpoint = ev.topic == config_.checkpoint_topic;
  if (checkpoint || ev.topic == config_.dlq_topic) {
    return poison_in_stream(
        poison("its topic is the relay's own " +
                   std::string(checkpoint ? "checkpoint topic (--checkpoint-topic)"
                                          : "dead-letter topic (--dlq-topic)") +
                   ": no event may be written there",
               "RESERVED_TOPIC"));
  }
  // --max-topics: librdkafka keeps state for every topic produced to until the process ends, so
  // an outbox writer choosing ever new aggregate types would grow the relay without end.
  if (config_.bound_topics && topics_.find(ev.topic) == topics_.end()) {
    if (topics_.size() >= config_.max_topics) {
      return poison_in_stream(
          poison("its topic would be distinct topic number " + std::to_string(topics_.size() + 1) +
                     " of this process, past --max-topics " + std::to_string(config_.max_topics),
                 "TOO_MANY_TOPICS"));
    }
    topics_.emplace(ev.topic);
  }
  // Parked aggregates exist under --on-error dlq only, and this key is parked already: a
  // logical message's event goes the same way as an outbox row's (poison_in_stream()).
  if (!parked_.empty() || parked_null_key_ || parked_all_) {
    if (is_parked(ev.key)) {
      return poison_in_stream(
          poison("parked: an earlier event of aggregate " + std::string(ev.key.value_or("(null)")) +
                     " was dead-lettered, so its later events follow it to the dead-letter "
                     "topic (none may pass it)",
                 std::string(kParked)));
    }
  }
  // Exactly-once: a record the broker refused twice (the second time alone) is poison; it never
  // goes in a transaction again (a refused record makes its transaction abort).
  if (!refused_twice_.empty()) {
    if (auto it = refused_twice_.find(ev.id); it != refused_twice_.end()) {
      Poison p = poison(std::move(it->second.error), std::move(it->second.error_name));
      // A record the broker refused is a fail-stop and parks its key even when a logical message
      // made it, as a refusal reported on delivery is (on_delivery(), which cannot tell a
      // message's record; docs/security.md says so).
      p.message = false;
      refused_twice_.erase(it);
      return poison_in_stream(p);
    }
  }
  const bool suspect = !suspects_.empty() && suspects_.contains(ev.id);
  // A record of a refused batch (a suspect) goes once everything before it is acknowledged:
  // alone, or, when the sink stops at a refused batch, as the first record of a window of
  // window_size_ records of the stream (suspects or not), batched, and nothing after the window
  // until all of its reports are in. A window refused again stops the producer and rewinds; what
  // it failed are the suspects then, and the next window is half as large (rewound()); a window
  // acknowledged in full past the records of the last refused one makes the next one twice as
  // large (window_passed()). At size 1 the suspect goes alone, and refused alone it is poison.
  // So one bad record among N suspects costs about log2 N rewinds and 3 log2 N windows where one
  // record at a time cost N round trips (6,281 in FaultTest.RefusedBatchKeepsAggregateOrder), and
  // each aggregate's order holds as for the first refusal: the producer stops at the refused batch
  // (enable.gapless.guarantee) and nothing after the window goes before its reports.
  if (suspect && window_left_ == 0) {
    if (tracker_.inflight_events() > 0) return Pipeline::Step::kWaitDelivery;
    if (window_size_ > 1 && suspect_windows()) window_left_ = window_size_;
  }
  const bool windowed = window_left_ > 0;
  const bool alone = suspect && !windowed;
  sink::ProduceResult pr =
      alone ? sink_.produce(rec, *txn_ | kIsolatedFlag, Route::kAlone)
            : sink_.produce(rec, *txn_ | (suspect ? kWindowedFlag : 0), Route::kBatched);
  switch (pr.status) {
    case sink::ProduceStatus::kQueued:
      tracker_.add_event(*txn_, (ev.key ? ev.key->size() : 0) + (ev.value ? ev.value->size() : 0));
      if (suspect) {
        if (alone) isolation_inflight_ = true;
        suspects_.erase(suspects_.find(ev.id));
      }
      if (windowed && --window_left_ == 0) window_closing_ = true;
      return Pipeline::Step::kDone;
    case sink::ProduceStatus::kQueueFull:
      return Pipeline::Step::kWaitDelivery;
    case sink::ProduceStatus::kFailed: {
      // The producer stopped at a refused batch, before its fatal error was served.
      if (sink_.stopped()) {
        begin_rewind(pr.error);
        return Pipeline::Step::kWaitDelivery;
      }
      // Rejected before it left the process (e.g. larger than message.max.bytes).
      return poison_in_stream(poison(pr.error, first_word(pr.error), pr.size_error));
    }
  }
  return Pipeline::Step::kDone;
}

bool Pipeline::held_back() {
  if (isolation_inflight_) return true;
  if (!window_closing_) return false;
  if (tracker_.inflight_events() > 0) return true;
  // The window was acknowledged in full (a refusal would have rewound).
  window_closing_ = false;
  window_passed();
  return false;
}

// A window (or a suspect sent alone) told apart. Within what the last refused window held, the
// bad record is still ahead: the size stays (bisection). Past it, the next window doubles.
void Pipeline::window_passed() {
  if (refused_range_ > window_size_) {
    refused_range_ -= window_size_;
    return;
  }
  refused_range_ = 0;
  window_size_ *= 2;
}

// Counted on every event, logged once per process: the column's writer has a bug, and each of
// its events says so the same way.
void Pipeline::count_invalid_traceparent(std::string_view id) {
  if (metrics_.invalid_traceparents++ == 0) {
    log_->warn(
        "event=invalid_traceparent slot={} id={} column={}: not a W3C traceparent, so the event "
        "goes without traceparent and tracestate headers; counted in "
        "outbox_relay_invalid_traceparent_total, logged once",
        config_.slot, quoted(id), config_.mapper.column_traceparent);
  }
}

// Per-aggregate order under --on-error dlq: once an event of an aggregate (key) is
// dead-lettered, its later events go to the dead-letter topic too, in order, for as long as the
// process runs, so that no later event of the aggregate reaches its topic before an operator has
// dealt with the dead-lettered one.
//
// Bounded: past kMaxParkedAggregates keys or kMaxParkedKeyBytes of them, every aggregate is
// parked (the whole table's events go to the dead-letter topic until the relay is restarted) and
// the set is freed. Nothing is lost or reordered that way, whereas forgetting a key would let
// its later events pass the dead-lettered one.
void Pipeline::park(std::optional<std::string_view> key) {
  if (parked_all_) return;
  if (!key) {
    parked_null_key_ = true;
  } else if (!parked_.contains(*key)) {
    if (parked_.size() >= kMaxParkedAggregates ||
        parked_key_bytes_ + key->size() > kMaxParkedKeyBytes) {
      log_->error(
          "event=all_aggregates_parked slot={} parked={} key_bytes={} dlq_topic={}: more "
          "aggregates have a dead-lettered event than the relay keeps apart ({} keys, {} "
          "bytes of keys); every later event goes to the dead-letter topic until the relay is "
          "restarted",
          config_.slot, parked_.size(), parked_key_bytes_, config_.dlq_topic, kMaxParkedAggregates,
          kMaxParkedKeyBytes);
      parked_all_ = true;
      metrics_.all_aggregates_parked = 1;
      metrics_.parked_aggregates = parked_.size() + 1 + (parked_null_key_ ? 1 : 0);
      decltype(parked_)().swap(parked_);
      parked_key_bytes_ = 0;
      return;
    }
    parked_.emplace(*key);
    parked_key_bytes_ += key->size();
    log_->warn(
        "event=aggregate_parked slot={} key={} dlq_topic={}: its later events go to the "
        "dead-letter topic until the relay is restarted",
        config_.slot, quoted(clip(*key, 256)), config_.dlq_topic);
  }
  metrics_.parked_aggregates = parked_.size() + (parked_null_key_ ? 1 : 0);
}

bool Pipeline::is_parked(std::optional<std::string_view> key) const {
  if (parked_all_) return true;
  return key ? parked_.find(*key) != parked_.end() : parked_null_key_;
}

namespace {
bool has_header(const std::vector<sink::Header>& headers, std::string_view name) {
  for (const sink::Header& h : headers) {
    if (h.name == name) return true;
  }
  return false;
}

std::size_t dlq_bytes(const Pipeline::Poison& p) {
  return (p.key ? p.key->size() : 0) + (p.size_error || !p.value ? 0 : p.value->size());
}
}  // namespace

std::string Pipeline::describe(const Poison& p, Lsn lsn) const {
  const bool table = !p.table.starts_with("logical messages");
  return "event" + (p.id.empty() ? std::string() : " id=" + std::string(p.id)) +
         (table ? " of table " : " of ") + p.table +
         (p.original_topic.empty() ? "" : " for topic " + std::string(p.original_topic)) +
         " (transaction commit LSN " + lsn.to_string() + "): " + p.reason;
}

// A poison event met while reading the stream (mapping or local produce failure).
//
// A logical message is never a fail-stop: whoever may execute pg_logical_emit_message (every
// role, unless `setup --messages` revoked it from PUBLIC) could otherwise stop the relay for good,
// since the slot stays before the message and every restart meets it again. Under --on-error
// fail it is counted, logged with its LSN and skipped (the slot moves past it); under dlq it is
// dead-lettered without parking the aggregate its envelope names, which a malformed envelope
// cannot be trusted to name. Outbox rows, whose writers the table's grants choose, keep their
// fail-stop.
Pipeline::Step Pipeline::poison_in_stream(const Poison& p) {
  if (p.message && config_.on_error == OnError::kFail) {
    ++metrics_.rejected_messages;
    log_->warn(
        "event=message_rejected slot={} lsn={} detail={}: skipped (a logical message never stops "
        "the relay); counted in outbox_relay_rejected_messages_total",
        config_.slot, commit_lsn_.to_string(), quoted(describe(p, commit_lsn_)));
    return Pipeline::Step::kDone;
  }
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
  std::size_t bytes = 0;
  const sink::ProduceStatus status = dead_letter(p, *txn_, commit_lsn_, bytes);
  if (status == sink::ProduceStatus::kQueued) {
    tracker_.add_event(*txn_, bytes);
    if (!p.message) park(p.key);
    return Pipeline::Step::kDone;
  }
  const bool stopped = status == sink::ProduceStatus::kFailed && sink_.stopped();
  if (status == sink::ProduceStatus::kQueueFull || stopped) {
    // Counted again when handled again (after the wait, or after the rewind).
    if (parked) {
      --metrics_.parked_events;
    } else {
      --metrics_.delivery_errors[p.reason_code];
    }
    if (stopped)
      begin_rewind("dead-letter record not accepted: producer stopped at a refused batch");
    return Pipeline::Step::kWaitDelivery;
  }
  throw FatalError({kExitPoisonEvent, "cannot dead-letter " + describe(p, commit_lsn_) +
                                          " to topic " + config_.dlq_topic});
}

// Publishes the poison event to the dead-letter topic; the record's acknowledgement counts
// for the original event. When the record is itself too large for the producer (a huge key,
// placed header, trace state, or a topic name rendered from a huge aggregate type, which the
// error text repeats), or when the broker refused it as too large before (on_delivery()), a
// compact one goes instead: the value and the placed headers left out,
// the key and the other fields cut to kClipped bytes, and outbox.truncated saying so. Otherwise
// --on-error dlq would stop at the very events it is there to set aside.
sink::ProduceStatus Pipeline::dead_letter(const Poison& p, AckTracker::TxnSeq txn, Lsn lsn,
                                          std::size_t& bytes) {
  std::string lsn_text = lsn.to_string();
  std::vector<sink::Header> h(7 + p.extra_headers.size());
  std::size_t n = 0;
  h[n++] = {"id", p.id};
  if (p.type) h[n++] = {"type", *p.type};
  for (const sink::Header& extra : p.extra_headers) h[n++] = extra;
  h[n++] = {"outbox.error", p.reason};
  h[n++] = {"outbox.original.topic", p.original_topic};
  h[n++] = {"outbox.table", p.table};
  h[n++] = {"outbox.lsn", lsn_text};
  if (p.size_error) h[n++] = {"outbox.value.omitted", "too large for the broker"};
  sink::Record rec{config_.dlq_topic, p.key, p.size_error ? std::nullopt : p.value,
                   std::span<const sink::Header>(h.data(), n), tracker_.commit_time_ms_of(txn)};
  bytes = dlq_bytes(p);
  // The broker refused this event's dead-letter record as too large before: compact at once.
  const bool broker_refused = !dlq_compact_.empty() && dlq_compact_.contains(p.id);
  sink::ProduceResult r;
  if (!broker_refused) r = sink_.produce(rec, txn | kDlqFlag, Route::kBatched);
  bool truncated = false;
  if (broker_refused ||
      (r.status == sink::ProduceStatus::kFailed && r.size_error && !sink_.stopped())) {
    truncated = true;
    std::string omitted;
    for (const sink::Header& extra : p.extra_headers) {
      omitted += (omitted.empty() ? "" : ", ") + std::string(extra.name);
    }
    const std::string fields[] = {
        clip(p.id),
        p.type ? clip(*p.type) : std::string(),
        clip(p.reason),
        clip(p.original_topic),
        clip(p.table),
        "the dead-letter record was too large: key and fields cut to " + std::to_string(kClipped) +
            " bytes, the value" +
            (omitted.empty() ? std::string() : " and the headers " + clip(omitted)) + " left out",
    };
    const std::optional<std::string> key =
        p.key ? std::optional<std::string>(clip(*p.key)) : std::nullopt;
    n = 0;
    h[n++] = {"id", fields[0]};
    if (p.type) h[n++] = {"type", fields[1]};
    h[n++] = {"outbox.error", fields[2]};
    h[n++] = {"outbox.original.topic", fields[3]};
    h[n++] = {"outbox.table", fields[4]};
    h[n++] = {"outbox.lsn", lsn_text};
    h[n++] = {"outbox.truncated", fields[5]};
    const sink::Record compact{
        config_.dlq_topic, key ? std::optional<std::string_view>(*key) : std::nullopt, std::nullopt,
        std::span<const sink::Header>(h.data(), n), tracker_.commit_time_ms_of(txn)};
    bytes = key ? key->size() : 0;
    r = sink_.produce(compact, txn | kDlqFlag, Route::kBatched);
  }
  if (r.status == sink::ProduceStatus::kQueued) {
    ++metrics_.dlq_events;
    log_->warn("event=dead_lettered slot={} dlq_topic={} truncated={} detail={}", config_.slot,
               config_.dlq_topic, truncated, quoted(clip(describe(p, lsn), 4 * kClipped)));
  }
  return r.status;
}

void Pipeline::on_delivery(const sink::Delivery& d) {
  const bool dlq_record = (d.opaque & kDlqFlag) != 0;
  const bool isolated = (d.opaque & kIsolatedFlag) != 0;
  const bool windowed = (d.opaque & kWindowedFlag) != 0;
  const AckTracker::TxnSeq txn = d.opaque & ~(kDlqFlag | kIsolatedFlag | kWindowedFlag);
  if (isolated) {
    isolation_inflight_ = false;
    // Told apart, good or poison (dead-lettered): the next window may grow.
    if (suspect_windows()) window_passed();
  }
  if (!d.ok && aborting_) return;  // never visible: sent again after the rewind
  if (exactly_once_ && !d.ok && !dlq_record) {
    // A failed record makes its Kafka transaction abort. One the broker refused goes alone next
    // time; refused again, it is poison (produce_insert()).
    if (sink::rejects_batch(d.kind) || d.kind == sink::ErrorKind::kAuthorization) {
      if (isolated) {
        refused_twice_[std::string(d.id_header)] = {d.error, std::string(d.error_name)};
      } else {
        suspects_.emplace(d.id_header);
      }
    }
    abort_kafka_transaction(d.error);
    return;
  }
  if (d.ok) {
    if (dlq_record && !dlq_compact_.empty()) dlq_compact_.erase(std::string(d.id_header));
    if (auto t = tracker_.commit_time_ms_of(txn); t > 0) {
      metrics_.commit_to_ack_seconds.observe(static_cast<double>(now_unix_ms() - t) / 1000.0);
    }
    tracker_.ack(txn, d.bytes);
    auto it = metrics_.events_published.find(d.topic);
    if (it == metrics_.events_published.end()) {
      const std::string_view series = metrics_.events_published.size() < Metrics::kMaxTopicSeries
                                          ? d.topic
                                          : Metrics::kOtherTopics;
      it = metrics_.events_published.find(series);
      if (it == metrics_.events_published.end()) {
        it = metrics_.events_published.emplace(std::string(series), 0).first;
      }
    }
    ++it->second;
    metrics_.bytes_published += d.bytes;
  } else {
    // librdkafka retries transient failures by itself until message.timeout.ms; a failure that
    // arrives here is never acknowledged (unless dead-lettered), so nothing at or after it is
    // confirmed.
    if (dlq_record && d.size_error && !has_header(d.other_headers, "outbox.truncated")) {
      // The broker (not the producer) refused the dead-letter record as too large: the topic's
      // max.message.bytes is below the producer's message.max.bytes. Nothing at or after it is
      // confirmed; the stream brings the event again after a rewind and it is dead-lettered
      // compact. Only a compact record refused too stops the relay (below).
      if (dlq_compact_.emplace(d.id_header).second) {
        log_->warn(
            "event=dead_letter_refused slot={} dlq_topic={} id={} error={}: the broker refused "
            "the dead-letter record as too large; rewinding to send a compact one",
            config_.slot, config_.dlq_topic, quoted(clip(d.id_header)), quoted(d.error));
      }
      if (exactly_once_) {
        abort_kafka_transaction(d.error);
      } else {
        begin_rewind(d.error);
      }
      return;
    }
    // A transient failure is the broker's state, not the record's: a sink that stopped (a lost
    // connection) failing what it had in flight, or a delivery that timed out (librdkafka's
    // message.timeout.ms, JetStream's acknowledgement wait) while the broker was frozen or away.
    // Not known to be stored, said nothing against the record: it goes again after a rewind as
    // it went, never poison, never dead-lettered, never a suspect (a suspect sent alone stays
    // one).
    const bool transient = d.kind == sink::ErrorKind::kTransient;
    if (transient) {
      if (!rewinding_) begin_rewind(d.error);
      if ((isolated || windowed) && !dlq_record) suspects_.emplace(d.id_header);
      if (rewinding_) return;
    }
    if (!isolated && !rewinding_ && sink_.stopped()) begin_rewind(d.error);
    if (rewinding_ && !isolated) {
      // Never acknowledged: the rewind forgets it and the stream sends it again. A record the
      // broker saw and refused, with the bad one or after it, goes alone next time; one purged
      // from the queue was never sent. A refused dead-letter record is a failure (below).
      const bool purged = d.error_name == "_PURGE_QUEUE";
      if (!dlq_record || purged) {
        if (!dlq_record) suspects_.emplace(d.id_header);
        return;
      }
    }
    ++metrics_.delivery_errors[std::string(d.error_name)];
    Lsn lsn = tracker_.commit_lsn_of(txn).value_or(Lsn{});
    Poison p{d.id_header,  d.key,          d.value, d.type_header,
             d.topic,      table_name(),   d.error, std::string(d.error_name),
             d.size_error, d.other_headers};
    if (dlq_record || config_.on_error == OnError::kFail) {
      fail({kExitPoisonEvent, std::string(dlq_record ? "dead-letter record of " : "delivery of ") +
                                  describe(p, lsn) + "; slot " + config_.slot +
                                  " is not confirmed past it"});
    } else if (std::size_t bytes = 0;
               dead_letter(p, txn, lsn, bytes) != sink::ProduceStatus::kQueued) {
      if (sink_.stopped()) {
        // The main producer stopped at a refused batch meanwhile: this record goes alone again.
        suspects_.emplace(d.id_header);
        begin_rewind("dead-letter record not accepted: producer stopped at a refused batch");
        return;
      }
      fail({kExitPoisonEvent, "cannot dead-letter " + describe(p, lsn) + " to topic " +
                                  config_.dlq_topic + " (producer queue full or rejected)"});
    } else {
      // The original record's place in its transaction passes to the DLQ record.
      tracker_.resize_event(txn, d.bytes, bytes);
      park(p.key);
    }
  }
}

// The broker refused a batch (an invalid record, too large for the topic, not authorized):
// librdkafka failed its records and stopped, so no later record of the partition was written.
// The session ends; its in-flight records are reported (acknowledged, or failed and marked as
// suspects), and rewind() then starts over from the confirmed position with a new producer.
void Pipeline::begin_rewind(const std::string& error) {
  if (rewinding_ || fatal_) return;
  rewinding_ = true;
  rewind_in_window_ = window_left_ > 0 || window_closing_;
  ++metrics_.producer_rewinds;
  log_->warn(
      "event=producer_rewind slot={} confirmed={} error={}: the producer stopped (Kafka: a batch "
      "refused by the broker, or its sequence lost; NATS: the connection lost); rewinding to the "
      "confirmed position with a new producer, the records a broker refused then go again in "
      "order, in windows halved at each refusal down to one record sent alone",
      config_.slot, confirmable().to_string(), quoted(error));
}

void Pipeline::abort_kafka_transaction(const std::string& error) {
  if (fatal_) return;
  aborting_ = true;
  if (rewinding_) return;
  rewinding_ = true;
  ++metrics_.producer_rewinds;
  log_->warn(
      "event=kafka_transaction_aborted slot={} committed={} error={}: resuming at the last "
      "Kafka commit",
      config_.slot, kafka_committed_.to_string(), quoted(error));
}

void Pipeline::rewound() {
  aborting_ = false;
  tracker_.forget_unacknowledged();
  // Exactly-once: what the aborted Kafka transaction held is gone, acknowledged or not.
  if (exactly_once_) {
    tracker_.rewind_to(kafka_committed_);
    produced_through_ = kafka_committed_;
  }
  txn_.reset();
  cut_.reset();  // its inserts may be among the forgotten
  isolation_inflight_ = false;
  rewinding_ = false;
  // Suspects in windows (produce_event()): half of them first; a refusal inside a window halves
  // that window, and the bad record lies within the records it held.
  refused_range_ = 0;
  if (!suspect_windows()) {
    window_size_ = 1;
  } else if (rewind_in_window_) {
    refused_range_ = window_size_;
    window_size_ = std::max<std::size_t>(1, window_size_ / 2);
  } else {
    window_size_ = std::max<std::size_t>(1, (suspects_.size() + 1) / 2);
  }
  window_left_ = 0;
  window_closing_ = false;
  rewind_in_window_ = false;
  log_->info("event=rewound slot={} confirmed={} to_send_alone={} window={}", config_.slot,
             confirmable().to_string(), suspects_.size(), window_size_);
}

}  // namespace outbox::relay
