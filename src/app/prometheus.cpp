#include "outbox/app/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <initializer_list>

namespace outbox::app {
namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string number(std::uint64_t v) { return std::to_string(v); }

class Writer {
 public:
  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }
  template <typename T>
  void sample(std::string_view name, std::string_view labels, T value) {
    out_.append(name);
    if (!labels.empty()) out_.append("{").append(labels).append("}");
    out_.append(" ").append(number(value)).append("\n");
  }
  template <typename T>
  void single(std::string_view name, std::string_view type, std::string_view help, T value) {
    header(name, type, help);
    sample(name, "", value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + escape_label_value(value) + "\"";
}

void histogram(Writer& w, const std::string& name, std::string_view help,
               const relay::Histogram& h) {
  w.header(name, "histogram", help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < relay::Histogram::kBounds.size(); ++i) {
    cumulative += h.buckets[i];
    w.sample(name + "_bucket", label("le", number(relay::Histogram::kBounds[i])), cumulative);
  }
  cumulative += h.buckets.back();
  w.sample(name + "_bucket", label("le", "+Inf"), cumulative);
  w.sample(name + "_sum", "", h.sum);
  w.sample(name + "_count", "", h.count);
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

std::string render_prometheus(const relay::Metrics& m, const RelayIdentity& id) {
  Writer w;
  w.header("outbox_relay_info", "gauge", "Identity of this relay; always 1.");
  w.sample("outbox_relay_info",
           label("slot", id.slot) + "," + label("publication", id.publication) + "," +
               label("table", id.table) + "," + label("version", id.version),
           std::uint64_t{1});

  w.header("outbox_relay_state", "gauge",
           "1 for the state the relay is in (connecting, streaming, standby, backpressured, "
           "stopping), 0 for the others.");
  for (auto s : {relay::State::kConnecting, relay::State::kStreaming, relay::State::kStandby,
                 relay::State::kBackpressured, relay::State::kStopping}) {
    w.sample("outbox_relay_state", label("state", relay::to_string(s)),
             std::uint64_t{m.state == s ? 1u : 0u});
  }
  w.single("outbox_relay_producer_healthy", "gauge",
           "0 once the relay stopped on a fatal error (a stopped producer rewinds instead).",
           std::uint64_t{m.producer_healthy ? 1u : 0u});

  w.header("outbox_relay_events_published_total", "counter",
           "Events acknowledged by Kafka, by topic (the first 1000 topics; the events of any "
           "other topic count under topic=\"_other\").");
  for (const auto& [topic, n] : m.events_published) {
    w.sample("outbox_relay_events_published_total", label("topic", topic), n);
  }
  w.single("outbox_relay_bytes_published_total", "counter",
           "Key and value bytes of the events acknowledged by Kafka.", m.bytes_published);
  w.header("outbox_relay_delivery_errors_total", "counter",
           "Deliveries that failed for good, by reason.");
  for (const auto& [reason, n] : m.delivery_errors) {
    w.sample("outbox_relay_delivery_errors_total", label("reason", reason), n);
  }
  w.single("outbox_relay_dlq_events_total", "counter",
           "Events routed to the dead-letter topic instead of their own.", m.dlq_events);
  w.single("outbox_relay_producer_rewinds_total", "counter",
           "Times the producer stopped (Kafka: a batch refused by the broker, its idempotent "
           "sequence lost, or a delivery unanswered within message.timeout.ms; NATS JetStream: "
           "the connection lost, or an acknowledgement overdue) "
           "and the relay rewound to the confirmed position with a new producer, sending the "
           "records a broker had refused one at a time, in order; with --delivery exactly-once "
           "also each aborted Kafka transaction (event=kafka_transaction_aborted), which resumes "
           "at the last Kafka commit.",
           m.producer_rewinds);
  w.single("outbox_relay_kafka_transactions_committed_total", "counter",
           "Kafka transactions committed (--delivery exactly-once), each carrying whole "
           "PostgreSQL transactions and a checkpoint.",
           m.kafka_transactions_committed);
  w.single("outbox_relay_kafka_transactions_aborted_total", "counter",
           "Kafka transactions aborted (--delivery exactly-once): the relay resumed at the last "
           "commit.",
           m.kafka_transactions_aborted);
  w.single("outbox_relay_resent_transactions_skipped_total", "counter",
           "Transactions the server sent again after a reconnect that Kafka had already "
           "acknowledged in full: not produced again.",
           m.resent_transactions_skipped);
  w.single("outbox_relay_resent_inserts_skipped_total", "counter",
           "Inserts the server sent again after a reconnect that Kafka had already acknowledged "
           "(in skipped transactions, or the first of the transaction the connection cut): not "
           "produced again.",
           m.resent_inserts_skipped);
  w.single("outbox_relay_ignored_messages_total", "counter",
           "Logical decoding messages with another prefix than --messages: not outbox events, "
           "not relayed.",
           m.other_prefix_messages);
  w.single("outbox_relay_rejected_messages_total", "counter",
           "Logical decoding messages with the --messages prefix that could not be relayed (not "
           "transactional, not a valid envelope, refused) and were skipped under --on-error fail.",
           m.rejected_messages);
  w.single("outbox_relay_transactions_confirmed_total", "counter",
           "Transactions whose events were all acknowledged and whose end position was confirmed.",
           m.transactions_confirmed);

  w.single("outbox_relay_confirmed_lsn", "gauge",
           "Position the slot may advance to: every event before it is acknowledged by Kafka "
           "(the flush position of the standby status updates), as a 64-bit WAL position.",
           m.confirmed_lsn.value);
  w.single("outbox_relay_received_lsn", "gauge", "Last WAL position received from the server.",
           m.received_lsn.value);
  w.single("outbox_relay_server_wal_end_lsn", "gauge",
           "Server WAL end reported by the last keepalive.", m.server_wal_end.value);
  w.single("outbox_relay_lag_bytes", "gauge",
           "Server WAL end minus confirmed position: WAL the slot still retains because of us.",
           lag_bytes(m));

  w.single("outbox_relay_events_in_flight", "gauge", "Events produced and not yet acknowledged.",
           m.events_in_flight);
  w.single("outbox_relay_bytes_in_flight", "gauge",
           "Key and value bytes produced and not yet acknowledged.", m.bytes_in_flight);
  w.single("outbox_relay_oldest_in_flight_age_seconds", "gauge",
           "Seconds since the commit of the oldest event not yet acknowledged; 0 when none is in "
           "flight.",
           m.oldest_unacked_age_seconds);

  histogram(w, "outbox_relay_commit_to_ack_seconds",
            "Seconds from the commit of an event's transaction in PostgreSQL to Kafka's "
            "acknowledgement of the event, one observation per event.",
            m.commit_to_ack_seconds);
  histogram(w, "outbox_relay_commit_to_read_seconds",
            "Seconds from the commit of a transaction in PostgreSQL to the relay reading its first "
            "message, one observation per transaction: the share of commit-to-ack spent before "
            "Kafka (WAL flush, walsender, network, backlog).",
            m.commit_to_read_seconds);
  histogram(w, "outbox_relay_kafka_commit_seconds",
            "Seconds one Kafka transaction commit took (--delivery exactly-once; no observations "
            "otherwise).",
            m.kafka_commit_seconds);

  w.single("outbox_relay_reconnects_total", "counter",
           "Replication connections re-established after a failure.", m.reconnects);
  w.single("outbox_relay_timeline_ghosts_total", "counter",
           "Promotions after which Kafka held events of the old timeline past the point where the "
           "new one left it: events of transactions the promoted server does not have "
           "(event=ghosts_published names the WAL range).",
           m.timeline_ghosts);
  w.single("outbox_relay_slot_losses_accepted_total", "counter",
           "Times --accept-slot-loss let the relay go on past a loss its progress record showed: "
           "a slot of that name gone (dropped or invalidated while the relay was down), a slot "
           "confirmed past the record, or a server whose WAL ends before it; events committed in "
           "between may be missing (event=slot_loss_accepted, slot_ahead_accepted or "
           "server_behind_record_accepted names the range).",
           m.slot_losses_accepted);
  w.single("outbox_relay_slot_gaps_repaired_total", "counter",
           "Starts that went on past a loss the progress record showed (a slot gone, or one "
           "confirmed past the record) after the outbox rows of the gap that Kafka lacked were "
           "published from the table (--gap-repair-column; event=slot_gap_repaired names the "
           "range and the counts).",
           m.slot_gaps_repaired);
  w.single("outbox_relay_backpressure_seconds_total", "counter",
           "Seconds spent not reading WAL because too much was in flight.", m.backpressure_seconds);

  w.header("outbox_relay_skipped_changes_total", "counter",
           "Changes in the stream that are not outbox events and were skipped, by reason "
           "(other_table, update, delete, truncate).");
  for (const char* reason : {"other_table", "update", "delete", "truncate"}) {
    auto it = m.skipped_changes.find(std::string_view(reason));
    w.sample("outbox_relay_skipped_changes_total", label("reason", reason),
             it == m.skipped_changes.end() ? std::uint64_t{0} : it->second);
  }
  w.single("outbox_relay_parked_events_total", "counter",
           "Events sent to the dead-letter topic because an earlier event of their aggregate was "
           "(--on-error dlq keeps each aggregate in order).",
           m.parked_events);
  w.single("outbox_relay_invalid_traceparent_total", "counter",
           "Events whose --column-traceparent value is no valid W3C traceparent: sent without "
           "the traceparent and tracestate headers, as W3C Trace Context has receivers ignore it.",
           m.invalid_traceparents);
  w.single("outbox_relay_parked_aggregates", "gauge",
           "Aggregates whose events go to the dead-letter topic since one of them was "
           "dead-lettered.",
           m.parked_aggregates);
  w.single("outbox_relay_all_aggregates_parked", "gauge",
           "1 once more aggregates had a dead-lettered event than the relay keeps apart (100,000 "
           "keys or 64 MiB of them): every later event goes to the dead-letter topic until the "
           "relay is restarted (event=all_aggregates_parked); else 0.",
           m.all_aggregates_parked);
  w.single("outbox_relay_publication_checks_total", "counter",
           "Checks that the publication publishes every insert into the outbox table, passed.",
           m.publication_checks);
  w.single("outbox_relay_publication_verified_lsn", "gauge",
           "WAL position read before the last publication check that passed, as a 64-bit WAL "
           "position: the confirmed position never goes past it.",
           m.publication_verified_lsn.value);
  return w.take();
}

}  // namespace outbox::app
