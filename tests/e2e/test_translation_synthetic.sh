#!/usr/bin/env bash
# The encoder-decoder end to end on the synthetic reversal task (configs/reverse-synthetic.yaml):
# training reaches >= 99% exact match on the 500 held-out pairs with greedy decoding and with beam 4
# (`loom eval`), `loom translate` reverses what it is given on stdin (in order, empty lines kept), so does
# `loom generate --input` through the inference engine (continuous batching, preemptions), and a
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

# The inference engine (serve/served_model.h): greedy `loom generate --input` (prompts of token ids: the run has no
# tokenizer) on 16 sources of 2 to 10 tokens, all in one batch in a pool of 24 blocks of 2 positions (some sequences
# preempted and recomputed), reverses every one, as `loom translate --beam 1` does, line for line.
python3 - "$WORK/engine.src" "$WORK/engine.jsonl" <<'PY'
import json, random, sys
random.seed(1)
with open(sys.argv[1], "w") as src, open(sys.argv[2], "w") as jsonl:
    for _ in range(16):
        line = " ".join(str(random.randint(3, 23)) for _ in range(random.randint(2, 10)))
        src.write(line + "\n")
        jsonl.write(json.dumps({"prompt": line}) + "\n")
PY
"$LOOM" translate "$WORK/reverse" --beam 1 < "$WORK/engine.src" > "$WORK/engine.beam1" || fail "loom translate --beam 1"
"$LOOM" generate "$WORK/reverse" --input "$WORK/engine.jsonl" --output "$WORK/engine.out" --temperature 0 \
  --max-batch 16 --block-size 2 --kv-blocks 24 2> "$WORK/engine.log" || fail "loom generate --input: $(cat "$WORK/engine.log")"
cat "$WORK/engine.log"
preempted=$(grep -oE '[0-9]+ preemptions' "$WORK/engine.log" | cut -d' ' -f1)
[ "${preempted:-0}" -gt 0 ] || fail "no sequence was preempted: $(cat "$WORK/engine.log")"
python3 - "$WORK/engine.src" "$WORK/engine.out" "$WORK/engine.beam1" <<'PY' || fail "the engine's translations"
import json, sys
src = open(sys.argv[1]).read().split("\n")[:-1]
got = [json.loads(l)["text"] for l in open(sys.argv[2])]
want = open(sys.argv[3]).read().split("\n")[:-1]
assert len(src) == len(got) == len(want) == 16, (len(src), len(got), len(want))
assert got == want, [(s, g, w) for s, g, w in zip(src, got, want) if g != w]
reversed_ = sum(" ".join(s.split()[::-1]) == g for s, g in zip(src, got))
print(f"engine: 16 of 16 equal loom translate --beam 1's, {reversed_} of 16 reversed")
assert reversed_ >= 15, reversed_
PY

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
