#!/usr/bin/env bash
# Installs and builds (scripts/setup.sh), then runs every test: Catch2 unit tests and end-to-end runs.
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R e2e
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"
