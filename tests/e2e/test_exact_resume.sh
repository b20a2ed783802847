#!/usr/bin/env bash
# Exact resume (CPU, fp32, dropout on): a 200-step run interrupted (a) by SIGTERM, (b) by SIGKILL right
# after its step-50 checkpoint, (c) by five SIGKILLs at uneven moments with a checkpoint every step, one of
# them inside a save, each checked to have landed mid-run, then resumed, writes the same losses, bit for bit,
# as the uninterrupted run; (d) so does a run with runtime.deterministic=true.
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

# (c) SIGKILL at uneven moments, a checkpoint every step: each session is killed a few steps past the checkpoint
# it resumed from and a fraction of a step later (its checkpoints are polled), the third inside the save of its
# checkpoint (LOOM_FAULT_INJECTION=kill_in_save: the shard written, the checkpoint not yet complete). Every kill
# must land: the process dies of SIGKILL (exit status 137) with a newer checkpoint than the session began from,
# before the run's end; the last session must resume from the newest checkpoint the last kill left.
run=$WORK/random
every_step=(--set checkpoint.every=1 --set checkpoint.keep=2)
newest_checkpoint() { ls "$run/checkpoints" 2>/dev/null | sort -n | tail -1; }  # complete ones (".tmp-N": hidden)
last=0
kills=()
for kill in "3 0.013" "1 0.007" "save 2" "5 0.019" "2 0.002"; do
  read -r ahead delay <<<"$kill"
  if [ "$ahead" = save ]; then
    LOOM_FAULT_INJECTION="kill_in_save@$((last + delay))" tiny_train_bg "$run" "${steps[@]}" "${every_step[@]}" >>"$run.log" 2>&1
  else
    tiny_train_bg "$run" "${steps[@]}" "${every_step[@]}" >>"$run.log" 2>&1
    for _ in $(seq 3000); do [ "$(newest_checkpoint)" -ge $((last + ahead)) ] 2>/dev/null && break; sleep 0.01; done
    sleep "$delay"
    kill -KILL $pid 2>/dev/null || true
  fi
  wait $pid 2>/dev/null && status=0 || status=$?
  pid=
  now=$(newest_checkpoint)
  what="kill $((${#kills[@]} + 1)) ($kill)"
  [ "$status" -eq 137 ] || fail "$what: exit status $status, not 137 (SIGKILL)"
  [ "$now" -gt "$last" ] && [ "$now" -lt 200 ] || fail "$what did not land mid-run: checkpoint $last before, $now after"
  if [ "$ahead" = save ]; then
    [ "$now" -eq $((last + delay - 1)) ] && [ -d "$run/checkpoints/.tmp-$((last + delay))" ] ||
      fail "$what: checkpoint $((last + delay)) should be half written, the newest complete one $((last + delay - 1)) (is $now)"
  fi
  kills+=("$now")
  last=$now
done
logged=$(wc -l <"$run.log")
tiny_train "$run" "${steps[@]}" "${every_step[@]}" >>"$run.log" 2>&1
# The last session's lines, read whole: `tail | grep -q` under pipefail fails when grep's early exit cuts tail off.
last_session=$(tail -n +$((logged + 1)) "$run.log")
grep -q "resumed from .*/checkpoints/$last " <<<"$last_session" ||
  fail "the run after the SIGKILLs did not resume from checkpoint $last: $(grep -m3 'resum' <<<"$last_session")"
same_as_reference "$run" "${#kills[@]} SIGKILLs (after checkpoints ${kills[*]}, one inside a save)"
# (d) runtime.deterministic (deterministic kernels; what a GPU run needs to repeat itself): on the CPU the
# same losses, and no operator of the run refuses it.
tiny_train "$WORK/deterministic" "${steps[@]}" --set runtime.deterministic=true >"$WORK/deterministic.log" 2>&1 ||
  fail "runtime.deterministic=true: $(tail -3 "$WORK/deterministic.log")"
same_as_reference "$WORK/deterministic" "runtime.deterministic=true"
echo PASS
