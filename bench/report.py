#!/usr/bin/env python3
"""Turns bench/run.sh's raw measurements into the results table (markdown + JSON).

Medians over the repetitions; ratios relay/decoder-alone, relay/pg_recvlogical, relay/Debezium;
targets checked. Standard library only.
"""
import argparse
import csv
import json
import os
import statistics
import sys

CONSUMERS = ["decoder", "recvlogical", "drain", "relay", "relay_eos", "relay_msg", "relay_tls",
             "relay_nats", "relay_sqs", "relay_eventbridge", "debezium"]
LABEL = {
    "decoder": "decoder alone (pg_logical_slot_get_binary_changes)",
    "recvlogical": "pg_recvlogical (pgoutput, to /dev/null)",
    "drain": "walsender ceiling: bench_tool drain (reads like the relay, discards, no Kafka)",
    "relay": "outbox-relay (until last ack)",
    "relay_eos": "outbox-relay --delivery exactly-once (until last commit, read_committed)",
    "relay_msg": "outbox-relay --messages (the same events as logical messages, until last ack)",
    "relay_tls": "outbox-relay through SASL_SSL (PLAIN over TLS, until last ack)",
    "relay_nats": "outbox-relay --nats (NATS JetStream instead of Kafka, until the stream holds every event)",
    "relay_sqs": "outbox-relay --sqs (an SQS FIFO queue of moto, until the queue holds every event: measures moto)",
    "relay_eventbridge": "outbox-relay --eventbridge (a bus of moto with no rule, until the slot is confirmed: measures moto)",
    "debezium": "Debezium 3.6 + outbox router (Connect standalone)",
}
WORKLOAD = {
    "W1": "200,000 one-event transactions, 200-byte payloads",
    "W2": "200 transactions x 1,000 events, 200-byte payloads",
    "W3": "50,000 one-event transactions, 4 KiB payloads",
    "W1B": "W1 with a bytea payload (200 random bytes; hex on the wire, raw bytes to Kafka)",
    "W1T": "W1 spread over four outbox tables (one slot, --table x4)",
    "W1M": "W1's one-event transactions, few, for the AWS sinks on moto (the test server is the bound)",
}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fnum(x, nd=0):
    if x is None:
        return "-"
    return f"{x:,.{nd}f}"


def ratio_cross(table, wl_a, wl_b, consumer, key="events_per_s"):
    """One consumer's figure on workload wl_a over the same on wl_b."""
    x = table.get(wl_a, {}).get(consumer, {}).get(key)
    y = table.get(wl_b, {}).get(consumer, {}).get(key)
    return x / y if x and y else None


def read_latency(path, metrics):
    """One latency run's key=value line, plus the relay's histograms from its /metrics text."""
    if not path or not os.path.exists(path):
        return None
    kv = dict(p.split("=", 1) for p in open(path).read().split() if "=" in p)
    latency = {k: (float(v) if v.replace(".", "", 1).isdigit() else v) for k, v in kv.items()}
    latency["method"] = "commit timestamp (Kafka record time) to consumption by a librdkafka consumer: an upper bound of commit-to-ack"
    if metrics and os.path.exists(metrics):
        # Prometheus histograms: quantiles as bucket bounds. commit_to_ack per event,
        # commit_to_read per transaction (the part spent before Kafka).
        for hist, key in (("commit_to_ack", "ack"), ("commit_to_read", "read"), ("kafka_commit", "kafka_commit")):
            buckets = []
            for line in open(metrics):
                if line.startswith(f"outbox_relay_{hist}_seconds_bucket{{"):
                    le = line.split('le="', 1)[1].split('"', 1)[0]
                    buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
            if buckets and buckets[-1][1] > 0:
                total = buckets[-1][1]
                q = lambda p: next(le for le, c in buckets if c >= p * total) * 1000
                latency[f"{key}_histogram_p50_ms_le"] = q(0.5)
                latency[f"{key}_histogram_p99_ms_le"] = q(0.99)
                latency[f"{key}_histogram_count"] = total
    return latency


def render(doc):
    """The markdown of one run, from its JSON document (latest.md, and the performance page)."""
    table, ratios, targets = doc["results"], doc["ratios"], doc["targets"]
    latency, latency_eos = doc.get("latency"), doc.get("latency_exactly_once")
    micro, versions = doc.get("micro"), doc.get("versions") or {}
    md = []
    md.append(f"### Benchmark {doc['run_id']}{' (quick smoke run: tiny workloads, not representative)' if doc.get('quick') else ''}\n")
    md.append(f"{doc.get('cores')} cores; " + ", ".join(f"{k} {v}" for k, v in versions.items() if k not in ("cores",)) + "\n")
    md.append("Median of the repetitions. events/s and MB/s (payload bytes) from process start until the last event is in "
              "Kafka (relay: acknowledged; Debezium: in the topic) or the decoder/pg_recvlogical/drain reached the end LSN. "
              "CPU = user+sys of the consumer process (decoder alone: the backend running the query). "
              "Peak RSS = VmHWM (decoder alone: a backend, shared buffers included).\n")
    for wl in sorted(table):
        md.append(f"\n**{wl}: {WORKLOAD.get(wl, wl)}** ({table[wl][next(iter(table[wl]))]['events']:,} events)\n")
        md.append("| consumer | events/s | MB/s | CPU s / M events | peak RSS MiB | notes |")
        md.append("|---|---:|---:|---:|---:|---|")
        for c in CONSUMERS:
            e = table[wl].get(c)
            if not e:
                continue
            notes = []
            if "confirm_s" in e:
                notes.append(f"slot confirmed after {e['confirm_s']:.2f} s ({fnum(e.get('events_per_s_until_confirmed'))} ev/s)")
            if c == "debezium" and "steady_events_per_s" in e:
                notes.append(f"first-to-last record {fnum(e['steady_events_per_s'])} ev/s")
            md.append(f"| {LABEL[c]} | {fnum(e['events_per_s'])} | {fnum(e['payload_mb_per_s'], 1)} | "
                      f"{fnum(e['cpu_s_per_million_events'], 2)} | {fnum(e['peak_rss_mib'], 1)} | {'; '.join(notes)} |")
        r = ratios[wl]
        relay_row = table[wl].get("relay", {})
        parts = []
        if r.get("relay_over_decoder"):
            parts.append(f"relay/decoder-alone **{fnum(r['relay_over_decoder'], 2)}**")
        if r.get("relay_over_recvlogical"):
            parts.append(f"relay/pg_recvlogical **{fnum(r['relay_over_recvlogical'], 2)}**")
        if r.get("relay_over_drain"):
            parts.append(f"relay/walsender ceiling **{fnum(r['relay_over_drain'], 2)}** "
                         f"(the ceiling is {fnum(r.get('drain_over_decoder'), 2)} of the decoder alone)")
        if r.get("relay_tls_over_relay"):
            tls = table[wl].get("relay_tls", {})
            cpu = (tls.get("cpu_s_per_million_events") or 0) / (relay_row.get("cpu_s_per_million_events") or 1)
            parts.append(f"relay through SASL_SSL/plaintext **{fnum(r['relay_tls_over_relay'], 2)}** "
                         f"(CPU per event {fnum(cpu, 2)}x)")
        if r.get("relay_eos_over_relay"):
            parts.append(f"exactly-once/at-least-once **{fnum(r['relay_eos_over_relay'], 2)}**")
        if r.get("relay_msg_over_relay"):
            parts.append(f"messages/table **{fnum(r['relay_msg_over_relay'], 2)}**")
        if r.get("relay_nats_over_relay"):
            parts.append(f"JetStream/Kafka **{fnum(r['relay_nats_over_relay'], 2)}**")
        if r.get("relay_sqs_over_relay"):
            parts.append(f"SQS on moto/Kafka **{fnum(r['relay_sqs_over_relay'], 3)}**")
        if r.get("relay_eventbridge_over_relay"):
            parts.append(f"EventBridge on moto/Kafka **{fnum(r['relay_eventbridge_over_relay'], 2)}**")
        if r.get("relay_over_relay_w1"):
            parts.append(f"relay on {wl}/relay on W1 **{fnum(r['relay_over_relay_w1'], 2)}** "
                         f"(pg_recvlogical on {wl}/on W1 {fnum(r.get('recvlogical_over_recvlogical_w1'), 2)})")
        if r.get("relay_over_debezium"):
            parts.append(f"relay/Debezium **{fnum(r['relay_over_debezium'], 1)}** "
                         f"(vs its first-to-last rate {fnum(r.get('relay_over_debezium_steady'), 1)}), "
                         f"CPU per event relay/Debezium **{fnum(r.get('relay_cpu_over_debezium_cpu'), 3)}**")
        md.append("\nRatios (events/s): " + "; ".join(parts) + "\n")
    if latency:
        md.append(f"\n**Latency** at {fnum(latency.get('rate'))} events/s for {fnum(latency.get('seconds'))} s "
                  f"(achieved {fnum(latency.get('achieved'))}/s, {fnum(latency.get('events'))} events), "
                  f"commit time to consumption: p50 {latency.get('p50_ms')} ms, p99 {latency.get('p99_ms')} ms, "
                  f"max {latency.get('max_ms')} ms; relay CPU {latency.get('cpu_s')} s, peak RSS "
                  f"{fnum((latency.get('rss_kb') or 0) / 1024 if isinstance(latency.get('rss_kb'), float) else None, 1)} MiB." +
                  (f" Relay's own commit-to-ack histogram (/metrics): p50 <= {latency['ack_histogram_p50_ms_le']:g} ms, "
                   f"p99 <= {latency['ack_histogram_p99_ms_le']:g} ms (bucket bounds)." if "ack_histogram_p99_ms_le" in latency else "") +
                  (f" Commit to read by the relay (per transaction, before Kafka): p50 <= {latency['read_histogram_p50_ms_le']:g} ms, "
                   f"p99 <= {latency['read_histogram_p99_ms_le']:g} ms." if "read_histogram_p99_ms_le" in latency else "") +
                  (f" Kafka alone at the same rate (bench_tool produce-latency, same producer settings, produce to "
                   f"delivery report): p50 {latency['kafka_alone_p50_ms']} ms, p99 {latency['kafka_alone_p99_ms']} ms, "
                   f"max {latency['kafka_alone_max_ms']} ms." if isinstance(latency.get("kafka_alone_p99_ms"), float) else "") + "\n")
    if latency_eos:
        le = latency_eos
        md.append(f"\n**Latency, exactly-once** (--delivery exactly-once) at {fnum(le.get('rate'))} events/s for "
                  f"{fnum(le.get('seconds'))} s (achieved {fnum(le.get('achieved'))}/s, {fnum(le.get('events'))} events), "
                  f"commit time to visible to a read_committed consumer: p50 {le.get('p50_ms')} ms, p99 {le.get('p99_ms')} ms, "
                  f"max {le.get('max_ms')} ms; relay CPU {le.get('cpu_s')} s." +
                  (f" Kafka commit (commit_transaction round trip, /metrics): p50 <= {le['kafka_commit_histogram_p50_ms_le']:g} ms, "
                   f"p99 <= {le['kafka_commit_histogram_p99_ms_le']:g} ms over {fnum(le['kafka_commit_histogram_count'])} commits."
                   if "kafka_commit_histogram_p99_ms_le" in le else "") + "\n")
    if micro:
        md.append("\n**Micro-benchmark** (decode + map per event, bench_decode_map): " +
                  "; ".join(f"{m['name']}: {m['ns_per_event']:.1f} ns/event, {m['allocs_per_event']} allocations/event" for m in micro) + "\n")
    md.append("\n**Targets**\n")
    md.append("| workload | target | value | bound | met |")
    md.append("|---|---|---:|---|---|")
    for t in targets:
        v = t["value"]
        md.append(f"| {t['workload']} | {t['target']} | {fnum(v, 2) if isinstance(v, float) else '-'} | {t['bound']} | "
                  f"{'yes' if t['met'] else ('no' if t['met'] is False else '-')} |")
    return "\n".join(md) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--latency")
    ap.add_argument("--micro")
    ap.add_argument("--metrics", help="the relay's /metrics text after the latency run")
    ap.add_argument("--latency-eos", help="the latency run with --delivery exactly-once")
    ap.add_argument("--metrics-eos", help="the relay's /metrics text after the exactly-once latency run")
    ap.add_argument("--versions")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()

    rows = list(csv.DictReader(open(a.runs), delimiter="\t"))
    f = lambda r, k: float(r[k]) if r.get(k) not in (None, "") else None
    results = {}
    for r in rows:
        results.setdefault(r["workload"], {}).setdefault(r["consumer"], []).append(r)

    table = {}
    for wl, byc in results.items():
        table[wl] = {}
        for c, rs in byc.items():
            n = int(rs[0]["events"])
            size = int(rs[0]["payload_bytes"])
            wall = med([f(r, "wall_s") for r in rs])
            cpu = med([f(r, "cpu_s") for r in rs])
            rss = med([f(r, "rss_kb") for r in rs])
            rss_max = max(f(r, "rss_kb") or 0 for r in rs)
            steady = med([f(r, "steady_s") for r in rs])
            confirm = med([f(r, "confirm_s") for r in rs])
            e = {
                "events": n,
                "payload_bytes": size,
                "repetitions": len(rs),
                "wall_s": wall,
                "events_per_s": n / wall if wall else None,
                "payload_mb_per_s": n * size / wall / 1e6 if wall else None,
                "cpu_s": cpu,
                "cpu_s_per_million_events": cpu / n * 1e6 if cpu is not None else None,
                "peak_rss_mib": rss / 1024 if rss is not None else None,
                "peak_rss_mib_max": rss_max / 1024,
                "runs": [{k: r[k] for k in ("rep", "wall_s", "cpu_s", "rss_kb", "confirm_s", "steady_s")} for r in rs],
            }
            if confirm is not None:
                e["confirm_s"] = confirm
                e["events_per_s_until_confirmed"] = n / confirm if confirm else None
            if steady is not None and steady > 0:
                # From the first record in Kafka to the last: the rate once running (for Debezium,
                # without the JVM start-up and connector initialisation).
                e["steady_events_per_s"] = n / steady
            table[wl][c] = e

    def ratio(wl, a_, b_, key="events_per_s"):
        x = table.get(wl, {}).get(a_, {}).get(key)
        y = table.get(wl, {}).get(b_, {}).get(key)
        return x / y if x and y else None

    ratios = {}
    targets = []
    for wl in sorted(table):
        t = table[wl]
        relay = t.get("relay", {})
        dbz = t.get("debezium", {})
        r = {
            "relay_over_decoder": ratio(wl, "relay", "decoder"),
            "relay_over_recvlogical": ratio(wl, "relay", "recvlogical"),
            "relay_over_debezium": ratio(wl, "relay", "debezium"),
            "relay_over_drain": ratio(wl, "relay", "drain"),
            "relay_tls_over_relay": ratio(wl, "relay_tls", "relay"),
            "relay_eos_over_relay": ratio(wl, "relay_eos", "relay"),
            "relay_msg_over_relay": ratio(wl, "relay_msg", "relay"),
            "relay_nats_over_relay": ratio(wl, "relay_nats", "relay"),
            "relay_sqs_over_relay": ratio(wl, "relay_sqs", "relay"),
            "relay_eventbridge_over_relay": ratio(wl, "relay_eventbridge", "relay"),
            "drain_over_decoder": ratio(wl, "drain", "decoder"),
        }
        if wl in ("W1B", "W1T"):
            # The shape against the same transactions on the default path, in the same run.
            x, y = relay.get("events_per_s"), table.get("W1", {}).get("relay", {}).get("events_per_s")
            r["relay_over_relay_w1"] = x / y if x and y else None
            r["recvlogical_over_recvlogical_w1"] = ratio_cross(table, wl, "W1", "recvlogical")
        if dbz.get("steady_events_per_s") and relay.get("events_per_s"):
            r["relay_over_debezium_steady"] = relay["events_per_s"] / dbz["steady_events_per_s"]
        if dbz.get("cpu_s_per_million_events") and relay.get("cpu_s_per_million_events"):
            r["relay_cpu_over_debezium_cpu"] = relay["cpu_s_per_million_events"] / dbz["cpu_s_per_million_events"]
        ratios[wl] = r

        def chk(name, val, op, bound):
            ok = None if val is None else (val >= bound if op == ">=" else val <= bound)
            targets.append({"workload": wl, "target": name, "value": val, "bound": f"{op} {bound}", "met": ok})

        if "recvlogical" in t or "decoder" in t:  # not on W1M: the AWS sinks' workload
            chk("events/s relay / pg_recvlogical", r["relay_over_recvlogical"], ">=", 1.5)
            chk("events/s relay / decoder alone", r["relay_over_decoder"], ">=", 0.5)
        if dbz:
            chk("events/s relay / Debezium (end to end)", r["relay_over_debezium"], ">=", 3)
            chk("events/s relay / Debezium (steady)", r.get("relay_over_debezium_steady"), ">=", 3)
            chk("CPU per event relay / Debezium", r.get("relay_cpu_over_debezium_cpu"), "<=", 1 / 3)
        chk("relay peak RSS MiB", relay.get("peak_rss_mib_max"), "<=", 50)

    latency = read_latency(a.latency, a.metrics)
    if latency:
        targets.append({"workload": "latency", "target": "p99 commit-to-consume ms (upper bound of commit-to-ack)",
                        "value": latency.get("p99_ms"), "bound": "<= 20",
                        "met": latency.get("p99_ms") is not None and latency["p99_ms"] <= 20})
    latency_eos = read_latency(a.latency_eos, a.metrics_eos)
    if latency_eos:
        latency_eos["method"] = ("commit timestamp (Kafka record time) to consumption by a read_committed "
                                 "librdkafka consumer: commit to visible")
        targets.append({"workload": "latency (exactly-once)", "target": "p99 commit-to-visible ms, read_committed",
                        "value": latency_eos.get("p99_ms"), "bound": "<= 50",
                        "met": latency_eos.get("p99_ms") is not None and latency_eos["p99_ms"] <= 50})

    micro = None
    if a.micro and os.path.exists(a.micro):
        try:
            mj = json.load(open(a.micro))
            micro = [{"name": b["name"], "ns_per_event": b["real_time"],
                      "allocs_per_event": b.get("allocs_per_event")} for b in mj["benchmarks"]]
        except (ValueError, KeyError):
            micro = None

    versions = {}
    if a.versions and os.path.exists(a.versions):
        for line in open(a.versions):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                versions[k] = v

    doc = {"run_id": a.run_id, "quick": a.quick, "cores": os.cpu_count(), "versions": versions,
           "workloads": {w: WORKLOAD.get(w, w) for w in table}, "results": table, "ratios": ratios,
           "latency": latency, "latency_exactly_once": latency_eos, "micro": micro, "targets": targets}

    text = render(doc)

    os.makedirs(a.out_dir, exist_ok=True)
    base = "quick" if a.quick else "latest"
    with open(os.path.join(a.out_dir, base + ".md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(a.out_dir, base + ".json"), "w") as fh:
        json.dump(doc, fh, indent=2)
    if not a.quick:
        with open(os.path.join(a.out_dir, a.run_id + ".json"), "w") as fh:
            json.dump(doc, fh, indent=2)
    sys.stdout.write(text)


# --- the performance page (docs/performance.md), from the committed runs ---------------------
# `report.py --docs docs/performance.md --results bench/results [--check]` fills the template
# bench/performance.md.in: every figure on the page comes from a committed bench/results/ID.json
# and names it. --check exits 1 when the committed page differs (ctest docs.performance).


def committed_runs(results_dir):
    runs = []
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(".json") and name[:8].isdigit():
            doc = json.load(open(os.path.join(results_dir, name)))
            doc["_file"] = name
            runs.append(doc)
    return runs


def is_full(doc):
    """W1, W2 and W3 with at least one repetition each and a latency run: a run to show whole."""
    return not doc.get("quick") and all(w in doc["results"] for w in ("W1", "W2", "W3")) \
        and bool(doc.get("latency"))


def runs_table(runs, link):
    def relay(doc, wl, c="relay"):
        return doc["results"].get(wl, {}).get(c, {}).get("events_per_s")

    def ratio(doc, key, wl="W1"):
        return doc["ratios"].get(wl, {}).get(key)

    def aws(doc):
        if "W1M" not in doc["results"]:
            return "-"
        return " / ".join(fnum(relay(doc, "W1M", c)) for c in ("relay", "relay_sqs", "relay_eventbridge"))

    rows = ["| run | reps | workloads | relay W1 ev/s | W2 ev/s | W3 ev/s | W1 relay / pg_recvlogical "
            "| W1 relay / walsender ceiling | W1 exactly-once / at-least-once | W1 SASL_SSL / plaintext "
            "| W1 messages / table | latency p50 / p99 ms | exactly-once latency p50 / p99 ms "
            "| W1M relay / SQS / EventBridge ev/s (moto) | Debezium |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for doc in runs:
        reps = max((e.get("repetitions", 1) for byc in doc["results"].values() for e in byc.values()), default=0)
        lat, eos = doc.get("latency") or {}, doc.get("latency_exactly_once") or {}
        pair = lambda l: f"{fnum(l.get('p50_ms'))} / {fnum(l.get('p99_ms'))}" if l.get("p99_ms") is not None else "-"
        dbz = any("debezium" in byc for byc in doc["results"].values())
        rows.append(
            f"| [{doc['run_id']}]({link}{doc['_file']}) | {reps} | {' '.join(sorted(doc['results']))} | "
            f"{fnum(relay(doc, 'W1'))} | {fnum(relay(doc, 'W2'))} | {fnum(relay(doc, 'W3'))} | "
            f"{fnum(ratio(doc, 'relay_over_recvlogical'), 2)} | {fnum(ratio(doc, 'relay_over_drain'), 2)} | "
            f"{fnum(ratio(doc, 'relay_eos_over_relay'), 2)} | {fnum(ratio(doc, 'relay_tls_over_relay'), 2)} | "
            f"{fnum(ratio(doc, 'relay_msg_over_relay'), 2)} | {pair(lat)} | {pair(eos)} | {aws(doc)} | "
            f"{'yes' if dbz else 'no'} |")
    return "\n".join(rows) + "\n"


def comparisons(results_dir, link):
    """Old against new binaries, alternating on one machine (bench/results/compare/NAME/): each
    folder's manifest.json names the commits and the rounds (one old and one new run id each, run
    in that order); the run files sit beside it. A table per workload: events/s of each round,
    the median of new/old, CPU and peak RSS of the plain relay."""
    base = os.path.join(results_dir, "compare")
    if not os.path.isdir(base):
        return "(none committed)\n"
    md = []
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        man = json.load(open(os.path.join(folder, "manifest.json")))
        runs = {}
        for pair in man["rounds"]:
            for run_id in pair:
                runs[run_id] = json.load(open(os.path.join(folder, run_id + ".json")))
        old_ids = [p[0] for p in man["rounds"]]
        new_ids = [p[1] for p in man["rounds"]]
        md.append(f"### {man['title']}\n")
        md.append(f"Old: `{man['old']['commit']}` ({man['old']['what']}); new: `{man['new']['commit']}` "
                  f"({man['new']['what']}). {len(man['rounds'])} rounds, each an old run then a new run: "
                  + ", ".join(f"[{o}]({link}compare/{name}/{o}.json) / [{n}]({link}compare/{name}/{n}.json)"
                              for o, n in man["rounds"]) + f". Command: `{man['command']}`.\n")
        workloads = sorted({wl for d in runs.values() for wl in d["results"]})
        for wl in workloads:
            md.append(f"\n**{wl}: {WORKLOAD.get(wl, wl)}**\n")
            md.append("| figure | old, by round | new, by round | median new / old |")
            md.append("|---|---:|---:|---:|")

            def series(ids, consumer, key):
                return [runs[i]["results"].get(wl, {}).get(consumer, {}).get(key) for i in ids]

            def row(label, consumer, key, nd=0):
                olds, news = series(old_ids, consumer, key), series(new_ids, consumer, key)
                if all(v is None for v in olds + news):
                    return
                ratios = [n / o for o, n in zip(olds, news) if o and n]
                fmt = lambda xs: ", ".join(fnum(x, nd) for x in xs)
                md.append(f"| {label} | {fmt(olds)} | {fmt(news)} | {fnum(med(ratios), 2)} |")

            for c in ("relay", "relay_tls", "relay_eos", "relay_nats"):
                row(f"{c} events/s", c, "events_per_s")
            row("relay CPU s / M events", "relay", "cpu_s_per_million_events", 1)
            row("relay peak RSS MiB", "relay", "peak_rss_mib", 1)
            rec = lambda ids: [runs[i]["ratios"].get(wl, {}).get("relay_over_recvlogical") for i in ids]
            o, n = rec(old_ids), rec(new_ids)
            md.append(f"| relay / pg_recvlogical | {', '.join(fnum(x, 2) for x in o)} | "
                      f"{', '.join(fnum(x, 2) for x in n)} | {fnum(med([b / a for a, b in zip(o, n) if a and b]), 2)} |")
        if man.get("notes"):
            md.append("\n" + man["notes"] + "\n")
        md.append("")
    return "\n".join(md) + "\n"


def docs_page(results_dir, template, link):
    runs = committed_runs(results_dir)
    full = [d for d in runs if is_full(d)]
    if not full:
        raise SystemExit(f"{results_dir}: no full run (W1, W2, W3 and latency) committed")
    last = full[-1]
    with_debezium = [d for d in full if any("debezium" in byc for byc in d["results"].values())]
    latest_md = json.load(open(os.path.join(results_dir, "latest.json")))["run_id"] \
        if os.path.exists(os.path.join(results_dir, "latest.json")) else "-"
    run = render(last).split("\n", 1)[1]  # without its "### Benchmark" heading
    # The AWS sinks on moto: the W1M part of the newest run that has it.
    with_aws = [d for d in runs if "W1M" in d["results"]]
    aws_run = "(none committed)\n"
    if with_aws:
        d = with_aws[-1]
        part = dict(d, results={"W1M": d["results"]["W1M"]}, ratios={"W1M": d["ratios"].get("W1M", {})},
                    targets=[], latency=None, latency_exactly_once=None, micro=None)
        aws_run = render(part).split("\n", 1)[1]
    ceiling = {wl: last["ratios"].get(wl, {}).get("drain_over_decoder") for wl in ("W1", "W2", "W3")}
    known = [v for v in ceiling.values() if v]
    values = {
        "@CEILING@": f"{fnum(min(known), 2)}-{fnum(max(known), 2)}" if known else "-",
        "@CEILING_BY_WORKLOAD@": ", ".join(f"{wl} {fnum(v, 2)}" for wl, v in ceiling.items()),
        "@RUNS_TABLE@": runs_table(runs, link),
        "@FULL_ID@": last["run_id"],
        "@FULL_FILE@": f"{link}{last['_file']}",
        "@FULL_RUN@": run,
        "@DEBEZIUM_RUN@": (render(with_debezium[-1]).split("\n", 1)[1] if with_debezium and with_debezium[-1] is not last
                           else "(the run above)\n"),
        "@DEBEZIUM_ID@": with_debezium[-1]["run_id"] if with_debezium else "-",
        "@DEBEZIUM_FILE@": f"{link}{with_debezium[-1]['_file']}" if with_debezium else "-",
        "@LATEST_MD@": latest_md,
        "@RUN_COUNT@": str(len(runs)),
        "@AWS_SOURCE@": (f"W1M of [{with_aws[-1]['run_id']}]({link}{with_aws[-1]['_file']}), the newest "
                         "committed run that has it" if with_aws else "No committed run has W1M yet"),
        "@AWS_RUN@": aws_run,
        "@COMPARISONS@": comparisons(results_dir, link),
    }
    text = open(template).read()
    for k, v in values.items():
        text = text.replace(k, v)
    return text


def docs_main(argv):
    ap = argparse.ArgumentParser(description="write (or --check) docs/performance.md from bench/results")
    ap.add_argument("--docs", required=True, help="the page, docs/performance.md")
    ap.add_argument("--results", required=True, help="bench/results")
    ap.add_argument("--template", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "performance.md.in"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the page differs")
    a = ap.parse_args(argv)
    link = os.path.relpath(os.path.abspath(a.results), os.path.dirname(os.path.abspath(a.docs))) + "/"
    text = docs_page(a.results, a.template, link)
    old = open(a.docs).read() if os.path.exists(a.docs) else None
    if a.check:
        if old != text:
            sys.stderr.write(f"{a.docs} differs from what bench/report.py generates from {a.results}; "
                             "run: cmake --build build --target docs\n")
            return 1
        return 0
    if old != text:
        with open(a.docs, "w") as fh:
            fh.write(text)
        print(f"wrote {a.docs}")
    return 0


if __name__ == "__main__":
    if "--docs" in sys.argv[1:]:
        sys.exit(docs_main(sys.argv[1:]))
    main()
