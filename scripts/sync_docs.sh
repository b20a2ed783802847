#!/usr/bin/env bash
# Rewrites docs/config.md's config reference from `loom config --reference` (tests/e2e/test_docs.sh checks
# they match).
set -euo pipefail
cd "$(dirname "$0")/.."
reference=$(build/loom config --reference)
python3 - "$reference" <<'PY'
import re, sys
path = "docs/config.md"
text = open(path).read()
begin, end = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"
text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{sys.argv[1]}\n{end}", text, flags=re.S)
open(path, "w").write(text)
PY
