#!/usr/bin/env python3
"""Writes outbox-relay.json, the Grafana dashboard of outbox-relay, from the panels below.

Edit this file, not the JSON: `python3 deploy/grafana/generate.py` rewrites it (with
`--stdout` it prints it instead), and tests/deploy checks that the committed JSON is this
script's output, that every query parses (promtool) and that every metric and label it queries
exists in a real relay's /metrics.
The dashboard was not imported into a Grafana here (no Grafana on the CI machines).
"""
import json
import pathlib
import sys

# Relays are picked by job and slot (outbox_relay_info carries the slot); every panel query
# selects the chosen instances.
SEL = 'instance=~"$instance"'


def panel(title, exprs, *, unit="short", kind="timeseries", w=12, h=8, description="",
          legend=None):
    targets = []
    for i, e in enumerate(exprs):
        expr, fmt = (e, None) if isinstance(e, str) else e
        t = {"datasource": {"type": "prometheus", "uid": "${datasource}"},
             "expr": expr, "refId": chr(ord("A") + i)}
        if fmt:
            t["legendFormat"] = fmt
        targets.append(t)
    p = {"type": kind, "title": title, "description": description,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "options": {}, "targets": targets, "gridPos": {"w": w, "h": h}}
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background",
                        "graphMode": "none"}
    return p


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"w": 24, "h": 1}}


PANELS = [
    row("State"),
    panel("Relays streaming the slot",
          [('sum(outbox_relay_state{state="streaming", ' + SEL + '})', "streaming")],
          kind="stat", w=6, h=4,
          description="Relays of the selected instances that stream. 1 is healthy; 0 means "
                      "no relay relays the slot (alert OutboxRelayNotStreaming)."),
    panel("Producer healthy",
          [('min(outbox_relay_producer_healthy{' + SEL + '})', "healthy")],
          kind="stat", w=6, h=4,
          description="0 once a relay stopped on a fatal error (exit 3, 4 or 5 follows)."),
    panel("State by relay",
          [('max by (instance, state) (outbox_relay_state{' + SEL + '}) == 1',
            "{{instance}} {{state}}")],
          kind="table", w=12, h=4,
          description="connecting, streaming, standby (another relay holds the slot), "
                      "backpressured, stopping."),
    panel("Relay identity",
          [('outbox_relay_info{' + SEL + '}',
            "{{instance}} slot={{slot}} publication={{publication}} table={{table}} "
            "version={{version}}")],
          kind="table", w=24, h=4),

    row("Throughput"),
    panel("Events published by topic",
          [('sum by (topic) (rate(outbox_relay_events_published_total{' + SEL +
            '}[$__rate_interval]))', "{{topic}}")],
          unit="ops", description="Events acknowledged by Kafka per second."),
    panel("Bytes and transactions",
          [('sum(rate(outbox_relay_bytes_published_total{' + SEL + '}[$__rate_interval]))',
            "key+value bytes/s"),
           ('sum(rate(outbox_relay_transactions_confirmed_total{' + SEL +
            '}[$__rate_interval]))', "transactions confirmed/s")],
          unit="short"),

    row("Latency"),
    panel("Commit to Kafka acknowledgement",
          [('histogram_quantile(0.5, sum by (le) (rate(outbox_relay_commit_to_ack_seconds_bucket{'
            + SEL + '}[$__rate_interval])))', "p50"),
           ('histogram_quantile(0.99, sum by (le) (rate(outbox_relay_commit_to_ack_seconds_bucket{'
            + SEL + '}[$__rate_interval])))', "p99")],
          unit="s", description="Commit in PostgreSQL to acknowledgement by Kafka, per event."),
    panel("Commit to read by the relay",
          [('histogram_quantile(0.99, sum by (le) (rate('
            'outbox_relay_commit_to_read_seconds_bucket{' + SEL + '}[$__rate_interval])))',
            "p99")],
          unit="s", description="PostgreSQL's part of the latency (WAL flush, walsender, "
                                "network, a backlog being read), per transaction."),

    row("Kafka"),
    panel("In flight",
          [('sum(outbox_relay_events_in_flight{' + SEL + '})', "events"),
           ('sum(outbox_relay_bytes_in_flight{' + SEL + '})', "bytes")],
          description="Produced, not yet acknowledged (bounded by --max-inflight-*)."),
    panel("Oldest unacknowledged event",
          [('max(outbox_relay_oldest_in_flight_age_seconds{' + SEL + '})', "age")],
          unit="s", description="Grows while Kafka does not acknowledge (alert "
                                "OutboxRelayProducerStalled)."),
    panel("Backpressure",
          [('sum(rate(outbox_relay_backpressure_seconds_total{' + SEL +
            '}[$__rate_interval]))', "share of time not reading WAL")],
          unit="percentunit"),
    panel("Errors, dead letters, rewinds",
          [('sum by (reason) (increase(outbox_relay_delivery_errors_total{' + SEL +
            '}[$__rate_interval]))', "delivery error {{reason}}"),
           ('sum(increase(outbox_relay_dlq_events_total{' + SEL + '}[$__rate_interval]))',
            "dead-lettered"),
           ('sum(increase(outbox_relay_parked_events_total{' + SEL + '}[$__rate_interval]))',
            "parked"),
           ('sum(outbox_relay_parked_aggregates{' + SEL + '})', "parked aggregates"),
           ('sum(increase(outbox_relay_producer_rewinds_total{' + SEL +
            '}[$__rate_interval]))', "producer rewinds")]),

    row("Slot and WAL"),
    panel("WAL held by the slot because of the relay",
          [('max(outbox_relay_lag_bytes{' + SEL + '} and on (instance, job) '
            'outbox_relay_state{state="streaming"} == 1)', "lag")],
          unit="bytes", description="Server WAL end minus the confirmed position, of the "
                                    "streaming relay (alert OutboxRelaySlotRetentionHigh)."),
    panel("Confirmed WAL per second",
          [('max(deriv(outbox_relay_confirmed_lsn{' + SEL + '}[5m]))', "confirmed"),
           ('max(deriv(outbox_relay_received_lsn{' + SEL + '}[5m]))', "received"),
           ('max(deriv(outbox_relay_server_wal_end_lsn{' + SEL + '}[5m]))', "server WAL end")],
          unit="Bps"),
    panel("Reconnects and publication checks",
          [('sum(increase(outbox_relay_reconnects_total{' + SEL + '}[$__rate_interval]))',
            "reconnects"),
           ('sum(increase(outbox_relay_resent_inserts_skipped_total{' + SEL +
            '}[$__rate_interval]))', "re-sent inserts not produced again"),
           ('sum(increase(outbox_relay_publication_checks_total{' + SEL +
            '}[$__rate_interval]))', "publication checks passed"),
           ('max(outbox_relay_confirmed_lsn{' + SEL + '}) - max(outbox_relay_publication_verified_lsn{'
            + SEL + '})', "confirmed minus verified (never > 0)")]),
    panel("Skipped changes",
          [('sum by (reason) (rate(outbox_relay_skipped_changes_total{' + SEL +
            '}[$__rate_interval]))', "{{reason}}")],
          unit="ops", description="Changes in the stream that are not outbox inserts."),

    row("Backlog (committed, not yet confirmed by the slot)"),
    panel("Pending events",
          [('max(outbox_relay_pending_events{' + SEL + '})', "pending"),
           ('max(outbox_relay_pending_events_lower_bound{' + SEL + '})',
            "count stopped at the scan limit (1)")]),
    panel("Oldest pending event",
          [('max(outbox_relay_oldest_pending_age_seconds{' + SEL + '})', "age")],
          unit="s"),
    panel("Backlog counts",
          [('sum by (result) (increase(outbox_relay_backlog_scans_total{' + SEL +
            '}[$__rate_interval]))', "{{result}}"),
           ('max(outbox_relay_backlog_scan_duration_seconds{' + SEL + '})', "last duration (s)"),
           ('time() - max(outbox_relay_backlog_scan_timestamp_seconds{' + SEL + '})',
            "seconds since the last count")]),
]


def layout(panels):
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        p["id"] = i
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if p["type"] == "row" or x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p["gridPos"].update({"x": x, "y": y})
        x += w
        row_h = max(row_h, h)
        if p["type"] == "row":
            x, y, row_h = 0, y + h, 0
    return panels


def variable(name, label, query):
    return {"name": name, "label": label, "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query,
            "includeAll": True, "multi": True, "refresh": 2, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


DASHBOARD = {
    "title": "outbox-relay",
    "uid": "outbox-relay",
    "description": "outbox-relay: PostgreSQL outbox to Kafka (deploy/grafana in the repository)",
    "tags": ["outbox-relay", "kafka", "postgresql"],
    "timezone": "utc",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0},
        variable("job", "Job", "label_values(outbox_relay_info, job)"),
        variable("slot", "Slot", 'label_values(outbox_relay_info{job=~"$job"}, slot)'),
        variable("instance", "Relay",
                 'label_values(outbox_relay_info{job=~"$job", slot=~"$slot"}, instance)'),
    ]},
    "annotations": {"list": []},
    "panels": layout(PANELS),
}

if __name__ == "__main__":
    text = json.dumps(DASHBOARD, indent=2, sort_keys=True) + "\n"
    if sys.argv[1:] == ["--stdout"]:  # what tests/deploy compares with the committed file
        sys.stdout.write(text)
    else:
        pathlib.Path(__file__).with_name("outbox-relay.json").write_text(text)
