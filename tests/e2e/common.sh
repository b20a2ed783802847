# Sourced by the end-to-end tests: paths, a scratch dir, and `tiny_train RUN_DIR [--set ...]`. A test
# training another config redefines train_args (the config and --sets for a run dir) after sourcing.
set -euo pipefail
: "${LOOM:?set LOOM to the loom binary}" "${KJV_DATA:?set KJV_DATA to prepared KJV data}"
SRC=${LOOM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-e2e.XXXXXX")
pid=
# LOOM_E2E_KEEP=DIR keeps every run's metrics.jsonl (as DIR/<test>/<path under the scratch dir>) when the
# scratch dir goes: two commits' e2e runs can then be compared row by row (tests/e2e/metrics.py compare).
keep_metrics() {
  [ -n "${LOOM_E2E_KEEP:-}" ] || return 0
  local dest file
  dest=$LOOM_E2E_KEEP/$(basename "$0" .sh)
  rm -rf "$dest"
  while IFS= read -r file; do
    mkdir -p "$dest/$(dirname "${file#"$WORK"/}")"
    cp "$file" "$dest/${file#"$WORK"/}"
  done < <(find "$WORK" -name metrics.jsonl 2>/dev/null)
}
e2e_cleanup() { keep_metrics; rm -rf "$WORK"; }
trap '[ -z "$pid" ] || kill -KILL $pid 2>/dev/null || true; e2e_cleanup' EXIT  # no run left behind

# LOOM_E2E_DEVICE=cuda trains the tiny runs on a GPU (scripts/gpu_check.sh runs some tests so), with
# deterministic kernels: the tests compare runs bit for bit.
E2E_DEVICE=${LOOM_E2E_DEVICE:-cpu}
tiny_args() {
  echo "$SRC/tests/e2e/tiny.yaml --set run.dir=$1 --set data.train=$KJV_DATA/train.bin" \
       "--set data.valid=$KJV_DATA/valid.bin --set tokenizer.model=$KJV_DATA/tokenizer.model" \
       "--set runtime.device=$E2E_DEVICE --set runtime.deterministic=$([ "$E2E_DEVICE" = cpu ] && echo false || echo true)"
}
train_args() { tiny_args "$1"; }
tiny_train() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  "$LOOM" train $(train_args "$dir") "$@"
}
# Starts training in the background with PID in $pid (the loom process itself, so signals reach it).
tiny_train_bg() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  "$LOOM" train $(train_args "$dir") "$@" &
  pid=$!
}
fail() { echo "FAIL: $*" >&2; exit 1; }
# Rows of metrics.jsonl as "split step loss" with the loss exactly as written.
losses() { python3 "$SRC/tests/e2e/metrics.py" rows "$1"; }
# Waits until FILE exists (30 s at most).
wait_for() {
  for _ in $(seq 300); do [ -e "$1" ] && return 0; sleep 0.1; done
  fail "timed out waiting for $1"
}
# served_port LOG PID [TENTHS]: the port a `loom serve --port 0` started in the background (PID) prints to LOG,
# once it listens (TENTHS tenths of a second at most, 300 unless given); fails naming LOG when it exits first.
served_port() {
  local log=$1 pid=$2 port=
  for _ in $(seq "${3:-300}"); do
    port=$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$log")
    [ -n "$port" ] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || fail "loom serve exited: $(cat "$log")"
    sleep 0.1
  done
  fail "loom serve printed no port: $(cat "$log")"
}
# same_losses REFERENCE_RUN RUN LABEL: RUN wrote exactly REFERENCE_RUN's losses, bit for bit.
same_losses() {
  losses "$1" > "$1.losses"; losses "$2" > "$2.losses"
  diff "$1.losses" "$2.losses" || fail "$3: losses differ from the uninterrupted run"
  echo "$3: identical losses"
}
# sigkill_resume RUN STEP [--set ...]: trains RUN in the background, SIGKILLs it once its step-STEP
# checkpoint is complete, somewhere in the step after it (LOOM_FAULT_INJECTION=stall holds the run before
# the next one: a tiny model would otherwise race past later checkpoints before the kill lands), then
# trains it again to the end (the steps after the checkpoint are redone). Sets killed_at to the newest
# checkpoint the killed run had left.
sigkill_resume() {
  local run=$1 step=$2; shift 2
  LOOM_FAULT_INJECTION="stall@$((step + 2))" tiny_train_bg "$run" "$@" >"$run.log" 2>&1
  wait_for "$run/checkpoints/$step/manifest.json"
  kill -KILL $pid; wait $pid 2>/dev/null || true
  killed_at=$(ls "$run/checkpoints" | sort -n | tail -1)
  tiny_train "$run" "$@" >>"$run.log" 2>&1
}
# same_losses_within REFERENCE_RUN RUN LABEL TOLERANCE: the same rows, each loss within TOLERANCE.
same_losses_within() {
  losses "$1" > "$1.losses"; losses "$2" > "$2.losses"
  python3 - "$1.losses" "$2.losses" "$3" "$4" <<'PY' || fail "$3: losses differ from $1"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
assert [x[:2] for x in a] == [x[:2] for x in b], "different rows"
worst = max(0.0 if x[2] == y[2] else abs(float(x[2]) - float(y[2])) for x, y in zip(a, b))  # both None: skipped
assert worst < float(sys.argv[4]), worst
print(f"{sys.argv[3]}: {len(a)} rows, max |loss diff| {worst:.1e}")
PY
}
# same_losses_within_dtype_error REFERENCE_RUN RUN FP32_RUN LABEL K: RUN's losses within K times the error the
# single process REFERENCE_RUN makes in its dtype (bf16, fp16): the largest |loss - FP32_RUN's| over the rows, where
# FP32_RUN is the same config in fp32. K = 2 where RUN rounds no more than REFERENCE_RUN: both are then within that
# error of the fp32 curve, so within twice it of each other.
same_losses_within_dtype_error() {
  losses "$1" > "$1.losses"; losses "$2" > "$2.losses"; losses "$3" > "$3.losses"
  python3 - "$1.losses" "$2.losses" "$3.losses" "$4" "$5" <<'PY' || fail "$4: losses differ from $1"
import sys
ref, run, fp32 = ([l.split() for l in open(f)] for f in sys.argv[1:4])
assert [x[:2] for x in ref] == [x[:2] for x in run] == [x[:2] for x in fp32], "different rows"
def gap(a, b): return max(abs(float(x[2]) - float(y[2])) for x, y in zip(a, b))
error, worst, k = gap(ref, fp32), gap(run, ref), float(sys.argv[5])
print(f"{sys.argv[4]}: {len(ref)} rows, max |loss diff| {worst:.2e}; the single process's own error against fp32 "
      f"{error:.2e}: {worst / error:.2f} of it (bound {k:g})")
assert 0 < error < 0.01 and worst <= k * error, (worst, error, k)
PY
}
# same_grad_norms REFERENCE_RUN RUN WHAT [TOLERANCE]: the train rows' (clipped) gradient norms within TOLERANCE
# relative (1e-4 unless given).
same_grad_norms() {
  python3 - "$1" "$2" "$3" "${4:-1e-4}" <<'PY' || fail "$3: gradient norms differ from $1"
import json, sys
norms = [[r["grad_norm"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"] for d in sys.argv[1:3]]
assert len(norms[0]) == len(norms[1]) > 0
worst = max(abs(a - b) / a for a, b in zip(*norms))
assert worst < float(sys.argv[4]), (worst, norms)
print(f"{sys.argv[3]}: grad norms within {worst:.1e} relative")
PY
}
# same_losses_and_grad_norms REFERENCE_RUN RUN WHAT [TOLERANCE]: losses within TOLERANCE (1e-5: another
# layout of the same fp32 computation) and the clipped gradient norms within 1e-4 relative.
same_losses_and_grad_norms() {
  same_losses_within "$1" "$2" "$3" "${4:-1e-5}"
  same_grad_norms "$1" "$2" "$3"
}
# same_train_losses REFERENCE_RUN RUN WHAT STEPS: train rows 1..STEPS in both, each loss within 1e-5 (a run
# resumed across layouts, whose sessions also evaluate at their last step, against the uninterrupted one).
same_train_losses() {
  python3 - "$1" "$2" "$3" "$4" <<'PY' || fail "$3: the resumed run left the uninterrupted curve"
import json, sys
rows = [{r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"}
        for d in sys.argv[1:3]]
assert sorted(rows[0]) == sorted(rows[1]) == list(range(1, int(sys.argv[4]) + 1)), rows
worst = max(abs(rows[0][s] - rows[1][s]) for s in rows[0])
assert worst < 1e-5, worst
print(f"{sys.argv[3]}: {len(rows[0])} train rows, max |loss diff| {worst:.1e}")
PY
}
# Multi-rank runs (tensor parallelism): mpirun as the tests need it.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
mpi_train() {  # mpi_train RANKS RUN_DIR [--set ...]
  local ranks=$1 dir=$2; shift 2
  # shellcheck disable=SC2046
  "${MPIRUN[@]}" -np "$ranks" "$LOOM" train $(train_args "$dir") "$@" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; return 1; }
}
# resume_hop RUN_DIR RANKS STEPS [--set ...]: trains RUN_DIR on to STEPS (after the given --sets) under mpirun, every 5
# steps a checkpoint; after the first hop (STEPS 5) it must have resumed from the checkpoint 5 steps back.
resume_hop() {
  local dir=$1 ranks=$2 steps=$3; shift 3
  mpi_train "$ranks" "$dir" "$@" --set checkpoint.every=5 --set train.max_steps="$steps" \
    || fail "resume hop to step $steps failed"
  [ "$steps" -eq 5 ] || grep -q "resumed from .*/checkpoints/$((steps - 5))" "$dir.log" \
    || fail "the hop to step $steps did not resume from step $((steps - 5))"
}
# resumed_as_one_process REFERENCE_RUN RUN_DIR LABEL [--set ...]: RUN_DIR trained 10 of the reference's 20 steps
# under mpirun -np 2 with the given layout (a step-10 checkpoint), then on to 20 by one process, which must resume
# from it and stay on the reference's curve (train losses within 1e-5).
resumed_as_one_process() {
  local reference=$1 dir=$2 label=$3; shift 3
  mpi_train 2 "$dir" "$@" --set train.max_steps=10 --set schedule.total_steps=20 --set checkpoint.every=10 \
    || fail "$label: the first half"
  tiny_train "$dir" >"$dir-2.log" 2>&1 || fail "$label: resumed as one process"
  grep -q "resumed from .*/checkpoints/10" "$dir-2.log" || fail "$label: the single process did not resume"
  same_train_losses "$reference" "$dir" "$label" 20
}
# resume_repeats_losses LABEL [--set ...]: with the given settings (dropout on, say), a run of 20 steps and one
# stopped at its step-10 checkpoint and trained on to 20 write the same losses, bit for bit.
resume_repeats_losses() {
  local label=$1; shift
  local args=("$@" --set checkpoint.every=10 --set schedule.total_steps=20)
  tiny_train "$WORK/whole" "${args[@]}" >"$WORK/whole.log" 2>&1 || fail "$label: the whole run"
  tiny_train "$WORK/resumed" "${args[@]}" --set train.max_steps=10 >"$WORK/resumed.log" 2>&1 || fail "$label: first half"
  tiny_train "$WORK/resumed" "${args[@]}" >>"$WORK/resumed.log" 2>&1 || fail "$label: resumed half"
  grep -q "resumed from .*/checkpoints/10" "$WORK/resumed.log" || fail "$label: the second half did not resume"
  same_losses "$WORK/whole" "$WORK/resumed" "$label"
}
# same_curve REFERENCE_RUN RUN WHAT [STEPS]: the same rows (STEPS train losses, a valid loss every 5 steps),
# each loss within 1e-5 of the reference's (another layout of the same fp32 computation).
same_curve() {
  losses "$1" > "$1.txt"
  losses "$2" > "$2.txt"
  python3 - "$1.txt" "$2.txt" "$3" "${4:-10}" <<'PY' || fail "$3: losses differ from the single process"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
steps = int(sys.argv[4])
assert [x[:2] for x in a] == [x[:2] for x in b], "different rows"
assert sum(x[0] == "train" for x in a) == steps and sum(x[0] == "valid" for x in a) == steps // 5, "missing rows"
worst = max(abs(float(x[2]) - float(y[2])) for x, y in zip(a, b))
assert worst < 1e-5, worst
print(f"{sys.argv[3]}: {len(a)} rows, max |loss diff| {worst:.1e}")
PY
}

# A training run whose config is refused: exit 2 with PATTERN (a fixed string) in the message, before any
# work (no config.yaml in the run dir). Arguments after PATTERN go to tiny_train.
expect_train_config_error() {  # expect_train_config_error PATTERN [--set ...]
  local pattern=$1; shift
  set +e
  out=$(tiny_train "$WORK/bad" "$@" 2>&1); code=$?
  set -e
  [ $code -eq 2 ] && grep -qF -- "$pattern" <<<"$out" || fail "expected exit 2 with '$pattern', got $code: $out"
  [ ! -e "$WORK/bad/config.yaml" ] || fail "a config error still started the run"
}

# The synthetic reversal task of configs/reverse-synthetic.yaml made small and fast: batches of 16, a
# valid loss every 5 steps, a checkpoint every 10, one thread.
reverse_tiny_args() {  # reverse_tiny_args RUN_DIR
  echo "$SRC/configs/reverse-synthetic.yaml --set run.dir=$1 --set train.batch_size=16 --set train.log_every=1" \
       "--set train.eval_every=5 --set train.eval_batches=2 --set data.synthetic_valid_size=64" \
       "--set schedule.warmup_steps=5 --set checkpoint.every=10 --set runtime.threads=1"
}
# same_eval_and_translation RUN LABEL: one process evaluating RUN's checkpoint (loaded whole) gets
# $WORK/single's loss, and `loom translate --beam 4` the same three translations.
same_eval_and_translation() {
  local run=$1 label=$2
  "$LOOM" eval "$run" --json > "$run-eval.json" 2>/dev/null || fail "loom eval from $label"
  "$LOOM" eval "$WORK/single" --json > "$WORK/single-eval.json" 2>/dev/null || fail "loom eval"
  python3 - "$WORK/single-eval.json" "$run-eval.json" "$label" <<'PY' || fail "loom eval: the $label checkpoint differs"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert abs(a["loss"] - b["loss"]) < 1e-5 and a["sentences"] == b["sentences"] > 0 and a["exact_match"] == b["exact_match"], (a, b)
print(f"loom eval of the {sys.argv[3]} checkpoint: loss {b['loss']:.7f} (single {a['loss']:.7f}), diff {abs(a['loss'] - b['loss']):.1e}")
PY
  printf '5 9 14 3 22\n7 7 8\n20 19 18 17 16 15 14 13 12 11\n' > "$WORK/source.txt"
  "$LOOM" translate "$run" --beam 4 < "$WORK/source.txt" > "$run.txt" || fail "translate from $label"
  "$LOOM" translate "$WORK/single" --beam 4 < "$WORK/source.txt" > "$WORK/single.txt" || fail "translate"
  [ "$(wc -l < "$run.txt")" -eq 3 ] && diff "$WORK/single.txt" "$run.txt" || fail "translate: $label and single differ"
  echo "translate from the $label checkpoint (beam 4): the single-process output"
}

# A tiny encoder-decoder on the Bible pairs ($BIBLE_MT_DATA): fp32, 1500-token batches, 10 steps.
bible_tiny_args() {  # bible_tiny_args RUN_DIR
  local D=$BIBLE_MT_DATA
  echo "$SRC/configs/transformer-kjv-es.yaml --set run.dir=$1 --set data.train=$D/train.bin" \
       "--set data.valid=$D/valid.bin --set data.test=$D/test.bin --set tokenizer.model=$D/tokenizer.model" \
       "--set model.d_model=32 --set model.n_layers=1 --set model.n_encoder_layers=1 --set model.n_heads=2" \
       "--set model.d_ff=64 --set model.max_seq_len=400 --set model.dropout=0 --set precision.dtype=fp32" \
       "--set train.batch_tokens=1500 --set train.batch_size=8 --set train.max_steps=10 --set train.log_every=1" \
       "--set train.eval_every=5 --set train.eval_batches=2 --set checkpoint.every=5 --set runtime.threads=1" \
       "--set schedule.warmup_steps=5 --set decode.batch_size=16"
}
