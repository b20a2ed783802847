#!/usr/bin/env bash
# Gradient accumulation is one big batch: 16 sequences as 1 x 16, 2 x 8 and 4 x 4 micro-batches give the
# same losses (dropout off, fp32) to float rounding over 15 steps.
source "$(dirname "$0")/common.sh"
for micro in 16 8 4; do
  tiny_train "$WORK/m$micro" --set train.max_steps=15 --set train.micro_batch_size=$micro --set model.dropout=0 \
    --set train.eval_every=0 >/dev/null 2>&1
  losses "$WORK/m$micro" > "$WORK/m$micro.txt"
done
python3 - "$WORK" <<'PY' || fail "accumulated losses differ from the big batch"
import sys
def read(m):
    return [(l.split()[0], int(l.split()[1]), float(l.split()[2])) for l in open(f"{sys.argv[1]}/m{m}.txt")]
big = read(16)
assert len(big) == 16, big  # 15 train rows + the final valid row
for m in (8, 4):
    for (s1, t1, a), (s2, t2, b) in zip(big, read(m)):
        assert (s1, t1) == (s2, t2)
        assert abs(a - b) < 2e-5, f"micro {m}, {s1} step {t1}: {a} vs {b}"
    print(f"micro {m}: max |diff| = {max(abs(a[2] - b[2]) for a, b in zip(big, read(m))):.2e}")
PY
echo PASS
