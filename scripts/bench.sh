#!/usr/bin/env bash
# The benchmark lives in bench/ (bench/run.sh: the driver; bench/lib/consumers.sh: one function
# per consumer). This name stays for scripts/test.sh, the README and habits; see
# bench/run.sh --help.
exec "$(dirname "${BASH_SOURCE[0]}")/../bench/run.sh" "$@"
