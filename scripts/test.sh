#!/usr/bin/env bash
# Installs and builds everything (scripts/setup.sh --tests), then runs every test (Catch2 unit tests and
# end-to-end runs) and prints the ten slowest.
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R e2e
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
build=${BUILD_DIR:-build}
report=$(cd "$build" && pwd)/Testing/junit.xml
rm -f "$report"
status=0
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --output-junit "$report" "$@" || status=$?
[ -s "$report" ] && python3 scripts/slowest_tests.py "$report" 10
exit $status
