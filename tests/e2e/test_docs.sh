#!/usr/bin/env bash
# docs/config.md's config reference is exactly what `loom config --reference` prints: every key documented.
source "$(dirname "$0")/common.sh"
sed -n '/<!-- config-reference:begin -->/,/<!-- config-reference:end -->/p' "$SRC/docs/config.md" | sed '1d;$d' > "$WORK/docs.md"
"$LOOM" config --reference > "$WORK/reference.md"
diff "$WORK/reference.md" "$WORK/docs.md" || fail "docs/config.md's config reference is stale: run scripts/sync_docs.sh"
echo PASS
