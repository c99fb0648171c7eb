#!/usr/bin/env bash
# Fails when a file tracked by git (as staged in the index) is larger than the limit and not
# named in the allow-list. Downloaded packages, archives and build output do not belong in the
# repository: they bloat every clone and every docker build context (issue 21).
# Usage: large_files_test.sh SOURCE_DIR ALLOW_LIST [LIMIT_BYTES]
# The allow-list holds one repository-relative path a line; blank lines and lines starting with
# '#' are ignored. Exit 77 (skipped) when SOURCE_DIR is not a git checkout.
set -euo pipefail
src=$1
allow=$2
limit=${3:-1048576}

if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "$src is not a git checkout; nothing to check"
  exit 77
fi

declare -A allowed=()
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in '' | '#'*) continue ;; esac
  allowed["$line"]=1
done <"$allow"

bad=0
# ls-files -s: "<mode> <object> <stage>\t<path>"; cat-file prints each blob's size and its path.
while IFS=' ' read -r size path; do
  if [ "$size" -gt "$limit" ] && [ -z "${allowed[$path]:-}" ]; then
    echo "tracked file over $limit bytes: $path ($size bytes); remove it, or add it to $allow with a reason" >&2
    bad=1
  fi
done < <(git -C "$src" ls-files -s | awk -F '\t' '{ split($1, f, " "); print f[2] " " $2 }' |
  git -C "$src" cat-file --batch-check='%(objectsize) %(rest)')

[ "$bad" -eq 0 ] && echo "no tracked file over $limit bytes outside $allow"
exit "$bad"
