#!/usr/bin/env bash
# scripts/plot_run.py draws a run's metrics (and several runs overlaid) into a 1200x800 PNG, run by its
# shebang or by whichever python3 is on the PATH (pyenv's has no matplotlib), and refuses a directory that is
# not a run.
source "$(dirname "$0")/common.sh"
tiny_train "$WORK/a" >/dev/null 2>&1 || fail "training failed"
tiny_train "$WORK/b" --set optim.lr=1e-3 >/dev/null 2>&1 || fail "training failed"
"$SRC/scripts/plot_run.py" "$WORK/a" >/dev/null || fail "plot of one run failed"
"$SRC/scripts/plot_run.py" "$WORK/a" "$WORK/b" --out "$WORK/both.png" >/dev/null || fail "overlay failed"
python3 "$SRC/scripts/plot_run.py" "$WORK/b" >/dev/null || fail "python3 scripts/plot_run.py ($(command -v python3)) failed"
python3 - "$WORK/a/plots.png" "$WORK/both.png" "$WORK/b/plots.png" <<'PY' || fail "not the expected images"
import struct, sys
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 800), (path, width, height)
    assert len(data) > 20000, (path, len(data))  # four panels with lines, not an empty canvas
print("plots:", [len(open(p, "rb").read()) for p in sys.argv[1:]], "bytes")
PY
set +e; out=$("$SRC/scripts/plot_run.py" "$WORK" 2>&1); code=$?; set -e
[ $code -ne 0 ] && grep -q "has no metrics.jsonl" <<<"$out" || fail "a non-run dir: exit $code: $out"
echo PASS
