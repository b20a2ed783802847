#!/usr/bin/env bash
# Exact resume (CPU, fp32, dropout on): a 200-step run interrupted (a) by SIGTERM, (b) by SIGKILL right
# after its step-50 checkpoint, (c) by SIGKILL at random moments with a checkpoint every step (so kills
# land mid-write too), then resumed, writes the same losses, bit for bit, as the uninterrupted run; (d) so
# does a run with runtime.deterministic=true.
source "$(dirname "$0")/common.sh"
steps=(--set train.max_steps=200 --set checkpoint.every=50 --set train.eval_every=50)
tiny_train "$WORK/reference" "${steps[@]}" >/dev/null 2>&1
losses "$WORK/reference" > "$WORK/reference.txt"
[ "$(grep -c '^train' "$WORK/reference.txt")" -eq 200 ] || fail "reference run incomplete"

same_as_reference() { same_losses "$WORK/reference" "$@"; }

# (a) SIGTERM: finish the step, checkpoint, exit 0.
run=$WORK/sigterm
tiny_train_bg "$run" "${steps[@]}" >"$run.log" 2>&1
wait_for "$run/checkpoints/50/manifest.json"
kill -TERM $pid
wait $pid || fail "SIGTERM: exit code $? (expected 0)"
grep -q "stopped by signal" "$run.log" || fail "SIGTERM: no stop message"
stopped=$(ls "$run/checkpoints" | sort -n | tail -1)
[ "$stopped" -lt 200 ] || fail "SIGTERM came too late to test anything (stopped at $stopped)"
tiny_train "$run" "${steps[@]}" >>"$run.log" 2>&1
grep -q "resumed from .*/checkpoints/$stopped" "$run.log" || fail "SIGTERM: did not resume from step $stopped"
same_as_reference "$run" "SIGTERM at step $stopped"

# (b) SIGKILL after the step-50 checkpoint: the steps after it are redone.
sigkill_resume "$WORK/sigkill" 50 "${steps[@]}"
[ "$killed_at" -lt 200 ] || fail "SIGKILL came too late to test anything (the run had finished)"
same_as_reference "$WORK/sigkill" "SIGKILL after checkpoint 50"

# (c) SIGKILL at random moments, checkpoint every step.
run=$WORK/random
kills=0
for delay in 2.3 1.7 2.9 1.1 2.6; do
  tiny_train_bg "$run" "${steps[@]}" --set checkpoint.every=1 --set checkpoint.keep=2 >>"$run.log" 2>&1
  sleep "$delay"
  if kill -KILL $pid 2>/dev/null; then kills=$((kills + 1)); fi
  wait $pid 2>/dev/null || true
done
tiny_train "$run" "${steps[@]}" --set checkpoint.every=1 --set checkpoint.keep=2 >>"$run.log" 2>&1
same_as_reference "$run" "$kills random SIGKILLs"
# (d) runtime.deterministic (deterministic kernels; what a GPU run needs to repeat itself): on the CPU the
# same losses, and no operator of the run refuses it.
tiny_train "$WORK/deterministic" "${steps[@]}" --set runtime.deterministic=true >"$WORK/deterministic.log" 2>&1 ||
  fail "runtime.deterministic=true: $(tail -3 "$WORK/deterministic.log")"
same_as_reference "$WORK/deterministic" "runtime.deterministic=true"
echo PASS
