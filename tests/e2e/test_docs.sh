#!/usr/bin/env bash
# README.md and docs/*.md against the code, in seconds (tests/e2e/docs_check.py): docs/config.md's reference
# is exactly `loom config --reference`; every config key, link, repository path, loom subcommand and flag they
# show exists.
source "$(dirname "$0")/common.sh"
python3 "$SRC/tests/e2e/docs_check.py" --src "$SRC" --loom "$LOOM" --work "$WORK" ||
  fail "README.md or docs/ disagree with the code (above); docs/config.md: scripts/sync_docs.sh"
echo PASS
