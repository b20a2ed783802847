#!/usr/bin/env bash
# One writer per run.dir (train/run_dir_lock.h). While a trainer holds a run dir, a second `loom train` on it
# exits 2 within seconds, naming the holder ("in use by loom pid P on host H since T"), and changes nothing
# there. A SIGKILLed holder leaves no stale lock: the next start resumes and ends with the uninterrupted run's
# losses. Under mpirun rank 0 holds the lock for the whole job: a second 2-rank job and a single process
# are refused on every rank, and the 2-rank job refuses to start on a single process's run dir.
source "$(dirname "$0")/common.sh"
tiny_train "$WORK/reference" >/dev/null 2>&1
# wait_for_step RUN STEP: metrics.jsonl has the train row of STEP (60 s at most).
wait_for_step() {
  for _ in $(seq 600); do
    grep -q "\"step\": *$2," "$1/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "timed out waiting for step $2 in $1"
}
snapshot() { (cd "$1" && find . -type f ! -name .lock -exec md5sum {} + | sort); }
# refused LOG RUN: the second trainer's exit code and message.
refused() {
  local code=$1 log=$2 run=$3
  [ "$code" -eq 2 ] || fail "a second trainer on $run: exit $code, expected 2: $(tail -3 "$log")"
  grep -q "run.dir $run is in use by loom pid [0-9]* on host $(hostname) since 20[0-9-]*T[0-9:]*Z" "$log" \
    || fail "no holder in the message: $(tail -3 "$log")"
}

# A 2-rank job started on RUN, its output in LOG, must be refused.
job_refused() {
  local run=$1 log=$2 code
  set +e
  # shellcheck disable=SC2046
  timeout 120 "${MPIRUN[@]}" -np 2 "$LOOM" train $(train_args "$run") --set parallel.dp=2 >"$log" 2>&1
  code=$?
  set -e
  refused $code "$log" "$run"
}

# A single process holds the run, stalled in step 12 (after its step-10 checkpoint).
run=$WORK/run
LOOM_FAULT_INJECTION=stall@12 tiny_train_bg "$run" >"$run.log" 2>&1
holder=$pid
wait_for_step "$run" 11
sleep 1
snapshot "$run" > "$WORK/before.txt"
start=$SECONDS
set +e
tiny_train "$run" > "$WORK/second.log" 2>&1
code=$?
set -e
refused $code "$WORK/second.log" "$run"
grep -q "pid $holder " "$WORK/second.log" || fail "the message names another pid than the holder's $holder"
[ $((SECONDS - start)) -lt 15 ] || fail "the refusal took $((SECONDS - start)) s"
snapshot "$run" > "$WORK/after.txt"
diff "$WORK/before.txt" "$WORK/after.txt" || fail "the refused trainer changed the run dir"
echo "a second trainer: refused in $((SECONDS - start)) s, nothing changed"

# SIGKILL the holder: the kernel drops its lock, and the next start resumes to the uninterrupted losses.
kill -KILL $holder; wait $holder 2>/dev/null || true
tiny_train "$run" >>"$run.log" 2>&1 || fail "a start after the holder was SIGKILLed failed: $(tail -3 "$run.log")"
grep -q "resumed from .*/checkpoints/10" "$run.log" || fail "did not resume from step 10"
same_losses "$WORK/reference" "$run" "resumed after the holder was SIGKILLed"

# A 2-rank job holds a run: a second job and a single process are refused; then the reverse.
mpi=$WORK/mpi
# shellcheck disable=SC2046
LOOM_FAULT_INJECTION=stall@12 "${MPIRUN[@]}" -x LOOM_FAULT_INJECTION -np 2 "$LOOM" train $(train_args "$mpi") \
  --set parallel.dp=2 >"$mpi.log" 2>&1 &
job=$!
wait_for_step "$mpi" 11
job_refused "$mpi" "$WORK/second-job.log"
[ "$(grep -c "is in use by loom pid" "$WORK/second-job.log")" -ge 2 ] || fail "not every rank of the second job was told"
set +e
tiny_train "$mpi" > "$WORK/single.log" 2>&1
code=$?
set -e
refused $code "$WORK/single.log" "$mpi"
pkill -KILL -f "run.dir=$mpi " || true
wait $job 2>/dev/null || true

held=$WORK/held
LOOM_FAULT_INJECTION=stall@12 tiny_train_bg "$held" >"$held.log" 2>&1
wait_for_step "$held" 11
job_refused "$held" "$WORK/job.log"
grep -q "pid $pid " "$WORK/job.log" || fail "the job's message names another pid than the holder's $pid"
echo "2-rank jobs: refused by a job and a process holding the run, and refusing both"
echo PASS
