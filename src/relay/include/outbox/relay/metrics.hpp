// What the relay counts and measures, for /metrics, /readyz and the periodic summary log line.
// Owned and updated by the relay on its io_context thread; read a snapshot on the same thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::relay {

enum class State { kConnecting, kStreaming, kStandby, kBackpressured, kStopping };

inline const char* to_string(State s) {
  switch (s) {
    case State::kConnecting:
      return "connecting";
    case State::kStreaming:
      return "streaming";
    case State::kStandby:
      return "standby";
    case State::kBackpressured:
      return "backpressured";
    case State::kStopping:
      return "stopping";
  }
  return "unknown";
}

// Cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
struct Histogram {
  static constexpr std::array<double, 17> kBounds = {0.001, 0.002, 0.003, 0.005, 0.0075, 0.01,
                                                     0.015, 0.02,  0.03,  0.05,  0.1,    0.25,
                                                     0.5,   1.0,   2.5,   10.0,  60.0};
  std::array<std::uint64_t, kBounds.size() + 1> buckets{};  // last one is +Inf; not cumulative
  double sum = 0;
  std::uint64_t count = 0;
  double max = 0;

  void observe(double seconds) {
    std::size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++buckets[i];
    sum += seconds;
    if (seconds > max) max = seconds;
    ++count;
  }
};

struct Metrics {
  // outbox_relay_events_published_total keeps a series for at most this many topics (the first
  // met); the events of any other topic count under topic="_other". Bounded cardinality: every
  // distinct aggregate type may be a topic of its own.
  static constexpr std::size_t kMaxTopicSeries = 1000;
  static constexpr std::string_view kOtherTopics = "_other";
  // Counters.
  std::map<std::string, std::uint64_t, std::less<>> events_published;  // by topic
  std::uint64_t bytes_published = 0;                                   // key + value bytes
  std::map<std::string, std::uint64_t, std::less<>> delivery_errors;   // by reason
  std::uint64_t dlq_events = 0;
  // Sent again by the server after a reconnect and not produced again: Kafka had acknowledged
  // them (see Pipeline::resume()).
  std::uint64_t resent_transactions_skipped = 0;
  std::uint64_t resent_inserts_skipped = 0;  // inserts, and logical messages of --messages
  // --messages: logical messages with another prefix, ignored (other software uses messages).
  std::uint64_t other_prefix_messages = 0;
  // --messages, --on-error fail: messages with the prefix that could not be relayed (not
  // transactional, not an envelope, refused), skipped rather than stopping the relay.
  std::uint64_t rejected_messages = 0;
  std::uint64_t producer_rewinds = 0;
  // Exactly-once: Kafka transactions committed and aborted, and how long the commits took.
  std::uint64_t kafka_transactions_committed = 0;
  std::uint64_t kafka_transactions_aborted =
      0;  // the producer stopped; see Pipeline::begin_rewind()
  std::uint64_t transactions_confirmed = 0;
  std::uint64_t reconnects = 0;
  // Promotions after which Kafka held events of the old timeline past its switch point (ghosts).
  std::uint64_t timeline_ghosts = 0;
  std::uint64_t slot_losses_accepted = 0;  // --accept-slot-loss took a slot that was gone
  std::uint64_t slot_gaps_repaired = 0;    // a lost slot's gap published from the table first
  // Changes the stream carried that are not outbox events, by reason: other_table, update,
  // delete, truncate.
  std::map<std::string, std::uint64_t, std::less<>> skipped_changes;
  std::uint64_t publication_checks = 0;  // checks of the publication that passed
  // --on-error dlq: events dead-lettered only because an earlier event of their aggregate was.
  std::uint64_t parked_events = 0;
  // --column-traceparent: events whose column held no valid W3C traceparent (sent without trace
  // headers).
  std::uint64_t invalid_traceparents = 0;
  double backpressure_seconds = 0;
  Histogram commit_to_ack_seconds;   // per event: commit in PostgreSQL to Kafka's ack
  Histogram commit_to_read_seconds;  // per transaction: commit to its Begin read here
  Histogram kafka_commit_seconds;    // exactly-once: one Kafka commit call

  // Gauges.
  State state = State::kConnecting;
  std::string state_reason;  // why not streaming, for /readyz
  pgoutput::Lsn confirmed_lsn;
  pgoutput::Lsn received_lsn;
  pgoutput::Lsn server_wal_end;
  // WAL position read before the last publication check that passed: the confirmed position
  // never goes past it.
  pgoutput::Lsn publication_verified_lsn;
  std::uint64_t events_in_flight = 0;
  std::uint64_t bytes_in_flight = 0;
  double oldest_unacked_age_seconds = 0;
  bool producer_healthy = true;
  std::uint64_t parked_aggregates = 0;      // aggregates whose events go to the dead-letter topic
  std::uint64_t all_aggregates_parked = 0;  // 1: past the bound, every event is dead-lettered
};

}  // namespace outbox::relay
