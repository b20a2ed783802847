#!/usr/bin/env bash
# Non-finite loss or gradients (train/nonfinite_guard.h), injected with LOOM_FAULT_INJECTION:
# - a NaN loss (or a NaN gradient) at step 5 skips that step's update and the run goes on: the rows before
#   it are the clean run's bit for bit, step 5's loss and grad_norm are null, skipped_steps counts 1 from
#   step 5 on, and both kinds of fault give the same losses after it (the same update was left out);
# - a resumed run carries the count;
# - a persistent fault stops the run at train.max_bad_steps in a row, exit 1, naming the step, the rank and
#   the parameter; the last checkpoint holds no bad step and resuming from it reproduces the clean run;
#   max_bad_steps 0 never stops;
# - under mpirun -np 2 (DP=2, and ZeRO-1) a fault on rank 1 alone is agreed by both ranks: the curve
#   equals the single process's with the same fault, and a persistent one ends the job naming rank 1.
source "$(dirname "$0")/common.sh"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
common=(--set model.dropout=0 --set train.max_steps=20 --set schedule.total_steps=20 --set checkpoint.every=5)
run() {  # run NAME FAULT [--set ...]: trains $WORK/NAME with LOOM_FAULT_INJECTION=FAULT, output in NAME.log
  local name=$1 fault=$2; shift 2
  set +e
  LOOM_FAULT_INJECTION=$fault tiny_train "$WORK/$name" "${common[@]}" "$@" >"$WORK/$name.log" 2>&1
  code=$?
  set -e
}
run clean ""
[ $code -eq 0 ] || fail "clean run: $(tail -3 "$WORK/clean.log")"
run nan_loss nan_loss@5
[ $code -eq 0 ] || fail "a single NaN loss stopped the run: $(tail -3 "$WORK/nan_loss.log")"
grep -q "step 5: non-finite loss (nan) on rank 0 (dp0-cp0-tp0-pp0); step skipped (1 in a row, train.max_bad_steps=10)" \
  "$WORK/nan_loss.log" || fail "no warning for the NaN loss: $(grep -i nan "$WORK/nan_loss.log")"
run nan_grad nan_grad@5
[ $code -eq 0 ] || fail "a single NaN gradient stopped the run"
grep -q "step 5: non-finite gradient of [a-z_.0-9]* on rank 0" "$WORK/nan_grad.log" || fail "no warning for the NaN gradient"

python3 - "$WORK" <<'PY' || fail "skipped step"
import json, sys
def train_rows(name):
    return {r["step"]: r for r in map(json.loads, open(f"{sys.argv[1]}/{name}/metrics.jsonl")) if r["split"] == "train"}
clean, nan_loss, nan_grad = train_rows("clean"), train_rows("nan_loss"), train_rows("nan_grad")
for s in range(1, 5):  # before the fault: the clean run exactly
    assert nan_loss[s]["loss"] == clean[s]["loss"] and nan_grad[s]["loss"] == clean[s]["loss"], s
assert nan_loss[5]["loss"] is None and nan_loss[5]["grad_norm"] is None, nan_loss[5]
assert nan_grad[5]["loss"] == clean[5]["loss"] and nan_grad[5]["grad_norm"] is None, nan_grad[5]  # loss was fine
assert [nan_loss[s]["skipped_steps"] for s in range(1, 21)] == [0] * 4 + [1] * 16
assert [clean[s]["skipped_steps"] for s in range(1, 21)] == [0] * 20
# After it, the run goes on without step 5's update: not the clean curve, but the same for either fault.
assert nan_loss[6]["loss"] != clean[6]["loss"]
for s in range(6, 21):
    assert nan_loss[s]["loss"] == nan_grad[s]["loss"], (s, nan_loss[s]["loss"], nan_grad[s]["loss"])
    assert nan_loss[s]["lr"] == clean[s]["lr"], s  # the schedule follows the step count
assert abs(nan_loss[20]["loss"] - clean[20]["loss"]) < 0.1, (nan_loss[20]["loss"], clean[20]["loss"])
print(f"NaN at step 5 skipped; step 20 loss {nan_loss[20]['loss']:.4f} (clean run {clean[20]['loss']:.4f})")
PY

# Resume after the skipped step: the count travels with the checkpoint, the losses are exact.
run resumed nan_loss@5 --set train.max_steps=10
run resumed "" && [ $code -eq 0 ] || fail "resume after a skipped step"
grep -q "resumed from .*/checkpoints/10" "$WORK/resumed.log" || fail "did not resume from step 10"
same_losses "$WORK/nan_loss" "$WORK/resumed" "resumed after a skipped step"
[ "$(python3 "$SRC/tests/e2e/metrics.py" get "$WORK/resumed" train 20 skipped_steps)" = 1 ] || fail "count lost on resume"

# Persistent: the third NaN gradient in a row (steps 8, 9, 10) stops the run before checkpoint 10.
run persistent nan_grad@8- --set train.max_bad_steps=3
[ $code -eq 1 ] || fail "persistent NaN gradients: exit code $code, expected 1"
grep -q "step 10: non-finite gradient of [a-z_.0-9]* on rank 0 (dp0-cp0-tp0-pp0); 3 bad steps in a row (train.max_bad_steps=3): stopping" \
  "$WORK/persistent.log" || fail "stop message: $(tail -2 "$WORK/persistent.log")"
[ "$(ls "$WORK/persistent/checkpoints")" = "5" ] || fail "checkpoints after the stop: $(ls "$WORK/persistent/checkpoints")"
run persistent "" && [ $code -eq 0 ] || fail "resume after the stop"
grep -q "resumed from .*/checkpoints/5" "$WORK/persistent.log" || fail "did not resume from step 5"
same_losses "$WORK/clean" "$WORK/persistent" "resumed from the checkpoint before the bad steps"
run never_stop nan_loss@15- --set train.max_bad_steps=0
[ $code -eq 0 ] || fail "max_bad_steps=0 stopped the run"
[ "$(python3 "$SRC/tests/e2e/metrics.py" get "$WORK/never_stop" train 20 skipped_steps)" = 6 ] || fail "never_stop count"
echo "max_bad_steps=0: 6 bad steps in a row, run finished"

# Two ranks: the fault on rank 1 only.
dp_run() {  # dp_run NAME FAULT [--set ...]
  local name=$1 fault=$2; shift 2
  set +e
  # shellcheck disable=SC2046
  LOOM_FAULT_INJECTION=$fault timeout 300 "${MPIRUN[@]}" -x LOOM_FAULT_INJECTION -np 2 "$LOOM" train \
    $(tiny_args "$WORK/$name") "${common[@]}" --set parallel.dp=2 --set train.micro_batch_size=0 \
    --set parallel.timeout_s=30 "$@" >"$WORK/$name.log" 2>&1
  code=$?
  set -e
}
for zero in 0 1; do
  dp_run "dp2-zero$zero" nan_loss@5:rank1 --set parallel.zero=$zero
  [ $code -eq 0 ] || fail "DP=2 zero=$zero with a NaN loss on rank 1: exit $code: $(tail -3 "$WORK/dp2-zero$zero.log")"
  grep -q "step 5: non-finite loss (nan) on rank 1 (dp1-cp0-tp0-pp0); step skipped" "$WORK/dp2-zero$zero.log" \
    || fail "DP=2: the warning does not name rank 1"
  same_losses_within "$WORK/nan_loss" "$WORK/dp2-zero$zero" "DP=2 zero=$zero, NaN loss on rank 1 at step 5" 1e-5
  dp_run "dp2-stop-zero$zero" nan_grad@3-:rank1 --set train.max_bad_steps=2 --set parallel.zero=$zero
  [ $code -ne 0 ] && [ $code -ne 124 ] || fail "DP=2 persistent NaN gradient on rank 1: exit code $code"
  grep -q "step 4: non-finite gradient of [a-z_.0-9]* on rank 1 (dp1-cp0-tp0-pp0); 2 bad steps in a row" \
    "$WORK/dp2-stop-zero$zero.log" || fail "DP=2 stop message: $(grep -i error "$WORK/dp2-stop-zero$zero.log")"
  echo "DP=2 zero=$zero: persistent NaN gradient on rank 1 ended the job with exit code $code"
done
echo PASS
