#!/usr/bin/env python3
"""Checks of the deployment files that can run without a cluster, Docker or Grafana.

  check_deploy.py static --relay BIN
      deploy/, docker/compose.yaml and packaging/: every YAML and JSON file parses; the
      Kubernetes objects agree with each other (selectors, ports, probe paths, Secret keys, grace
      period); every command line they give the relay (Deployment args, compose commands, the
      systemd unit with its environment file) is accepted by the real binary's flag parser
      (`outbox-relay ARGS --help` validates every flag and value, then exits 0); every PromQL
      query of the dashboard parses (promtool); the dashboard JSON is generate.py's output; the
      table of alerts in docs/metrics.md names exactly the rules.
  check_deploy.py live --relay BIN --port PORT
      against a relay that streams and serves /metrics on 127.0.0.1:PORT: every metric, label
      and fixed label value that the alert rules and the dashboard query is in its /metrics,
      and the probe and scrape paths of the manifests and the compose file answer (not 404).
  check_deploy.py unit --relay BIN --unit FILE --env FILE
      the ExecStart of a systemd unit, expanded with its environment file as systemd does (and
      %d with a credentials directory holding copies of its LoadCredential= files), is
      accepted by the binary's parser; the unit has LimitCORE=0 and loads its secrets as
      systemd credentials (pgpass, kafka.properties), and the environment file holds no
      PGPASSWORD.
  check_deploy.py dockerfile --deb FILE
      the runtime stage of docker/Dockerfile installs every package the Debian package depends
      on (its Depends come from the binary's libraries, by dpkg-shlibdeps): listed, provided by
      a listed package, or pulled in by one (dependencies read from this machine's dpkg
      database, where the build installed them), or part of debian:bookworm-slim.

Exit status 0 when everything holds; otherwise 1 with one line per problem on stderr.
"""
import argparse
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/outbox-relay.rules.yml"
DASHBOARD = REPO / "deploy/grafana/outbox-relay.json"
K8S = sorted((REPO / "deploy/kubernetes").glob("*.yaml"))
COMPOSE = REPO / "docker/compose.yaml"
UNIT = REPO / "packaging/outbox-relay.service"
ENV_FILE = REPO / "packaging/outbox-relay.default"

problems = []


def problem(text):
    problems.append(text)


# ---- the relay's own parser -------------------------------------------------------------------
def parser_accepts(relay, args, where):
    """Runs `relay ARGS --help`: the parser checks every flag and value, then prints help."""
    r = subprocess.run([relay, *args, "--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        problem(f"{where}: outbox-relay rejects {shlex.join(args)}: exit {r.returncode}: "
                f"{r.stderr.strip()}")
        return False
    return True


def flag_value(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def metrics_port(args, where):
    addr = flag_value(args, "--metrics-addr") or "127.0.0.1:9187"
    host, _, port = addr.rpartition(":")
    if host not in ("0.0.0.0", "[::]", "::"):
        problem(f"{where}: --metrics-addr {addr} is not reachable from outside the container")
    return int(port)


# ---- PromQL -----------------------------------------------------------------------------------
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
            "bool", "offset", "inf", "nan"}
LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Labels Prometheus (or the Operator) attaches to every scraped series.
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "endpoint", "service"}
# Series Prometheus makes itself.
SYNTHETIC = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds",
             "scrape_samples_scraped"}

TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|\[[^\]]*\]|\$\{?\w+\}?|'
                   r'(?:0x[0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?)|'
                   r'[A-Za-z_:][A-Za-z0-9_:]*|\{|\}|\(|\)|[^\s]')
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:\\.|[^"\\])*)"')


def promql_uses(expr):
    """Selectors of a PromQL expression: [(metric, [(label, op, value)])], and the label names
    of by/without/on/ignoring/group_* lists."""
    selectors, grouping = [], set()
    toks = TOKEN.findall(expr)
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t in LIST_KEYWORDS and nxt == "(":
            j = i + 2
            while j < len(toks) and toks[j] != ")":
                if re.fullmatch(r"[A-Za-z_]\w*", toks[j]):
                    grouping.add(toks[j])
                j += 1
            i = j + 1
            continue
        if t == "{":  # a selector without a name in front ({__name__=...}): not used here
            problem(f"query selects without a metric name: {expr}")
        if re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", t) and t not in KEYWORDS:
            if nxt == "(" or t in AGGREGATIONS:
                i += 1
                continue
            matchers = []
            if nxt == "{":
                j = i + 2
                body = []
                while j < len(toks) and toks[j] != "}":
                    body.append(toks[j])
                    j += 1
                matchers = MATCHER.findall("".join(body))
                i = j
            selectors.append((t, matchers))
        i += 1
    return selectors, grouping


def rule_exprs():
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule.get('alert') or rule.get('record')}", rule["expr"]


def dashboard_exprs(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield f"panel '{p['title']}' {t['refId']}", t["expr"]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"]["query"])
            if not m:
                problem(f"variable {v['name']}: not label_values(selector, label)")
                continue
            # The label itself must be on the series too.
            yield f"variable {v['name']}", m.group(1) + f" and on ({m.group(2)}) vector(1)"


def grafana_to_promql(expr):
    """The dashboard's variables replaced by values, so that promtool can parse the query."""
    return (expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
            .replace("$__range", "1h"))


# ---- static -----------------------------------------------------------------------------------
def check_dashboard(relay):
    committed = DASHBOARD.read_text()
    dash = json.loads(committed)
    gen = subprocess.run([sys.executable, str(REPO / "deploy/grafana/generate.py"), "--stdout"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        problem(f"deploy/grafana/generate.py failed: {gen.stderr.strip()}")
    elif gen.stdout != committed:
        problem("deploy/grafana/outbox-relay.json differs from generate.py's output: edit "
                "generate.py and run it")
    ids = [p["id"] for p in dash["panels"]]
    if len(ids) != len(set(ids)):
        problem("dashboard: panel ids are not unique")
    variables = {v["name"] for v in dash["templating"]["list"]}
    rules = []
    for where, expr in dashboard_exprs(dash):
        for var in re.findall(r"\$\{?(\w+)\}?", expr):
            if not var.startswith("__") and var not in variables:
                problem(f"dashboard {where}: ${var} is not a dashboard variable")
        rules.append({"record": "dashboard:query:" + str(len(rules)),
                      "expr": grafana_to_promql(expr)})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            problem(f"dashboard queries do not parse (promtool): {r.stdout} {r.stderr}")
    finally:
        os.unlink(f.name)
    for p in dash["panels"]:
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problem(f"dashboard panel '{p['title']}': target without the datasource variable")


def k8s_objects():
    objs = {}
    for path in K8S:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                objs[(doc["kind"], doc["metadata"]["name"])] = (path.name, doc)
    return objs


def check_kubernetes(relay):
    objs = k8s_objects()
    need = [("Deployment", "outbox-relay"), ("Secret", "outbox-relay"),
            ("PodMonitor", "outbox-relay")]
    for key in need:
        if key not in objs:
            problem(f"deploy/kubernetes: no {key[0]} {key[1]}")
    if any(key not in objs for key in need):
        return
    _, dep = objs[("Deployment", "outbox-relay")]
    _, secret = objs[("Secret", "outbox-relay")]
    _, pm = objs[("PodMonitor", "outbox-relay")]
    spec = dep["spec"]
    where = "deployment.yaml"
    if spec.get("replicas") != 2:
        problem(f"{where}: replicas {spec.get('replicas')}, expected 2 (active and standby)")
    if spec.get("strategy", {}).get("type") != "Recreate":
        problem(f"{where}: strategy must be Recreate (a standby is never Ready, so a rolling "
                "update would wait forever)")
    pod_labels = spec["template"]["metadata"]["labels"]
    for sel_where, sel in ((where + " selector", spec["selector"]["matchLabels"]),
                           ("podmonitor.yaml selector", pm["spec"]["selector"]["matchLabels"])):
        if any(pod_labels.get(k) != v for k, v in sel.items()):
            problem(f"{sel_where} {sel} does not match the pod labels {pod_labels}")
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            if ref["name"] != secret["metadata"]["name"] or ref["key"] not in secret_keys:
                problem(f"{where}: env {e['name']} refers to {ref['name']}/{ref['key']}, "
                        f"not a key of Secret {secret['metadata']['name']} {sorted(secret_keys)}")
            env[e["name"]] = "(secret)"

    def expand(arg):
        def sub(m):
            if m.group(1) not in env:
                problem(f"{where}: $({m.group(1)}) in args is not in env")
            return env.get(m.group(1), "")
        return re.sub(r"\$\((\w+)\)", sub, arg)

    args = [expand(a) for a in c["args"]]
    if any(env.get(m) == "(secret)" for a in c["args"] for m in re.findall(r"\$\((\w+)\)", a)):
        problem(f"{where}: a secret is passed as an argument (visible to ps); pass it as env")
    # docs/security.md: no service-account token, the PostgreSQL server verified, only
    # Prometheus at the HTTP port.
    if pod.get("automountServiceAccountToken") is not False:
        problem(f"{where}: automountServiceAccountToken is not false (the relay needs no token)")
    if "sslmode=verify-full" not in env.get("RELAY_PG", ""):
        problem(f"{where}: RELAY_PG does not verify the server (sslmode=verify-full)")
    policies = [d for (kind, _), (_, d) in objs.items() if kind == "NetworkPolicy"]
    if not any(all(pod_labels.get(k) == v for k, v in
                   d["spec"]["podSelector"].get("matchLabels", {}).items()) for d in policies):
        problem(f"deploy/kubernetes: no NetworkPolicy selects the relay's pods")
    # The mounted Secret and ConfigMap files, as the kubelet would write them, under a
    # temporary directory standing for each mount path.
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    with tempfile.TemporaryDirectory() as root:
        for mount in c.get("volumeMounts", []):
            vol = volumes.get(mount["name"])
            if vol is None:
                problem(f"{where}: volumeMount {mount['name']} has no volume")
                continue
            if "secret" in vol:
                source = objs.get(("Secret", vol["secret"]["secretName"]), (None, {}))[1]
                files = source.get("stringData", {})
                items = vol["secret"].get("items")
            else:
                source = objs.get(("ConfigMap", vol["configMap"]["name"]), (None, {}))[1]
                files = source.get("data", {})
                items = vol["configMap"].get("items")
            local = pathlib.Path(root) / mount["name"]
            local.mkdir()
            for item in items or [{"key": k, "path": k} for k in files]:
                if item["key"] not in files:
                    problem(f"{where}: volume {mount['name']} item {item['key']} is not a key of "
                            f"its {('Secret' if 'secret' in vol else 'ConfigMap')}")
                    continue
                (local / item["path"]).write_text(files[item["key"]])
                (local / item["path"]).chmod(0o440)
            args = [a.replace(mount["mountPath"], str(local)) for a in args]
        parser_accepts(relay, args, where + " args")
    port = metrics_port(args, where)
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    if ports.get("metrics") != port:
        problem(f"{where}: containerPort 'metrics' {ports.get('metrics')} is not the "
                f"--metrics-addr port {port}")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        got = c.get(probe, {}).get("httpGet", {})
        if got.get("path") != path or got.get("port") not in ("metrics", port):
            problem(f"{where}: {probe} is {got}, expected GET {path} on port metrics")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    shutdown = flag_value(args, "--shutdown-timeout") or "30s"
    m = re.fullmatch(r"(\d+)s", shutdown)
    if not m or grace <= int(m.group(1)):
        problem(f"{where}: terminationGracePeriodSeconds {grace} must exceed "
                f"--shutdown-timeout {shutdown}")
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    if ep.get("port") != "metrics" or ep.get("path", "/metrics") != "/metrics":
        problem(f"podmonitor.yaml: endpoint {ep}, expected port metrics, path /metrics")


def compose_services():
    doc = yaml.safe_load(COMPOSE.read_text())
    for name, svc in doc["services"].items():
        if svc.get("image", "").startswith("outbox-relay") or "build" in svc:
            # Compose turns $$ into a literal $.
            yield name, svc, [str(a).replace("$$", "$") for a in svc["command"]]


def check_compose(relay):
    relay_services = list(compose_services())
    if not relay_services:
        problem("docker/compose.yaml: no outbox-relay service")
    for name, svc, args in relay_services:
        parser_accepts(relay, args, f"compose.yaml service {name}")
        if args and args[0] == "run":
            port = metrics_port(args, f"compose.yaml service {name}")
            test = " ".join(svc.get("healthcheck", {}).get("test", []))
            if f"/dev/tcp/127.0.0.1/{port}" not in test or "/readyz" not in test:
                problem(f"compose.yaml service {name}: healthcheck does not GET /readyz on "
                        f"port {port}: {test}")


def systemd_argv(unit_text, env):
    """ExecStart with its variables expanded as systemd does: ${X} is one argument, $X is
    split at whitespace into zero or more."""
    (line,) = [l for l in unit_text.splitlines() if l.startswith("ExecStart=")]
    argv = []
    for word in shlex.split(line.split("=", 1)[1]):
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            argv.extend(env.get(m.group(1), "").split())
            continue
        argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


def read_env_file(path):
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", k):
            problem(f"{path}: not VAR=value: {line}")
            continue
        env[k] = v
    return env


def unit_settings(unit_text, key):
    return [l.split("=", 1)[1] for l in unit_text.splitlines() if l.startswith(key + "=")]


def check_unit(relay, unit, env_file):
    env = read_env_file(env_file)
    text = unit.read_text()
    # The secrets are systemd credentials (the dynamic user owns no file), and no core dump
    # holds them.
    if "LimitCORE=0" not in text.splitlines():
        problem(f"{unit.name}: no LimitCORE=0 (a core dump would hold the passwords)")
    creds = dict(c.split(":", 1) for c in unit_settings(text, "LoadCredential"))
    for needed in ("pgpass", "kafka.properties", "nats.creds"):
        if needed not in creds:
            problem(f"{unit.name}: no LoadCredential={needed}:...")
    if "PGPASSFILE=%d/pgpass" not in unit_settings(text, "Environment"):
        problem(f"{unit.name}: libpq is not pointed at the pgpass credential (PGPASSFILE=%d/pgpass)")
    if "PGPASSWORD" in env:
        problem(f"{env_file.name}: PGPASSWORD set (use /etc/outbox-relay/pgpass)")
    # The credentials directory as systemd makes it: read-only copies of the files, or of the
    # package's own when checking the repository.
    with tempfile.TemporaryDirectory() as credentials:
        for name, source in creds.items():
            path = pathlib.Path(source)
            if not path.is_file():
                path = REPO / "packaging" / path.name
            target = pathlib.Path(credentials) / name
            target.write_bytes(path.read_bytes())
            target.chmod(0o400)
        # Every broker the environment file offers: RELAY_SINK, and each commented alternative.
        sinks = [env.get("RELAY_SINK", "")] + [
            l.split("=", 1)[1] for l in env_file.read_text().splitlines()
            if l.startswith("#RELAY_SINK=")]
        for sink in sinks:
            argv = [a.replace("%d", credentials)
                    .replace("/run/credentials/" + unit.name, credentials)
                    for a in systemd_argv(text, dict(env, RELAY_SINK=sink))]
            if "PGPASSWORD" in " ".join(argv) or "password" in " ".join(argv).lower():
                problem(f"{unit}: a password on the command line")
            # argv[0] is the installed path; the binary under test checks the arguments.
            parser_accepts(relay, argv[1:], f"{unit.name} ExecStart with {env_file.name}: {sink}")
            if flag_value(argv, "--pg") in (None, "") or all(
                    flag_value(argv, f) in (None, "")
                    for f in ("--brokers", "--nats", "--sqs", "--eventbridge")):
                problem(f"{unit.name}: --pg, or every sink flag, empty with {sink}")
        for flag, name in (("--nats", "NATS JetStream"), ("--sqs", "Amazon SQS"),
                           ("--eventbridge", "Amazon EventBridge")):
            if not any(flag in s for s in sinks[1:]):
                problem(f"{env_file.name}: no {name} alternative (#RELAY_SINK={flag} ...)")


def check_readme_alerts():
    """docs/metrics.md's table of alerts names exactly the rules of the rules file."""
    rules = {where.split(" ", 1)[1] for where, _ in rule_exprs()}
    readme = (REPO / "docs/metrics.md").read_text()
    table = readme[readme.index("## Alerts and dashboard"):]
    table = table[:table.index("\n\n", table.index("| condition"))]
    named = set(re.findall(r"`(Outbox\w+)`", table))
    for name in sorted(rules - named):
        problem(f"docs/metrics.md, Alerts and dashboard: alert {name} is not in the table")
    for name in sorted(named - rules):
        problem(f"docs/metrics.md, Alerts and dashboard: {name} is not a rule of {RULES.name}")


def check_static(relay):
    for path in [RULES, *K8S, COMPOSE, REPO / "deploy/prometheus/outbox-relay.rules.test.yml"]:
        try:
            list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as e:
            problem(f"{path.relative_to(REPO)}: not YAML: {e}")
    check_dashboard(relay)
    check_kubernetes(relay)
    check_compose(relay)
    check_unit(relay, UNIT, ENV_FILE)
    check_readme_alerts()


# ---- live -------------------------------------------------------------------------------------
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+\S+")
LABEL = re.compile(r'([A-Za-z_]\w*)="((?:\\.|[^"\\])*)"')


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def check_live(relay, port):
    status, text = http_get(port, "/metrics")
    if status != 200:
        problem(f"/metrics answered {status}")
        return
    series = {}  # metric -> {label: set(values)}
    declared = set()  # families and the series names they define, samples or not
    for line in text.splitlines():
        t = re.match(r"# TYPE (\S+) (\S+)", line)
        if t:
            declared.add(t.group(1))
            if t.group(2) == "histogram":
                declared.update(t.group(1) + s for s in ("_bucket", "_sum", "_count"))
        m = SAMPLE.match(line)
        if m:
            labels = series.setdefault(m.group(1), {})
            for k, v in LABEL.findall(m.group(3) or ""):
                labels.setdefault(k, set()).add(v)
    unverified = []
    all_labels = set().union(*(set(l) for l in series.values())) | TARGET_LABELS
    dash = json.loads(DASHBOARD.read_text())
    queries = list(rule_exprs()) + list(dashboard_exprs(dash))
    used = set()
    for where, expr in queries:
        selectors, grouping = promql_uses(expr)
        for metric, matchers in selectors:
            used.add(metric)
            if metric in SYNTHETIC:
                continue
            if metric not in series:
                if metric not in declared:
                    problem(f"{where}: metric {metric} is not in the relay's /metrics")
                elif matchers or grouping:
                    # Declared (# TYPE) but no sample yet, e.g. no delivery error happened.
                    labels = ({l for l, _, _ in matchers} | grouping) - TARGET_LABELS
                    unverified.append(f"{metric} (labels {sorted(labels)})")
                continue
            for label, op, value in matchers:
                if label in TARGET_LABELS:
                    continue
                if label not in series[metric]:
                    problem(f"{where}: {metric} has no label {label} in /metrics "
                            f"(it has {sorted(series[metric])})")
                elif op == "=" and "$" not in value and value not in series[metric][label]:
                    problem(f"{where}: {metric}{{{label}=\"{value}\"}}: no such value in "
                            f"/metrics ({sorted(series[metric][label])})")
        for label in grouping - all_labels:
            problem(f"{where}: groups or matches on label {label}, which no metric has")
    print(f"{len(queries)} queries use {len(used)} metrics")
    for u in sorted(set(unverified)):
        print(f"note: no sample of {u} in this scrape, so its labels were not checked")
    # The paths the manifests and the compose file probe and scrape.
    paths = {"/metrics", "/readyz", "/healthz"}
    objs = k8s_objects()
    (c,) = objs[("Deployment", "outbox-relay")][1]["spec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        paths.add(c[probe]["httpGet"]["path"])
    for ep in objs[("PodMonitor", "outbox-relay")][1]["spec"]["podMetricsEndpoints"]:
        paths.add(ep.get("path", "/metrics"))
    for name, svc, _ in compose_services():
        paths.update(re.findall(r"GET (/\w+)", " ".join(svc.get("healthcheck", {})
                                                            .get("test", []))))
    for path in sorted(paths):
        status, body = http_get(port, path)
        if status != 200:
            problem(f"GET {path} answered {status} from a streaming relay: {body.strip()}")


# ---- Dockerfile -------------------------------------------------------------------------------
# Required packages of debian:bookworm-slim that the binary links.
SLIM_BASE = {"libc6", "libgcc-s1", "libstdc++6"}


def dpkg_field(package, field):
    r = subprocess.run(["dpkg-query", "-W", "-f", "${" + field + "}", package],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def names(relations):
    """Package names of a Depends/Provides field (every alternative, no versions)."""
    out = set()
    for rel in (relations or "").split(","):
        for alt in rel.split("|"):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                out.add(name)
    return out


def runtime_packages(dockerfile):
    """The packages `apt-get install` installs in the Dockerfile's last stage."""
    text = dockerfile.read_text().replace("\\\n", " ")
    last_stage = text[text.rindex("\nFROM "):]
    pkgs = set()
    for m in re.finditer(r"apt-get install ([^&]*)", last_stage):
        pkgs.update(w for w in m.group(1).split() if not w.startswith("-") and "=" not in w)
    return pkgs


def check_dockerfile(deb):
    listed = runtime_packages(REPO / "docker/Dockerfile")
    if not listed:
        problem("docker/Dockerfile: no apt-get install in the runtime stage")
        return
    # Everything the listed packages bring, by their Depends and Pre-Depends, and what that
    # provides.
    closure, todo = set(), list(listed)
    while todo:
        p = todo.pop()
        if p in closure:
            continue
        closure.add(p)
        depends = dpkg_field(p, "Depends")
        if depends is None:
            continue  # not installed here: its own dependencies stay unknown
        closure |= names(dpkg_field(p, "Provides"))
        todo.extend(names(depends) | names(dpkg_field(p, "Pre-Depends")))
    r = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True,
                       check=True)
    for rel in r.stdout.split(","):
        alternatives = names(rel)
        if not alternatives & (closure | SLIM_BASE):
            problem(f"docker/Dockerfile: the runtime stage installs nothing that satisfies "
                    f"'{rel.strip()}', which the binary needs (packages: {sorted(listed)})")
    if not problems:
        print(f"Dockerfile runtime stage {sorted(listed)} satisfies: {r.stdout.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("static")
    s.add_argument("--relay", required=True)
    l = sub.add_parser("live")
    l.add_argument("--relay", required=True)
    l.add_argument("--port", type=int, required=True)
    u = sub.add_parser("unit")
    u.add_argument("--relay", required=True)
    u.add_argument("--unit", required=True, type=pathlib.Path)
    u.add_argument("--env", required=True, type=pathlib.Path)
    d = sub.add_parser("dockerfile")
    d.add_argument("--deb", required=True, type=pathlib.Path)
    a = ap.parse_args()
    if a.cmd == "static":
        check_static(a.relay)
    elif a.cmd == "live":
        check_live(a.relay, a.port)
    elif a.cmd == "dockerfile":
        check_dockerfile(a.deb)
    else:
        check_unit(a.relay, a.unit, a.env)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_deploy.py {a.cmd}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
