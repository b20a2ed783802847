#!/usr/bin/env bash
# fp16 training with dynamic loss scaling on the tiny config: a loss scale far too large makes the first
# steps overflow, and each of those is skipped (no update: grad_norm null) with the scale halved, until
# the gradients fit; growth_interval finite steps later the scale doubles; the loss falls. A run killed
# after a checkpoint resumes with its scale and writes the same losses as the uninterrupted run.
source "$(dirname "$0")/common.sh"
fp16=(--set precision.dtype=fp16 --set precision.loss_scale_init=1e12 --set precision.loss_scale_growth_interval=8
      --set train.max_steps=60 --set checkpoint.every=30 --set train.eval_every=30 --set model.dropout=0)
tiny_train "$WORK/reference" "${fp16[@]}" > "$WORK/reference.log" 2>&1 || { cat "$WORK/reference.log"; fail "fp16 run"; }
grep -q "fp16 gradients overflowed" "$WORK/reference.log" || fail "no overflow was reported"

python3 - "$WORK/reference/metrics.jsonl" <<'PY' || fail "loss scaling"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
scales = [r["loss_scale"] for r in rows]
skipped = [r["step"] for r in rows if r["grad_norm"] is None]
print("skipped steps", skipped, "scales", scales)
# A scale of 1e12 overflows fp16 at once: the first steps are all skipped, each halving the scale.
first_good = next(i for i, r in enumerate(rows) if r["grad_norm"] is not None)
assert first_good >= 10 and skipped[:first_good] == list(range(1, first_good + 1)), skipped
# Every row follows the rule (loss_scale is logged after the step's update): overflow halves and restarts
# the count, 8 finite steps in a row double.
expected, finite_run = 1e12, 0
for r in rows:
    if r["grad_norm"] is None:
        expected, finite_run = expected / 2, 0
    else:
        finite_run += 1
        if finite_run == 8:
            expected, finite_run = expected * 2, 0
    assert r["loss_scale"] == expected, (r["step"], r["loss_scale"], expected)
assert any(b["loss_scale"] == 2 * a["loss_scale"] for a, b in zip(rows, rows[1:])), "the scale never grew"
losses = [r["loss"] for r in rows]
assert sum(losses[-5:]) / 5 < sum(losses[first_good:first_good + 5]) / 5 - 0.3, losses
PY

sigkill_resume "$WORK/resumed" 30 "${fp16[@]}"
[ "$killed_at" -lt 60 ] || fail "SIGKILL came too late to test anything (the run had finished)"
same_losses "$WORK/reference" "$WORK/resumed" "fp16 resume after checkpoint 30"
python3 "$SRC/tests/e2e/metrics.py" get "$WORK/resumed" train 60 loss_scale > "$WORK/resumed.scale"
python3 "$SRC/tests/e2e/metrics.py" get "$WORK/reference" train 60 loss_scale > "$WORK/reference.scale"
diff "$WORK/reference.scale" "$WORK/resumed.scale" || fail "the resumed run ended with another loss scale"
echo PASS
