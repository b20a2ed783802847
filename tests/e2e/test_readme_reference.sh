#!/usr/bin/env bash
# The README's config reference is exactly what `loom config --reference` prints: every key documented.
source "$(dirname "$0")/common.sh"
sed -n '/<!-- config-reference:begin -->/,/<!-- config-reference:end -->/p' "$SRC/README.md" | sed '1d;$d' > "$WORK/readme.md"
"$LOOM" config --reference > "$WORK/reference.md"
diff "$WORK/reference.md" "$WORK/readme.md" || fail "README.md's config reference is stale: paste 'loom config --reference'"
echo PASS
