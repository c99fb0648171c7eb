#include "outbox/app/prometheus.hpp"

#include "metric_table.hpp"
#include "outbox/app/metric_defs.hpp"

namespace outbox::app {
namespace {

// What the relay's families are read from.
struct RelayInput {
  const relay::Metrics& m;
  const RelayIdentity& id;
};
using Family = MetricFamily<RelayInput>;
constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;

// A family of one sample without labels: `get` reads its value (a count or seconds).
template <typename Get>
Family single(std::string_view name, MetricType type, std::string_view help, Get get) {
  return {{name, type, {}, help}, [get](Series& s, const RelayInput& in) {
            s.value(get(in.m));
            return true;
          }};
}

// A histogram family: `get` reads it.
template <typename Get>
Family histogram(std::string_view name, std::string_view help, Get get) {
  return {{name, MetricType::kHistogram, {}, help}, [get](Series& s, const RelayInput& in) {
            s.histogram(get(in.m));
            return true;
          }};
}

// A counter by one label, a series for each entry of the map `get` reads.
template <typename Get>
Family by_label(std::string_view name, std::string_view label, std::string_view help, Get get) {
  return {{name, kCounter, {label}, help}, [get](Series& s, const RelayInput& in) {
            for (const auto& [value, n] : get(in.m)) s.labelled({value}, n);
            return true;
          }};
}

using M = relay::Metrics;

const std::vector<Family>& families() {
  static const std::vector<Family> rows = {
      {{"outbox_relay_info",
        kGauge,
        {"slot", "publication", "table", "version"},
        "Identity of this relay; always 1."},
       [](Series& s, const RelayInput& in) {
         s.labelled({in.id.slot, in.id.publication, in.id.table, in.id.version}, 1);
         return true;
       }},
      {{"outbox_relay_state",
        kGauge,
        {"state"},
        "1 for the state the relay is in (connecting, streaming, standby, backpressured, "
        "stopping), 0 for the others."},
       [](Series& s, const RelayInput& in) {
         for (auto st :
              {relay::State::kConnecting, relay::State::kStreaming, relay::State::kStandby,
               relay::State::kBackpressured, relay::State::kStopping}) {
           s.labelled({relay::to_string(st)}, in.m.state == st ? 1u : 0u);
         }
         return true;
       }},
      single("outbox_relay_producer_healthy", kGauge,
             "0 once the relay stopped on a fatal error (a stopped producer rewinds instead).",
             [](const M& m) { return std::uint64_t{m.producer_healthy ? 1u : 0u}; }),
      by_label(
          "outbox_relay_events_published_total", "topic",
          "Events acknowledged by Kafka, by topic (the first 1000 topics; the events of any "
          "other topic count under topic=\"_other\").",
          [](const M& m) -> const auto& { return m.events_published; }),
      single("outbox_relay_bytes_published_total", kCounter,
             "Key and value bytes of the events acknowledged by Kafka.",
             [](const M& m) { return m.bytes_published; }),
      by_label(
          "outbox_relay_delivery_errors_total", "reason",
          "Deliveries that failed for good, by reason.",
          [](const M& m) -> const auto& { return m.delivery_errors; }),
      single("outbox_relay_dlq_events_total", kCounter,
             "Events routed to the dead-letter topic instead of their own.",
             [](const M& m) { return m.dlq_events; }),
      single(
          "outbox_relay_producer_rewinds_total", kCounter,
          "Times the producer stopped (Kafka: a batch refused by the broker, its idempotent "
          "sequence lost, or a delivery unanswered within message.timeout.ms; NATS JetStream: "
          "the connection lost, or an acknowledgement overdue) "
          "and the relay rewound to the confirmed position with a new producer, sending the "
          "records a broker had refused again in order (Kafka at-least-once: in windows halved at "
          "each refusal, down to one record sent alone; otherwise one at a time); with "
          "--delivery exactly-once "
          "also each aborted Kafka transaction (event=kafka_transaction_aborted), which "
          "resumes at the last Kafka commit.",
          [](const M& m) { return m.producer_rewinds; }),
      single("outbox_relay_kafka_transactions_committed_total", kCounter,
             "Kafka transactions committed (--delivery exactly-once), each carrying whole "
             "PostgreSQL transactions and a checkpoint.",
             [](const M& m) { return m.kafka_transactions_committed; }),
      single("outbox_relay_kafka_transactions_aborted_total", kCounter,
             "Kafka transactions aborted (--delivery exactly-once): the relay resumed at the last "
             "commit.",
             [](const M& m) { return m.kafka_transactions_aborted; }),
      single("outbox_relay_resent_transactions_skipped_total", kCounter,
             "Transactions the server sent again after a reconnect that Kafka had already "
             "acknowledged in full: not produced again.",
             [](const M& m) { return m.resent_transactions_skipped; }),
      single("outbox_relay_resent_inserts_skipped_total", kCounter,
             "Inserts the server sent again after a reconnect that Kafka had already "
             "acknowledged (in skipped transactions, or the first of the transaction the "
             "connection cut): not produced again.",
             [](const M& m) { return m.resent_inserts_skipped; }),
      single("outbox_relay_ignored_messages_total", kCounter,
             "Logical decoding messages with another prefix than --messages: not outbox events, "
             "not relayed.",
             [](const M& m) { return m.other_prefix_messages; }),
      single("outbox_relay_rejected_messages_total", kCounter,
             "Logical decoding messages with the --messages prefix that could not be relayed "
             "(not transactional, not a valid envelope, refused) and were skipped under "
             "--on-error fail.",
             [](const M& m) { return m.rejected_messages; }),
      single("outbox_relay_transactions_confirmed_total", kCounter,
             "Transactions whose events were all acknowledged and whose end position was "
             "confirmed.",
             [](const M& m) { return m.transactions_confirmed; }),
      single("outbox_relay_confirmed_lsn", kGauge,
             "Position the slot may advance to: every event before it is acknowledged by Kafka "
             "(the flush position of the standby status updates), as a 64-bit WAL position.",
             [](const M& m) { return m.confirmed_lsn.value; }),
      single("outbox_relay_received_lsn", kGauge, "Last WAL position received from the server.",
             [](const M& m) { return m.received_lsn.value; }),
      single("outbox_relay_server_wal_end_lsn", kGauge,
             "Server WAL end reported by the last keepalive.",
             [](const M& m) { return m.server_wal_end.value; }),
      single("outbox_relay_lag_bytes", kGauge,
             "Server WAL end minus confirmed position: WAL the slot still retains because of us.",
             [](const M& m) { return lag_bytes(m); }),
      single("outbox_relay_events_in_flight", kGauge, "Events produced and not yet acknowledged.",
             [](const M& m) { return m.events_in_flight; }),
      single("outbox_relay_bytes_in_flight", kGauge,
             "Key and value bytes produced and not yet acknowledged.",
             [](const M& m) { return m.bytes_in_flight; }),
      single("outbox_relay_oldest_in_flight_age_seconds", kGauge,
             "Seconds since the commit of the oldest event not yet acknowledged; 0 when none is "
             "in flight.",
             [](const M& m) { return m.oldest_unacked_age_seconds; }),
      histogram(
          "outbox_relay_commit_to_ack_seconds",
          "Seconds from the commit of an event's transaction in PostgreSQL to Kafka's "
          "acknowledgement of the event, one observation per event.",
          [](const M& m) -> const auto& { return m.commit_to_ack_seconds; }),
      histogram(
          "outbox_relay_commit_to_read_seconds",
          "Seconds from the commit of a transaction in PostgreSQL to the relay reading its "
          "first message, one observation per transaction: the share of commit-to-ack "
          "spent before Kafka (WAL flush, walsender, network, backlog).",
          [](const M& m) -> const auto& { return m.commit_to_read_seconds; }),
      histogram(
          "outbox_relay_kafka_commit_seconds",
          "Seconds one Kafka transaction commit took (--delivery exactly-once; no "
          "observations otherwise).",
          [](const M& m) -> const auto& { return m.kafka_commit_seconds; }),
      single("outbox_relay_reconnects_total", kCounter,
             "Replication connections re-established after a failure.",
             [](const M& m) { return m.reconnects; }),
      single("outbox_relay_timeline_ghosts_total", kCounter,
             "Promotions after which Kafka held events of the old timeline past the point where "
             "the new one left it: events of transactions the promoted server does not have "
             "(event=ghosts_published names the WAL range).",
             [](const M& m) { return m.timeline_ghosts; }),
      single("outbox_relay_slot_losses_accepted_total", kCounter,
             "Times --accept-slot-loss let the relay go on past a loss its progress record "
             "showed: a slot of that name gone (dropped or invalidated while the relay was "
             "down), a slot confirmed past the record, or a server whose WAL ends before it; "
             "events committed in between may be missing (event=slot_loss_accepted, "
             "slot_ahead_accepted or server_behind_record_accepted names the range).",
             [](const M& m) { return m.slot_losses_accepted; }),
      single("outbox_relay_slot_gaps_repaired_total", kCounter,
             "Starts that went on past a loss the progress record showed (a slot gone, or one "
             "confirmed past the record) after the outbox rows of the gap that the broker (Kafka "
             "or JetStream) lacked, or with SQS and EventBridge every row of the window, were "
             "published from the table (--gap-repair-column; event=slot_gap_repaired names the "
             "range and the counts).",
             [](const M& m) { return m.slot_gaps_repaired; }),
      single("outbox_relay_backpressure_seconds_total", kCounter,
             "Seconds spent not reading WAL because too much was in flight.",
             [](const M& m) { return m.backpressure_seconds; }),
      {{"outbox_relay_skipped_changes_total",
        kCounter,
        {"reason"},
        "Changes in the stream that are not outbox events and were skipped, by reason "
        "(other_table, update, delete, truncate)."},
       [](Series& s, const RelayInput& in) {
         for (const char* reason : {"other_table", "update", "delete", "truncate"}) {
           auto it = in.m.skipped_changes.find(std::string_view(reason));
           s.labelled({reason}, it == in.m.skipped_changes.end() ? std::uint64_t{0} : it->second);
         }
         return true;
       }},
      single("outbox_relay_parked_events_total", kCounter,
             "Events sent to the dead-letter topic because an earlier event of their aggregate "
             "was (--on-error dlq keeps each aggregate in order).",
             [](const M& m) { return m.parked_events; }),
      single("outbox_relay_invalid_traceparent_total", kCounter,
             "Events whose --column-traceparent value is no valid W3C traceparent: sent without "
             "the traceparent and tracestate headers, as W3C Trace Context has receivers ignore "
             "it.",
             [](const M& m) { return m.invalid_traceparents; }),
      single("outbox_relay_parked_aggregates", kGauge,
             "Aggregates whose events go to the dead-letter topic since one of them was "
             "dead-lettered.",
             [](const M& m) { return m.parked_aggregates; }),
      single("outbox_relay_all_aggregates_parked", kGauge,
             "1 once more aggregates had a dead-lettered event than the relay keeps apart "
             "(100,000 keys or 64 MiB of them): every later event goes to the dead-letter topic "
             "until the relay is restarted (event=all_aggregates_parked); else 0.",
             [](const M& m) { return m.all_aggregates_parked; }),
      single("outbox_relay_publication_checks_total", kCounter,
             "Checks that the publication publishes every insert into the outbox table, passed.",
             [](const M& m) { return m.publication_checks; }),
      single("outbox_relay_publication_verified_lsn", kGauge,
             "WAL position read before the last publication check that passed, as a 64-bit WAL "
             "position: the confirmed position never goes past it.",
             [](const M& m) { return m.publication_verified_lsn.value; }),
  };
  return rows;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::uint64_t lag_bytes(const relay::Metrics& m) {
  if (m.server_wal_end.is_zero() || m.server_wal_end <= m.confirmed_lsn) return 0;
  return m.server_wal_end.value - m.confirmed_lsn.value;
}

std::vector<MetricDef> relay_metric_defs() { return defs_of(families()); }

std::string render_prometheus(const relay::Metrics& m, const RelayIdentity& id) {
  return render_families(families(), RelayInput{m, id});
}

}  // namespace outbox::app
