#!/usr/bin/env bash
# Damaged checkpoints and a full disk never lose a run:
#  - a shard with a flipped byte, or a file gone from the newest checkpoint: `loom status` reports it
#    by name, `loom train` skips it (saying why) and resumes from the previous one, reproducing the
#    uninterrupted losses bit for bit;
#  - every checkpoint broken: `loom train` refuses to start the run over them, naming each problem;
#  - the disk fills while a checkpoint is written (run dir on a small tmpfs): a clear error, no partial
#    checkpoint left, the earlier checkpoints intact, and the run resumes exactly once there is room.
source "$(dirname "$0")/common.sh"
steps=(--set train.max_steps=30 --set schedule.total_steps=30 --set checkpoint.every=10 --set checkpoint.keep=5)
tiny_train "$WORK/reference" "${steps[@]}" >/dev/null 2>&1 || fail "reference run failed"
shard=shard-dp0-tp0-pp0.pt
flip_byte() {  # flip_byte FILE OFFSET
  python3 - "$1" "$2" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xFF]))
PY
}

run=$WORK/flipped
tiny_train "$run" "${steps[@]}" --set train.max_steps=20 >/dev/null 2>&1 || fail "first half failed"
flip_byte "$run/checkpoints/20/$shard" 5000
"$LOOM" status "$run" > "$run.status" || fail "loom status failed"
grep -q "checkpoint 10: complete, checksums match" "$run.status" || fail "status: $(cat "$run.status")"
grep -q "checkpoint 20: BROKEN: $shard fails its checksum" "$run.status" || fail "status: $(cat "$run.status")"
tiny_train "$run" "${steps[@]}" >"$run.log" 2>&1 || fail "resume past a flipped byte failed: $(tail -3 "$run.log")"
grep -q "skipping checkpoint .*/checkpoints/20: $shard fails its checksum" "$run.log" || fail "no warning for the flip"
grep -q "resumed from .*/checkpoints/10 " "$run.log" || fail "did not resume from step 10"
same_losses "$WORK/reference" "$run" "flipped byte in the newest checkpoint"

run=$WORK/missing
tiny_train "$run" "${steps[@]}" --set train.max_steps=20 >/dev/null 2>&1 || fail "first half failed"
rm "$run/checkpoints/20/$shard"
tiny_train "$run" "${steps[@]}" >"$run.log" 2>&1 || fail "resume past a missing shard failed"
grep -q "skipping checkpoint .*/checkpoints/20: $shard is missing" "$run.log" || fail "no warning for the missing file"
same_losses "$WORK/reference" "$run" "shard missing from the newest checkpoint"

# Every checkpoint broken: an error, and nothing overwritten.
flip_byte "$run/checkpoints/10/$shard" 100
for s in 20 30; do rm "$run/checkpoints/$s/config.yaml"; done
set +e; out=$(tiny_train "$run" "${steps[@]}" 2>&1); code=$?; set -e
[ $code -ne 0 ] && grep -q "no complete checkpoint to resume in" <<<"$out" && grep -q "10: $shard fails its checksum" <<<"$out" \
  || fail "all checkpoints broken: exit $code: $out"
[ "$(ls "$run/checkpoints")" = "$(printf '10\n20\n30')" ] || fail "checkpoints changed: $(ls "$run/checkpoints")"
echo "all checkpoints broken: refused with exit code $code"

# Disk full while writing a checkpoint.
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: mounting a small tmpfs needs root"; exit 77; fi
small=$WORK/small
mkdir -p "$small"
mount -t tmpfs -o size=3m tmpfs "$small" || fail "cannot mount a tmpfs"
trap 'umount "$small" 2>/dev/null; e2e_cleanup' EXIT
set +e; out=$(tiny_train "$small/run" "${steps[@]}" 2>&1); code=$?; set -e
[ $code -ne 0 ] || fail "training on a full disk exited 0"
grep -q "cannot write checkpoint .*(previous checkpoints are untouched)" <<<"$out" || fail "no clear error: $out"
grep -qi "no space left on device\|disk full" <<<"$out" || fail "the error does not say the disk is full: $out"
ls -a "$small/run/checkpoints" | grep -q "^\.tmp" && fail "a partial checkpoint was left behind"
"$LOOM" status "$small/run" > "$WORK/small.status"
grep -q "BROKEN" "$WORK/small.status" && fail "a broken checkpoint was left: $(cat "$WORK/small.status")"
saved=$(ls "$small/run/checkpoints" | sort -n | tail -1)
[ -n "$saved" ] && [ "$saved" -lt 30 ] || fail "expected some but not all checkpoints on the small disk, got '$saved'"
echo "disk full: $(grep -o 'cannot write checkpoint [^ ]*' <<<"$out"), checkpoint $saved intact"
cp -r "$small/run" "$WORK/moved"
tiny_train "$WORK/moved" "${steps[@]}" >"$WORK/moved.log" 2>&1 || fail "resume after moving off the full disk failed"
grep -q "resumed from .*/checkpoints/$saved " "$WORK/moved.log" || fail "did not resume from step $saved"
same_losses "$WORK/reference" "$WORK/moved" "resumed after a full disk"
echo PASS
