#!/usr/bin/env bash
# `loom comm-bench` under mpirun: both all-reduce paths run (the bucketed one checks its sum), the bucket
# count follows --bucket-mb, and the bandwidths are bytes / time * 2(n-1)/n of the times it reports.
source "$(dirname "$0")/common.sh"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$LOOM" comm-bench --mb 1,6 --bucket-mb 2 \
  --iterations 3 --json > "$WORK/bench.json" || fail "comm-bench failed"
python3 - "$WORK/bench.json" <<'PY' || fail "comm-bench output is wrong: $(cat "$WORK/bench.json")"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["ranks"] == 2 and out["bucket_mb"] == 2
rows = out["sizes"]
assert [r["mb"] for r in rows] == [1, 6] and [r["buckets"] for r in rows] == [1, 3], rows
for r in rows:
    for path in ("plain", "bucketed"):
        ms = r[f"{path}_ms"]
        assert ms > 0, r
        expected = r["mb"] * 2**20 / (ms / 1e3) * 2 * (2 - 1) / 2 / 1e9
        assert abs(r[f"{path}_busbw_gbps"] - expected) < 1e-6 * expected, (path, r, expected)
print("comm-bench:", rows)
PY
set +e; out=$("$LOOM" comm-bench 2>&1); code=$?; set -e
[ $code -ne 0 ] && grep -q "run it under mpirun" <<<"$out" || fail "comm-bench without mpirun: exit $code: $out"
set +e; out=$("$LOOM" comm-bench --mb 1,x 2>&1); code=$?; set -e
[ $code -eq 2 ] && grep -q -- "--mb: expected sizes" <<<"$out" || fail "bad --mb: exit $code: $out"
echo PASS
