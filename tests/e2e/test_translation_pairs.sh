#!/usr/bin/env bash
# Translation on the English-Spanish Bible pairs (the bible_mt_data fixture, vocabulary 2000) with a tiny
# encoder-decoder, fp32 and no dropout: token-based batches (train.batch_tokens: the pairs per step vary)
# shared out over DP=2 ranks, over 2 micro-batches, or over both with batches of 1-2 pairs (slices left
# empty), give the single-process losses within 1e-5; a mixture of two pair files counts its tokens by
# source and resumes bit for bit; a run
# killed after a checkpoint resumes to the uninterrupted losses bit for bit; `loom eval --split test`
# reports the corpus BLEU that sacrebleu (PyPI) computes from the translations it writes and the raw
# test.es; `loom translate` gives the same translations from text on stdin, and `loom generate --input` and
# `loom serve` through the inference engine give `loom translate --beam 1`'s.
source "$(dirname "$0")/common.sh"
: "${BIBLE_MT_DATA:?set BIBLE_MT_DATA to prepared English-Spanish data}"
D=$BIBLE_MT_DATA
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
train_args() { bible_tiny_args "$1"; }

tiny_train "$WORK/single" > "$WORK/single.log" 2>&1 || { cat "$WORK/single.log"; fail "single-process run"; }
python3 - "$WORK/single/metrics.jsonl" <<'PY' || fail "token batches"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
per_step = [b["tokens"] - a["tokens"] for a, b in zip(rows, rows[1:])]
print(f"target tokens per step: {per_step}")
assert len(set(per_step)) > 1, "token-based batches should vary in target tokens per step"
assert rows[-1]["loss"] < rows[0]["loss"], "the loss did not fall"
PY

# shellcheck disable=SC2046
"${MPIRUN[@]}" -np 2 "$LOOM" train $(train_args "$WORK/dp2") --set parallel.dp=2 > "$WORK/dp2.log" 2>&1 \
  || { cat "$WORK/dp2.log"; fail "DP=2 run"; }
same_losses_within "$WORK/single" "$WORK/dp2" "DP=2, pairs split between the ranks" 1e-5
tiny_train "$WORK/micro" --set train.micro_batch_size=4 > "$WORK/micro.log" 2>&1 || fail "micro-batch run"
same_losses_within "$WORK/single" "$WORK/micro" "2 micro-batches per step" 1e-5
# 200 padded tokens: one or two verse pairs per step for 4 slices (2 ranks x 2 micro-batches).
small=(--set train.batch_tokens=200 --set train.eval_every=0 --set checkpoint.every=0)
tiny_train "$WORK/small" "${small[@]}" > "$WORK/small.log" 2>&1 || fail "single-process run, small batches"
# shellcheck disable=SC2046
"${MPIRUN[@]}" -np 2 "$LOOM" train $(train_args "$WORK/small-dp2") --set parallel.dp=2 --set train.micro_batch_size=2 \
  "${small[@]}" > "$WORK/small-dp2.log" 2>&1 || { cat "$WORK/small-dp2.log"; fail "DP=2 run, small batches"; }
same_losses_within "$WORK/small" "$WORK/small-dp2" "DP=2 x 2 micro-batches, 1-2 pairs per step" 1e-5

# A mixture of two pair files (data.train: train.bin at weight 3, test.bin at 1): each step's batch comes
# from one of them, metrics.jsonl counts tokens_by_source (summing to the run's tokens), and the run resumed
# from its step-5 checkpoint writes the uninterrupted losses bit for bit.
mix=(--set "data.train=[{path: $D/train.bin, weight: 3}, {path: $D/test.bin, weight: 1}]" --set train.eval_every=0)
tiny_train "$WORK/mix" "${mix[@]}" > "$WORK/mix.log" 2>&1 || { tail "$WORK/mix.log"; fail "mixture of pair files"; }
cp -r "$WORK/mix" "$WORK/mix-resumed" && rm -r "$WORK/mix-resumed/checkpoints/10"
tiny_train "$WORK/mix-resumed" "${mix[@]}" > "$WORK/mix-resumed.log" 2>&1 || fail "mixture of pair files, resumed"
grep -q "resumed from .*/checkpoints/5" "$WORK/mix-resumed.log" || fail "the mixture run did not resume from step 5"
python3 - "$WORK/mix" "$WORK/mix-resumed" "$D" <<'PY' || fail "mixture of pair files: tokens_by_source or resume"
import json, sys
runs = [[r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"] for d in sys.argv[1:3]]
last = runs[0][-1]
by_source = last["tokens_by_source"]
assert sorted(by_source) == sorted(f"{sys.argv[3]}/{f}.bin" for f in ("train", "test")), by_source
assert all(v > 0 for v in by_source.values()) and sum(by_source.values()) == last["tokens"], (by_source, last["tokens"])
uninterrupted = {r["step"]: r["loss"] for r in runs[0]}
resumed = {r["step"]: r["loss"] for r in runs[1]}  # steps 6-10 written again after the resume
assert sorted(resumed) == list(range(1, 11)) and resumed == uninterrupted, (uninterrupted, resumed)
print(f"mixture of pair files: tokens_by_source {by_source} of {last['tokens']}; resumed at step 5 bit for bit")
PY

sigkill_resume "$WORK/killed" 5
[ "$killed_at" -lt 10 ] || fail "SIGKILL came too late to test anything (the run had finished)"
same_losses "$WORK/single" "$WORK/killed" "translation run on pair files killed after checkpoint $killed_at"

"$LOOM" eval "$WORK/single" --split test --beam 2 --translations "$WORK/test.hyp" --json > "$WORK/test.json" \
  || fail "loom eval --split test"
python3 - "$WORK/test.json" "$WORK/test.hyp" "$D/test.es" <<'PY' || fail "loom eval's BLEU is not sacrebleu's"
import json, sys
import sacrebleu
r = json.load(open(sys.argv[1]))
hyps = open(sys.argv[2]).read().split("\n")[:-1]
refs = open(sys.argv[3]).read().split("\n")[:-1]
assert r["split"] == "test" and r["sentences"] == 367 == len(hyps) == len(refs), (r, len(hyps))
expected = sacrebleu.corpus_bleu(hyps, [refs]).score
print(f"test: loss {r['loss']:.4f}, BLEU {r['bleu']:.4f} (sacrebleu on the written translations: {expected:.4f})")
assert abs(r["bleu"] - expected) < 0.01, (r["bleu"], expected)
PY
# The same translations line for line, though batched differently (eval: 16 sources in file order; translate:
# longest first), which changes only the last bits of the numbers (tests/unit/test_beam_search.cpp: a
# sentence's translation does not depend on its batch neighbours). This 10-step model repeats one word to
# the length limit, which differs by source length: a line out of order shows.
head -40 "$D/test.en" | "$LOOM" translate "$WORK/single" --beam 2 > "$WORK/translate.hyp" || fail "loom translate"
same=$(paste -d '\t' <(head -40 "$WORK/test.hyp") "$WORK/translate.hyp" | awk -F '\t' '$1 == $2' | wc -l)
echo "translate: $same of 40 lines equal loom eval's"
[ "$same" -eq 40 ] || fail "loom translate and loom eval disagree on $((40 - same)) of 40 lines"

# The inference engine translates too (serve/served_model.h): greedy `loom generate --input` on 16 sources of 33 to
# 85 tokens, all in one batch (rows of different source lengths in one forward) in a pool of 25 blocks of 16
# positions (one sequence of the full context: some are preempted and recomputed), gives `loom translate --beam 1`'s
# text line for line; `loom serve` answers a completion and a stream with the same text, a max_tokens past the
# translation limit with a 400 naming it and chat completions with a 404; what the engine does for GPTs alone is
# refused naming the flag; --dry-run notes the encoded source's bytes per token.
sed -n '41,56p' "$D/test.en" > "$WORK/engine.en"
"$LOOM" translate "$WORK/single" --beam 1 < "$WORK/engine.en" > "$WORK/engine.beam1" || fail "loom translate --beam 1"
python3 -c 'import json, sys; [print(json.dumps({"prompt": l.rstrip("\n")})) for l in open(sys.argv[1])]' \
  "$WORK/engine.en" > "$WORK/engine.jsonl"
"$LOOM" generate "$WORK/single" --input "$WORK/engine.jsonl" --output "$WORK/engine.out" --temperature 0 \
  --max-batch 16 --block-size 16 --kv-blocks 25 2> "$WORK/engine.log" || fail "loom generate --input: $(cat "$WORK/engine.log")"
cat "$WORK/engine.log"
preempted=$(grep -oE '[0-9]+ preemptions' "$WORK/engine.log" | cut -d' ' -f1)
[ "${preempted:-0}" -gt 0 ] || fail "no sequence was preempted: $(cat "$WORK/engine.log")"
python3 - "$WORK/engine.out" "$WORK/engine.beam1" <<'PY' || fail "the engine's translations are not loom translate's"
import json, sys
got = [json.loads(l)["text"] for l in open(sys.argv[1])]
want = open(sys.argv[2]).read().split("\n")[:-1]
assert len(got) == len(want) == 16, (len(got), len(want))
bad = [i for i in range(16) if got[i] != want[i]]
assert not bad, [(i, got[i], want[i]) for i in bad]
print(f"engine: 16 of 16 translations equal loom translate --beam 1's ({len(set(want))} distinct)")
PY
for flag in --prefix-caching "--speculate ngram" --sequential; do
  set +e
  # shellcheck disable=SC2086
  out=$("$LOOM" generate "$WORK/single" --input "$WORK/engine.jsonl" --output "$WORK/x.out" $flag 2>&1); code=$?
  set -e
  [ $code -eq 2 ] && grep -q -- "${flag%% *}" <<<"$out" || fail "$flag on a translation run: exit $code, $out"
done
set +e
out=$("$LOOM" generate "$WORK/single" --prompt "In the beginning" 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q -- "--input" <<<"$out" || fail "--prompt on a translation run: exit $code, $out"
set +e
out=$("${MPIRUN[@]}" -np 2 "$LOOM" generate "$WORK/single" --input "$WORK/engine.jsonl" --output "$WORK/x.out" \
  --set parallel.tp=2 2>&1); code=$?
set -e
[ $code -ne 0 ] && grep -q -- "--set parallel.tp=2: loom generate serves an encoder-decoder run whole" <<<"$out" \
  || fail "--set parallel.tp=2 on a translation run: exit $code, $out"
dry=$("$LOOM" serve "$WORK/single" --dry-run --kv-mb 1) || fail "serve --dry-run: $dry"
grep -q "bytes per source token" <<<"$dry" || fail "--dry-run says nothing of the encoded sources: $dry"
log=$WORK/serve-mt.log
timeout 120 "$LOOM" serve "$WORK/single" --port 0 --max-batch 8 > "$log" 2>&1 &
pid=$!
port=$(served_port "$log" $pid) || exit 1
timeout 60 python3 - "$port" "$WORK/engine.en" "$WORK/engine.beam1" <<'PY' || fail "loom serve of a translation run ($(tail -3 "$log"))"
import http.client, json, sys
port = int(sys.argv[1])
src = open(sys.argv[2]).read().split("\n")[:-1]
ref = open(sys.argv[3]).read().split("\n")[:-1]
def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode()
status, body = post("/v1/completions", {"prompt": src[0], "temperature": 0})
assert status == 200, (status, body)
assert json.loads(body)["choices"][0]["text"] == ref[0], (body, ref[0])
status, body = post("/v1/completions", {"prompt": src[5], "temperature": 0, "stream": True})
assert status == 200, (status, body)
pieces = [json.loads(l[6:]) for l in body.split("\n") if l.startswith("data: {")]
streamed = "".join(p["choices"][0]["text"] for p in pieces)
assert streamed == ref[5] and len(pieces) > 1, (streamed, ref[5], len(pieces))
status, body = post("/v1/completions", {"prompt": src[0], "max_tokens": 100000})
assert status == 400 and "max_tokens" in body, (status, body)
status, body = post("/v1/chat/completions", {"messages": [{"role": "user", "content": src[0]}]})
assert status == 404 and "translates" in body, (status, body)
print("serve: a completion and a stream equal loom translate's; 400 and 404 for what it does not take")
PY
kill -TERM $pid; wait $pid || fail "loom serve of the translation run did not stop cleanly"
pid=

set +e
out=$("$LOOM" eval "$WORK/single" --split test --set data.test= 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "data.test" <<<"$out" || fail "--split test without data.test: exit $code, $out"
echo PASS
