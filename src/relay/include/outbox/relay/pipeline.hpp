// The relay's policies, with no I/O: replication frames and delivery reports go in; records to
// produce (through a Sink), the position that may be confirmed, and fatal errors come out.
// - Confirmation: the acknowledged prefix (AckTracker), capped by the last publication check.
// - Backpressure: reading stops at the in-flight bounds and resumes at half of them.
// - Poison: an event that cannot be mapped or delivered stops the relay (--on-error fail) or goes
//   to the dead-letter topic (dlq), and its aggregate is parked: its later events follow it there.
// - Refused batches: the producer stops at a batch the broker refuses; the session rewinds to
//   the confirmed position and the refused records are sent again in order, in windows halved
//   at each refusal and doubled after each one acknowledged, down to one record sent alone (see
//   produce_event()): one bad record among N costs O(log N) rewinds and round trips, not N.
// The Relay owns the connections, the timers and the producers, and asks this what to do.
// Not thread-safe: used from the relay's io_context thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "outbox/mapping/mapper.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"
#include "outbox/relay/ack_tracker.hpp"
#include "outbox/relay/metrics.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/sink/record.hpp"

// The logger is only held here (a shared_ptr of an incomplete type): this header needs no spdlog,
// which relay links privately. Whoever constructs a Pipeline (the Relay, the tests) includes
// spdlog itself.
namespace spdlog {
class logger;
}  // namespace spdlog

namespace outbox::relay {

// A condition that ends the relay with a specific exit code and message.
struct Fatal {
  int code;
  std::string message;
};

struct FatalError : std::runtime_error {
  explicit FatalError(Fatal f) : std::runtime_error(f.message), fatal(std::move(f)) {}
  Fatal fatal;
};

class Pipeline {
 public:
  // Which producer a record goes through: the batching one, or the one that sends a record alone.
  enum class Route { kBatched, kAlone };

  // Where records go, in the sink vocabulary (outbox/sink/record.hpp). The relay implements it
  // over its RecordSink (Kafka's producers or NATS's publisher); tests record.
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                                        Route route) = 0;
    // The batching producer stopped at a refused batch and accepts nothing more.
    virtual bool stopped() const = 0;
    // The batching producer stops at the first batch the broker refuses, so that no later record
    // of its partition goes (Kafka's enable.gapless.guarantee): the records of a refused batch
    // may go again batched, in a window of their own, a refusal stopping it again. Otherwise
    // each goes alone.
    virtual bool stops_at_refusal() const { return false; }
  };

  // What the relay does after a frame.
  enum class Step {
    kDone,
    // Wait for delivery reports (librdkafka's queue is full, or a record sent alone must be
    // acknowledged first), then hand the same frame again.
    kWaitDelivery,
    // A relation that may be a partition of the outbox created after the last publication
    // check: read the catalog (relation_resolved()), then hand the same frame again.
    kResolveRelation,
    // A keepalive: see keepalive().
    kKeepalive,
  };

  struct Keepalive {
    bool idle_advanced = false;    // nothing in flight: the confirmable position moved to walEnd
    bool reply_requested = false;  // the server asked for a status update now
  };

  Pipeline(const RelayConfig& config, Sink& sink, Metrics& metrics,
           std::shared_ptr<spdlog::logger> log);

  // One CopyData frame of the replication stream. Throws FatalError.
  Step on_frame(std::span<const std::byte> frame);
  Keepalive keepalive() const { return keepalive_; }
  std::uint32_t resolving_relid() const { return resolving_relid_; }
  // The catalog's answer for resolving_relid(): whether the relation still exists (it is not in
  // the outbox's tree, which set_outbox_tree() gave).
  void relation_resolved(std::uint32_t relid, bool exists);

  // A publication check passed: the outbox's tree, and the WAL position read before it.
  void set_outbox_tree(bool partitioned, const std::vector<std::uint32_t>& relids);
  void publication_verified(Lsn before_check);
  bool in_outbox_tree(std::uint32_t relid) const { return tree_relids_.contains(relid); }

  // A delivery report. Never throws: a failure that ends the relay is left in fatal().
  void on_delivery(const sink::Delivery& d);

  // The connection dropped: an open transaction will be sent again in full.
  void on_disconnect();

  // A new session is about to stream. With `history_continues` (same system and timeline as the
  // sessions before, so the WAL holds what Kafka acknowledged, unchanged), what the server sends
  // again that Kafka already acknowledged is not produced again: transactions whose commit is
  // before the acknowledged prefix, and the acknowledged first inserts of the transaction the
  // connection cut (DESIGN.md, "No re-send after a reconnect").
  void resume(bool history_continues);
  // After a promotion, before resume(): the new timeline's WAL is the old one's only up to
  // `switch_point`. What was acknowledged or committed past it belongs to transactions the new
  // timeline does not have (ghosts, reported by the relay); the watermark and the exactly-once
  // checkpoint go back to it, so that the new timeline's own transactions after it are sent,
  // never skipped. Returns how far past it they were (Lsn{} when nothing was).
  Lsn timeline_switched(Lsn switch_point);

  // The slot may be confirmed up to what Kafka acknowledged, and never past the WAL position of
  // the last publication check that passed: inserts hidden by a publication altered since are
  // then at least never confirmed.
  Lsn confirmable() const {
    const Lsn c = std::min(tracker_.confirmable(), verified_lsn_);
    return exactly_once_ ? std::min(c, kafka_committed_) : c;
  }
  // Exactly-once. in_transaction(): a PostgreSQL transaction is open (a Kafka transaction may
  // end only between two). produced_through(): the end of the last PostgreSQL transaction
  // handled (the checkpoint of a Kafka transaction committed now). kafka_committed(): a Kafka
  // transaction committed through `lsn`, which the slot may now be confirmed to.
  // start_from_checkpoint(): the last committed checkpoint, read at start: everything before it
  // is in Kafka, so it is skipped and confirmable.
  bool in_transaction() const { return txn_.has_value() || skipping_txn_; }
  Lsn produced_through() const { return std::max(produced_through_, tracker_.confirmable()); }
  void kafka_committed(Lsn lsn) { kafka_committed_ = std::max(kafka_committed_, lsn); }
  Lsn kafka_committed() const { return kafka_committed_; }
  void start_from_checkpoint(Lsn lsn);

  // The acknowledged prefix alone (the status update's write position).
  Lsn acknowledged() const { return tracker_.confirmable(); }
  // The acknowledged prefix is past the last check: a check would let the slot move.
  bool waiting_for_check() const { return tracker_.confirmable() > verified_lsn_; }
  Lsn verified() const { return verified_lsn_; }
  Lsn received() const { return received_; }
  Lsn server_wal_end() const { return server_wal_end_; }
  const AckTracker& tracker() const { return tracker_; }

  // Backpressure with hysteresis: true from the in-flight bounds until half of them is free, so
  // that the reader drains the socket in long bursts instead of waking for every report.
  bool backpressured();
  bool paused() const { return paused_; }
  bool below_low_watermark() const;

  // Refused batches. rewinding(): the batching producer stopped; the session must end. Once it
  // ended and the producers were replaced, rewound() forgets what was in flight.
  void begin_rewind(const std::string& error);
  // Exactly-once: the open Kafka transaction is aborted; the session ends and rewound() goes back
  // to the last commit. The aborted records' failure reports (purged) mean nothing.
  void abort_kafka_transaction(const std::string& error);
  bool rewinding() const { return rewinding_; }
  void rewound();
  // Records a window of suspects takes, for tests (1: a suspect goes alone).
  std::size_t suspect_window() const { return window_size_; }

  const std::optional<Fatal>& fatal() const { return fatal_; }

  // An event that cannot reach its topic: what is known of it, for the error or the DLQ record.
  struct Poison;

 private:
  enum class Skip : std::uint8_t { kOtherTable, kUpdate, kDelete, kTruncate };

  void on_keepalive(const pgoutput::Keepalive& k);
  Step on_message(const pgoutput::Begin& b, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Commit& c, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Relation& r, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Update& u, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Delete& d, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Truncate& t, const pgoutput::XLogData&);
  Step on_message(const pgoutput::Insert& ins, const pgoutput::XLogData& x);
  Step on_message(const pgoutput::LogicalMessage& m, const pgoutput::XLogData& x);
  template <typename M>
  Step on_message(const M&, const pgoutput::XLogData&) {
    // Published only with a user-made publication or unused pgoutput features: nothing to relay.
    return Step::kDone;
  }

  Step produce_insert(const pgoutput::Insert& ins, const pgoutput::XLogData& x);
  Step produce_message(const pgoutput::LogicalMessage& m);
  // A non-transactional message with the prefix: a mapping error, in a transaction of its own.
  Step message_outside_transaction(const pgoutput::LogicalMessage& m);
  // `message`: the error is a logical message's (see poison_in_stream()).
  Step map_error(const mapping::MapError& err, bool message = false);
  // A mapped event (an insert's or a message's) to its topic. `message`: the source is a message.
  Step produce_event(const mapping::Event& ev, bool message);
  // Nothing passes a record sent alone before its report, nor a full window of suspects before
  // all of its reports (see produce_event()).
  bool held_back();
  void window_passed();
  bool suspect_windows() const { return !exactly_once_ && sink_.stops_at_refusal(); }
  void count_other_prefix(std::string_view prefix);
  void count_skip(std::uint32_t relid, Skip skip, std::string_view table);
  void count_invalid_traceparent(std::string_view id);
  Step poison_in_stream(const Poison& p);
  // `bytes`: the key and value bytes of the record produced (its delivery report's).
  sink::ProduceStatus dead_letter(const Poison& p, AckTracker::TxnSeq txn, Lsn lsn,
                                  std::size_t& bytes);
  void park(std::optional<std::string_view> key);
  bool is_parked(std::optional<std::string_view> key) const;
  std::string describe(const Poison& p, Lsn lsn) const;
  std::string table_name() const;  // every source: the tables, and the messages when relayed
  void fail(Fatal f);

  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const noexcept {
      return std::hash<std::string_view>{}(key);
    }
  };

  const RelayConfig& config_;
  Sink& sink_;
  Metrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  mapping::Mapper mapper_;
  AckTracker tracker_;
  std::optional<AckTracker::TxnSeq> txn_;
  Lsn commit_lsn_;
  std::int64_t commit_time_ms_ = 0;
  std::int64_t commit_time_us_ = 0;  // the same, for ce_time
  // The insert being handled had an invalid traceparent: its id (a view into the frame).
  std::optional<std::string_view> invalid_traceparent_id_;
  Lsn received_;
  Lsn server_wal_end_;
  Lsn verified_lsn_;
  Keepalive keepalive_;
  bool paused_ = false;
  // The outbox's tree from the last check, and relations looked up since.
  bool outbox_partitioned_ = false;
  std::unordered_set<std::uint32_t> tree_relids_;      // the table and its partitions
  std::unordered_set<std::uint32_t> other_relids_;     // relations known not to be of the outbox
  std::unordered_set<std::uint32_t> vanished_relids_;  // dropped before they could be looked up
  std::uint32_t resolving_relid_ = 0;
  std::unordered_set<std::uint64_t> logged_skips_;  // relid << 2 | Skip, see count_skip()
  // Keys of aggregates with a dead-lettered event (see park()).
  std::unordered_set<std::string, StringHash, std::equal_to<>> parked_;
  bool parked_null_key_ = false;
  std::size_t parked_key_bytes_ = 0;
  bool parked_all_ = false;  // the bound below was reached: every aggregate is parked
  static constexpr std::size_t kMaxParkedAggregates = 100'000;
  static constexpr std::size_t kMaxParkedKeyBytes = 64 << 20;
  // Distinct topics events went to (Kafka only), at most config_.max_topics (see produce_event()).
  std::unordered_set<std::string, StringHash, std::equal_to<>> topics_;
  // Ids of records a refused batch failed: each is sent alone when the stream brings it again.
  std::unordered_set<std::string, StringHash, std::equal_to<>> suspects_;
  bool isolation_inflight_ = false;  // a record sent alone awaits its report
  // Suspects batched in windows (a sink that stops_at_refusal(), at-least-once; see
  // produce_event()): the next window's size in records (1: the suspect goes alone), the
  // records the open window still takes, and a full window awaiting its reports.
  std::size_t window_size_ = 1;
  std::size_t window_left_ = 0;
  bool window_closing_ = false;
  bool rewind_in_window_ = false;  // the rewind began while a window was open
  // Records of the last refused window not yet passed: the bad one is among them.
  std::size_t refused_range_ = 0;
  // Ids of events whose dead-letter record the broker refused as too large (the topic's
  // max.message.bytes below the producer's message.max.bytes): dead-lettered compact when the
  // stream brings them again; forgotten once a compact one is acknowledged.
  std::unordered_set<std::string, StringHash, std::equal_to<>> dlq_compact_;
  // No re-send after a reconnect (see resume()). The transaction open when the connection
  // dropped: its inserts handled so far need not be produced again once all are acknowledged.
  struct Cut {
    AckTracker::TxnSeq txn;
    Lsn final_lsn;
    std::size_t inserts;
  };
  std::optional<Cut> cut_;
  // Inserts and logical messages (both are changes pgoutput sends again in the same order)
  // of the open transaction handled so far, and the first of them already acknowledged.
  std::size_t inserts_in_txn_ = 0;
  std::size_t skip_inserts_ = 0;
  std::unordered_set<std::string, StringHash, std::equal_to<>> logged_prefixes_;
  bool skip_acknowledged_ = false;  // this session continues the history of the last
  bool skipping_txn_ = false;       // the open transaction was acknowledged in full
  // Exactly-once (see kafka_committed()).
  bool exactly_once_ = false;
  Lsn produced_through_;
  Lsn kafka_committed_;
  bool rewinding_ = false;
  bool aborting_ = false;  // see abort_kafka_transaction()
  // Exactly-once: records the broker refused when sent alone, by id (see produce_insert()).
  struct Refusal {
    std::string error;
    std::string error_name;
  };
  std::unordered_map<std::string, Refusal, StringHash, std::equal_to<>> refused_twice_;
  std::optional<Fatal> fatal_;
  pgoutput::Message msg_;
  pgoutput::Message insert_msg_;
  pgoutput::DecodeError decode_error_;
  // id, type, then the mapper's headers (CloudEvents, trace context, placements): sized once;
  // grows for a logical message with more headers than that.
  std::vector<sink::Header> headers_;
};

}  // namespace outbox::relay
