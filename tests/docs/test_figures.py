#!/usr/bin/env python3
"""The figures of docs/testing.md that come from the repository, written or checked:

- the tests registered per end-to-end tier, counted by `ctest -N` in a build directory (the
  selection scripts/test.sh runs in each tier and stream);
- the table of committed whole runs, read from the summaries in test-results/ (every file whose
  summary has a `whole run` line): green or red, the time of the run and of its longest phases.

    test_figures.py --write ROOT BUILD [CTEST]    rewrite the two blocks of docs/testing.md
    test_figures.py --check ROOT BUILD [CTEST]    exit 1 naming the block that differs

`cmake --build build --target docs` writes them; ctest docs.test-figures checks them, so that a
test added to a tier or a result file committed without the docs target fails the unit tier.
Standard library only.
"""
import os
import re
import subprocess
import sys

PAGE = os.path.join("docs", "testing.md")
BLOCKS = ("tier counts", "runs")

# tier or stream -> the ctest selection scripts/test.sh gives it
TIERS = [
    ("integration", ["-L", "^integration$"]),
    ("fault", ["-L", "^fault$"]),
    ("failover", ["-L", "^failover$"]),
    ("nats", ["-L", "^nats$"]),
    ("aws", ["-L", "^aws$"]),
    ("stream `pg15` (the five above)", ["-L", "^(integration|fault|failover|nats|aws)$"]),
    ("labelled `pg18` (nats tests run again on 18)", ["-L", "^pg18$"]),
    ("stream `pg18`", ["-L", "^(integration|fault|pg18)$", "-E", r"^(RelayIntegration[.]Tls|sinks[.].*)$"]),
]


def count(ctest, build, selection):
    out = subprocess.run([ctest, "--test-dir", build, "-N"] + selection, check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"^Total Tests: (\d+)", out, re.M)
    if not m:
        raise SystemExit(f"test_figures.py: no 'Total Tests' from ctest -N {' '.join(selection)}")
    return int(m.group(1))


def tier_counts(ctest, build):
    rows = ["| tier or stream | tests registered |", "|---|---:|"]
    for name, selection in TIERS:
        label = f"`{name}`" if re.fullmatch(r"[a-z0-9]+", name) else name
        rows.append(f"| {label} | {count(ctest, build, selection)} |")
    return "\n".join(rows) + "\n"


def fnum(seconds):
    return f"{round(seconds):,}"


def parse_run(path):
    text = open(path).read()
    phases = dict((k.strip(), float(v)) for k, v in re.findall(r"^  (\S.*?)[ \t]{2,}([\d.]+) s(?:[ \t].*)?$", text, re.M))
    if "whole run" not in phases:
        return None
    red = re.search(r"\(failed, status \d+\)", text) or "exit status 0" not in text
    return {"phases": phases, "green": not red,
            "note": text.split("\n", 1)[0].lstrip("# ").strip()}


def runs(root):
    results = os.path.join(root, "test-results")
    rows = ["| run | status | whole run | build | pg15 stream | pg18 stream | asan | bench | package |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    def order(name):  # by date, then a file and its numbered successors (-2, -3) in turn
        stem = name[:-4]
        m = re.match(r"^(.*?)(?:-(\d+))?$", stem)
        return (m.group(1), int(m.group(2) or 1))

    for name in sorted(os.listdir(results), key=order):
        if not name.endswith(".txt"):
            continue
        run = parse_run(os.path.join(results, name))
        if not run:
            continue
        p = run["phases"]

        def phase(prefix):
            keys = [k for k in p if k == prefix or k.startswith(prefix + ":")]
            return fnum(p[keys[0]]) + " s" if keys else "-"

        rows.append(f"| [{name[:-4]}](../test-results/{name}) | {'green' if run['green'] else 'red'} | "
                    f"{fnum(p['whole run'])} s | {phase('build')} | {phase('pg15')} | {phase('pg18')} | "
                    f"{phase('asan')} | {phase('bench')} | {phase('package')} |")
    return "\n".join(rows) + "\n"


def begin(key):
    return f"<!-- test_figures.py: {key} -->\n"


END = "<!-- end of test_figures.py -->\n"


def render(page, blocks):
    out = page
    for key, body in blocks.items():
        b = begin(key)
        if b not in out:
            raise SystemExit(f"{PAGE}: no block '{b.strip()}'")
        head, rest = out.split(b, 1)
        if END not in rest:
            raise SystemExit(f"{PAGE}: block '{key}' has no '{END.strip()}'")
        rest = rest.split(END, 1)[1]
        out = head + b + body + END + rest
    return out


def main(argv):
    if len(argv) < 4 or argv[1] not in ("--write", "--check"):
        print(__doc__, file=sys.stderr)
        return 2
    root, build = argv[2], argv[3]
    ctest = argv[4] if len(argv) > 4 else "ctest"
    path = os.path.join(root, PAGE)
    page = open(path).read()
    new = render(page, {"tier counts": tier_counts(ctest, build), "runs": runs(root)})
    if argv[1] == "--write":
        if new != page:
            open(path, "w").write(new)
            print(f"wrote {path}")
        return 0
    if new != page:
        print(f"{PAGE}: the test counts or the runs table differ from the build and test-results/: "
              "run `cmake --build build --target docs` and commit docs/testing.md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
