#!/usr/bin/env bash
# The encoder-decoder end to end on the synthetic reversal task (configs/reverse-synthetic.yaml):
# training reaches >= 99% exact match on the 500 held-out pairs with greedy decoding and with beam 4
# (`loom eval`), `loom translate` reverses what it is given on stdin (in order, empty lines kept), and a
# translation run resumed after SIGKILL writes the uninterrupted run's losses bit for bit (dropout on).
source "$(dirname "$0")/common.sh"
train_args() { echo "$SRC/configs/reverse-synthetic.yaml --set run.dir=$1"; }

start=$(date +%s)
tiny_train "$WORK/reverse" > "$WORK/reverse.log" 2>&1 || { cat "$WORK/reverse.log"; fail "training failed"; }
echo "trained in $(( $(date +%s) - start )) s: $(grep 'valid loss' "$WORK/reverse.log" | tail -1)"

for beam in 1 4; do
  "$LOOM" eval "$WORK/reverse" --beam $beam --json > "$WORK/eval$beam.json" || fail "loom eval --beam $beam"
  python3 - "$WORK/eval$beam.json" $beam <<'PY' || fail "beam $2: exact match below 99%"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"beam {sys.argv[2]}: exact match {r['exact_match']:.4f} of {r['sentences']} pairs, valid loss {r['loss']:.4f}")
assert r["sentences"] == 500 and r["beam"] == int(sys.argv[2]), r
assert r["exact_match"] >= 0.99, r
PY
done

printf '5 9 14 3 22\n\n7 7 8\n20 19 18 17 16 15 14 13 12 11\n' > "$WORK/source.txt"
"$LOOM" translate "$WORK/reverse" < "$WORK/source.txt" > "$WORK/greedy.txt" || fail "loom translate"
printf '22 3 14 9 5\n\n8 7 7\n11 12 13 14 15 16 17 18 19 20\n' > "$WORK/expected.txt"
diff "$WORK/expected.txt" "$WORK/greedy.txt" || fail "translate: not the reversed lines"
"$LOOM" translate "$WORK/reverse" --beam 5 < "$WORK/source.txt" > "$WORK/beam.txt" || fail "loom translate --beam 5"
diff "$WORK/expected.txt" "$WORK/beam.txt" || fail "translate --beam 5: not the reversed lines"
echo "translate: greedy and beam 5 reverse every line"
set +e
out=$(echo "5 x 7" | "$LOOM" translate "$WORK/reverse" 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "stdin line 1: 'x' is not a token id" <<<"$out" || fail "a bad token id: exit $code, $out"

# Exact resume of a translation run: dropout on, killed after its step-20 checkpoint.
train_args() {
  echo "$SRC/configs/reverse-synthetic.yaml --set run.dir=$1 --set runtime.threads=1 --set model.dropout=0.1" \
       "--set train.max_steps=60 --set checkpoint.every=20 --set train.eval_every=20 --set train.log_every=1"
}
tiny_train "$WORK/reference" >/dev/null 2>&1 || fail "reference run failed"
sigkill_resume "$WORK/killed" 20
[ "$killed_at" -lt 60 ] || fail "SIGKILL came too late to test anything (the run had finished)"
same_losses "$WORK/reference" "$WORK/killed" "translation run killed after checkpoint $killed_at"
echo PASS
