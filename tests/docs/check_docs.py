#!/usr/bin/env python3
"""Checks the prose of README.md and docs/ against the repository (ctest docs.consistency):

- every bench run id quoted (20261201T145537Z) has its committed bench/results/ID.json (or one
  in a comparison's folder, bench/results/compare/NAME/ID.json);
- every relative link points at a file that exists (the pages other branches add are listed);
- every metric named (outbox_relay_...) is one /metrics serves: a row of the generated table in
  docs/metrics.md (histogram series _bucket, _sum and _count included);
- the exit code table of docs/failures.md has a row for each code of relay::ExitCode, and no
  other.
Standard library only.
"""
import os
import re
import sys

# Pages written on other branches, linked already.
PENDING = {"docs/security.md", "docs/failover.md", "docs/testing.md"}
# Names that look like metrics and are not: the backlog count's temporary slot, a CMake target.
NOT_METRICS = {"outbox_relay_scan", "outbox_relay_core"}


def pages(root):
    yield os.path.join(root, "README.md")
    for d, _, files in os.walk(os.path.join(root, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def main(root):
    problems = []
    results = os.path.join(root, "bench", "results")
    metrics_page = open(os.path.join(root, "docs", "metrics.md")).read()
    block = metrics_page.split("<!-- BEGIN GENERATED: metrics -->", 1)[-1].split("<!-- END GENERATED -->", 1)[0]
    families = set(re.findall(r"^\| `(outbox_relay_[a-z_]+)` \| (\w+)", block, re.M))
    served = set()
    for name, kind in families:
        served.add(name)
        if kind == "histogram":
            served.update(name + s for s in ("_bucket", "_sum", "_count"))
    if not served:
        problems.append("docs/metrics.md: no generated metrics table")
    committed = {f[:-5] for _, _, fs in os.walk(results) for f in fs if f.endswith(".json")}
    for page in pages(root):
        rel = os.path.relpath(page, root)
        text = open(page).read()
        for run in sorted(set(re.findall(r"\b(\d{8}T\d{6}Z)\b", text))):
            if run not in committed:
                problems.append(f"{rel}: run {run} is quoted but no bench/results/**/{run}.json is committed")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#", 1)[0]))
            if os.path.relpath(path, root) in PENDING:
                continue
            if not os.path.exists(path):
                problems.append(f"{rel}: link to {target}: no such file")
        for name in sorted(set(re.findall(r"\boutbox_relay_[a-z_]*[a-z]", text))):
            if name not in served and name not in NOT_METRICS:
                problems.append(f"{rel}: {name} is no metric /metrics serves (docs/metrics.md)")
    header = open(os.path.join(root, "src", "relay", "include", "outbox", "relay", "relay.hpp")).read()
    enum = header[header.index("enum ExitCode"):]
    codes = set(re.findall(r"kExit\w+ = (\d+)", enum[:enum.index("};")]))
    failures = open(os.path.join(root, "docs", "failures.md")).read()
    documented = set(re.findall(r"^\| (\d+) \|", failures, re.M))
    if codes != documented:
        problems.append(f"docs/failures.md: exit codes {sorted(documented)}, relay::ExitCode has {sorted(codes)}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
