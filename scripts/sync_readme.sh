#!/usr/bin/env bash
# Rewrites README.md's config reference from `loom config --reference` (the e2e test checks they match).
set -euo pipefail
cd "$(dirname "$0")/.."
reference=$(build/loom config --reference)
python3 - "$reference" <<'PY'
import re, sys
text = open("README.md").read()
begin, end = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"
text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{sys.argv[1]}\n{end}", text, flags=re.S)
open("README.md", "w").write(text)
PY
