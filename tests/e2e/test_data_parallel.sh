#!/usr/bin/env bash
# Data parallelism under mpirun equals the single-process run of the same global batch (fp32, dropout
# off, 20 steps, losses within 1e-5): DP=2, DP=4, DP=2 with 2 accumulated micro-batches per rank, and
# DP=2 with ZeRO-1 (which also resumes exactly).
# A run checkpointed under DP=2, with or without ZeRO-1, resumes under DP=4 / DP=2 / one process, with or
# without ZeRO-1, on the single-process loss curve. A rank that
# throws, crashes or stalls ends the whole job, non-zero, with that rank's message.
source "$(dirname "$0")/common.sh"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
# micro_batch_size 0: batch_size / dp sequences per rank (the single process accumulates 2 x 8).
common=(--set model.dropout=0 --set train.max_steps=20 --set schedule.total_steps=20 --set train.micro_batch_size=0)

tiny_train "$WORK/single" "${common[@]}" --set train.micro_batch_size=8 >/dev/null 2>&1
dp_train() {  # dp_train RANKS RUN_DIR [--set ...]
  local ranks=$1 dir=$2; shift 2
  # shellcheck disable=SC2046
  "${MPIRUN[@]}" -np "$ranks" "$LOOM" train $(tiny_args "$dir") "${common[@]}" --set parallel.dp=-1 "$@"
}
same_curve() { same_losses_within "$WORK/single" "$1" "$2" 1e-5; }

dp_train 2 "$WORK/dp2" >/dev/null 2>&1 || fail "DP=2 run failed"
same_curve "$WORK/dp2" "DP=2"
dp_train 4 "$WORK/dp4" >/dev/null 2>&1 || fail "DP=4 run failed"
same_curve "$WORK/dp4" "DP=4"
dp_train 2 "$WORK/dp2acc" --set train.micro_batch_size=4 >/dev/null 2>&1 || fail "DP=2 x accumulation 2 failed"
same_curve "$WORK/dp2acc" "DP=2 x 2 micro-batches"

# ZeRO-1: optimizer state sharded, gradients reduce-scattered, parameters all-gathered: the same curve;
# each rank's checkpoint shard holds half the weights and optimizer state; resume with the same layout is exact.
dp_train 2 "$WORK/zero" --set parallel.zero=1 >/dev/null 2>&1 || fail "ZeRO-1 run failed"
same_curve "$WORK/zero" "DP=2 ZeRO-1"
dp_train 2 "$WORK/zero-resumed" --set parallel.zero=1 --set train.max_steps=10 >/dev/null 2>&1 || fail "ZeRO-1 first half"
dp_train 2 "$WORK/zero-resumed" --set parallel.zero=1 >/dev/null 2>&1 || fail "ZeRO-1 second half"
same_curve "$WORK/zero-resumed" "DP=2 ZeRO-1 resumed at step 10"
python3 - "$WORK/dp2/checkpoints/20" "$WORK/zero/checkpoints/20" <<'PY' || fail "ZeRO-1 shards do not halve the checkpoint"
import os, sys
plain = os.path.getsize(f"{sys.argv[1]}/shard-dp0-tp0-pp0.pt")
zero = [os.path.getsize(f"{sys.argv[2]}/shard-dp{r}-tp0-pp0.pt") for r in (0, 1)]
# plain = weights + 2 AdamW moments; a ZeRO-1 rank holds its half of each (weights by element range too)
assert all(abs(z / plain - 1 / 2) < 0.03 for z in zero), (plain, zero)
print(f"checkpoint shard per rank: {plain} bytes plain DP, {zero} with ZeRO-1")
PY
# Resume across DP sizes and ZeRO-1 on/off: steps 1-10 under one layout, 11-20 under another, on the
# single-process curve (optimizer state is stored per parameter range and re-partitioned on load).
dp_train 2 "$WORK/dp2-half" --set train.max_steps=10 >/dev/null 2>&1 || fail "DP=2 first half failed"
dp_train 2 "$WORK/zero-half" --set parallel.zero=1 --set train.max_steps=10 >/dev/null 2>&1 || fail "ZeRO-1 first half"
resume_as() {  # resume_as FIRST_HALF NAME WHAT COMMAND...: continues a copy of FIRST_HALF with COMMAND
  local first=$1 dir="$WORK/$2" what=$3; shift 3
  cp -r "$first" "$dir"
  "$@" "$dir" >"$dir.log" 2>&1 || fail "$what: second half failed: $(tail -3 "$dir.log")"
  grep -q "resumed from .*/checkpoints/10" "$dir.log" || fail "$what: did not resume from step 10"
  same_curve "$dir" "$what"
}
dp4() { dp_train 4 "$1"; }
dp4_zero() { dp_train 4 "$1" --set parallel.zero=1; }
dp2() { dp_train 2 "$1"; }
single() { tiny_train "$1" "${common[@]}" --set train.micro_batch_size=8; }
resume_as "$WORK/dp2-half" dp2-dp4 "DP=2 -> DP=4" dp4
resume_as "$WORK/dp2-half" dp2-dp4zero "DP=2 -> DP=4 ZeRO-1" dp4_zero
resume_as "$WORK/zero-half" zero-dp4zero "DP=2 ZeRO-1 -> DP=4 ZeRO-1" dp4_zero
resume_as "$WORK/zero-half" zero-dp2 "DP=2 ZeRO-1 -> DP=2" dp2
resume_as "$WORK/zero-half" zero-single "DP=2 ZeRO-1 -> single process" single

# Failures end the job: every rank exits, non-zero, with the failing rank's message.
expect_job_failure() {  # expect_job_failure FAULT PATTERN
  local started=$SECONDS
  set +e
  out=$(LOOM_FAULT_INJECTION=$1 timeout 120 "${MPIRUN[@]}" -x LOOM_FAULT_INJECTION -np 2 "$LOOM" train \
        $(tiny_args "$WORK/fault") "${common[@]}" --set parallel.dp=2 --set parallel.timeout_s=20 2>&1)
  code=$?
  set -e
  [ $code -ne 0 ] && [ $code -ne 124 ] || fail "$1: exit code $code (expected a non-zero exit, not a hang)"
  grep -q "$2" <<<"$out" || fail "$1: the output lacks '$2': $out"
  echo "$1: job ended with exit code $code after $((SECONDS - started))s"
}
expect_job_failure "throw@5:rank1" "rank 1 dp1-cp0-tp0-pp0.*injected fault (LOOM_FAULT_INJECTION) on rank 1 at step 5"
expect_job_failure "crash@5:rank1" "exited\|terminated\|aborted"
expect_job_failure "stall@5:rank1" "did not finish within parallel.timeout_s=20s"
echo PASS
