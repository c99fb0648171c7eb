#!/usr/bin/env python3
"""Checks the prose of README.md, CHANGELOG.md and every page under docs/ (recursively) against
the repository (ctest docs.consistency):

- every bench run id quoted (20261201T145537Z) has its committed bench/results/ID.json (or one
  in a comparison's folder, bench/results/compare/NAME/ID.json);
- every relative link points at a file that exists, and every anchor of a link to a page
  (`page.md#anchor`, or `#anchor` within the page) names a heading of that page by GitHub's slug
  rules (lowercased; every character but letters, digits, spaces, hyphens and underscores
  removed; spaces made hyphens; a repeated heading gets -1, -2, ...), or an explicit
  `<a id="...">` / `<a name="...">` of the page; links and headings inside code are ignored;
- every metric named (outbox_relay_...) is one /metrics serves: a row of the generated table in
  docs/metrics.md (histogram series _bucket, _sum and _count included);
- the exit code table of docs/failures.md has a row for each code of relay::ExitCode, and no
  other;
- the environment-variable rule is stated once, in docs/commands/README.md ("Environment
  variables"), and names every flag that a generated flag table marks "argv only"; the relay's
  exit codes are listed once, in failures.md's table (no other page has a table of them);
- the version: CHANGELOG.md's newest release (the first `## [X.Y.Z] - DATE` heading after
  `## [Unreleased]`) is CMakeLists.txt's project VERSION (what --version and the .deb carry), and
  the version the docs and manifests write out (the .deb's name in docs/operating.md, the image
  tag in deploy/kubernetes/deployment.yaml) is that one too.
Standard library only.
"""
import os
import re
import sys
from urllib.parse import unquote

# Names that look like metrics and are not: the backlog count's temporary slot, a CMake target.
NOT_METRICS = {"outbox_relay_scan", "outbox_relay_core", "outbox_relay_progress"}  # the last: a table (docs/aws.md)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
EXPLICIT = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)


def pages(root):
    yield os.path.join(root, "README.md")
    yield os.path.join(root, "CHANGELOG.md")
    for d, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def prose_lines(text):
    """The lines outside fenced code blocks, with inline code spans blanked."""
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield line


def without_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's source text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a page has: its headings' slugs (repeats numbered) and explicit ids."""
    found, seen = set(), {}
    for line in prose_lines(text):
        found.update(EXPLICIT.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2) or "")
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text):
    prose = "\n".join(without_code_spans(l) for l in prose_lines(text))
    return LINK.findall(prose) + REFERENCE.findall(prose)


def check_one_place(root):
    """The environment-variable rule and the exit-code table, each written in one place."""
    problems = []
    commands = os.path.join(root, "docs", "commands")
    index = open(os.path.join(commands, "README.md")).read()
    rule = index.split("## Environment variables", 1)[-1].split("\n## ", 1)[0]
    rule_flags = set(re.findall(r"`(?:[a-z]+ )?(-X|--[a-z0-9-]+)`", rule))
    for name in sorted(os.listdir(commands)):
        if not name.endswith(".md") or name == "README.md":
            continue
        for flag in re.findall(r"^\| `(-X|--[a-z0-9-]+)[^`]*` \|[^|\n]*\| argv only \|", open(os.path.join(commands, name)).read(), re.M):
            if flag not in rule_flags:
                problems.append(f"docs/commands/{name}: {flag} is argv only, docs/commands/README.md's rule does not name it")
    for page in pages(root):
        rel = os.path.relpath(page, root)
        prose = "\n".join(prose_lines(open(page).read()))
        if rel != os.path.join("docs", "commands", "README.md") and re.search(
                r"can also\s+be set as the environment variable", prose):
            problems.append(f"{rel}: states the environment-variable rule: link docs/commands/README.md#environment-variables instead")
        if rel != os.path.join("docs", "failures.md") and re.search(r"^\|\s*exit(?: code)?\s*\|", prose, re.M | re.I) \
                and len(re.findall(r"^\| [0-5] \|", prose, re.M)) >= 3:
            problems.append(f"{rel}: a table of exit codes: link failures.md#exit-codes instead")
    return problems


def check_version(root):
    problems = []
    cmake = open(os.path.join(root, "CMakeLists.txt")).read()
    m = re.search(r"^project\(\s*\w+\s+VERSION\s+(\d+\.\d+\.\d+)", cmake, re.M)
    if not m:
        return ["CMakeLists.txt: no project(... VERSION X.Y.Z)"]
    version = m.group(1)
    changelog = open(os.path.join(root, "CHANGELOG.md")).read()
    headings = [h for h in re.findall(r"^## (.*)$", changelog, re.M)]
    if not headings or headings[0].strip() != "[Unreleased]":
        problems.append("CHANGELOG.md: the first section is not ## [Unreleased]")
    releases = [re.match(r"\[(\d+\.\d+\.\d+)\](?: - (\d{4}-\d{2}-\d{2}))?$", h.strip()) for h in headings[1:]]
    if not releases or not all(releases):
        bad = [h for h, r in zip(headings[1:], releases) if not r]
        problems.append(f"CHANGELOG.md: release headings not of the form ## [X.Y.Z] - YYYY-MM-DD: {bad}")
    elif releases[0].group(1) != version:
        problems.append(f"CHANGELOG.md: newest release {releases[0].group(1)}, CMakeLists.txt's project VERSION {version}")
    elif not releases[0].group(2):
        problems.append(f"CHANGELOG.md: release {version} has no date")
    for rel, pattern in (("docs/operating.md", r"outbox-relay_(\d+\.\d+\.\d+)_amd64\.deb"),
                         ("deploy/kubernetes/deployment.yaml", r"image: outbox-relay:(\d+\.\d+\.\d+)")):
        found = set(re.findall(pattern, open(os.path.join(root, rel)).read()))
        if found != {version}:
            problems.append(f"{rel}: version {sorted(found)}, CMakeLists.txt's project VERSION {version}")
    return problems


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
    page_anchors = {}

    def anchors_of(path):
        if path not in page_anchors:
            page_anchors[path] = anchors(open(path).read())
        return page_anchors[path]

    for page in pages(root):
        rel = os.path.relpath(page, root)
        text = open(page).read()
        for run in sorted(set(re.findall(r"\b(\d{8}T\d{6}Z)\b", text))):
            if run not in committed:
                problems.append(f"{rel}: run {run} is quoted but no bench/results/**/{run}.json is committed")
        for target in links(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue
            file_part, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
            if not os.path.exists(path):
                problems.append(f"{rel}: link to {target}: no such file")
                continue
            if not anchor or not path.endswith(".md"):
                continue
            if unquote(anchor) not in anchors_of(path):
                where = "this page" if not file_part else os.path.relpath(path, root)
                problems.append(f"{rel}: link to {target}: no heading or anchor #{anchor} in {where}")
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
    problems += check_one_place(root)
    problems += check_version(root)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
