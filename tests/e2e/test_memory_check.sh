#!/usr/bin/env bash
# A model too big for this machine is refused before it is built (train/memory_check.h): `loom train`
# exits 1 within seconds, naming the per-rank estimate of weights + gradients + AdamW state (the very
# numbers `loom info` prints) and the memory available (/proc/meminfo MemAvailable, shared by the node's
# ranks), instead of being OOM-killed. The same under mpirun with ZeRO-1 over 2 ranks. A small model with a
# micro-batch whose activations cannot fit is refused too, naming the keys that shrink it. The check reads the
# run plan (train/run_plan.h), resolved before anything is built: a vocabulary that only the tokenizer file
# gives (model.vocab_size 0) is counted, and under a pipeline every rank checks its own stage (here the last,
# the largest).
source "$(dirname "$0")/common.sh"
huge=(--set model.d_model=16384 --set model.n_layers=48 --set model.vocab_size=1024)
# MemAvailable in kB now: sampled before each refused run, as other tests running beside this one move it.
mem_available() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
check_refusal() {  # check_refusal LOG INFO_JSON RANKS MEM_AVAILABLE_BEFORE
  python3 - "$@" <<'PY'
import json, re, sys
log, info, ranks = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), int(sys.argv[3])
before = int(sys.argv[4]) * 1024
m = re.search(r"the model does not fit: each rank needs ([0-9.]+) GiB for weights, gradients and AdamW state "
              r"\(plus about ([0-9.]+) GiB of activations; `loom info` shows the estimate\) at dp (\d+) x cp 1 x tp 1 x pp 1"
              r"(?: with ZeRO-1)?, but ([0-9.]+) GiB is available to it", log)
assert m, log
memory = info["memory"]
needed = (memory["weights"] + memory["gradients"] + memory["optimizer"]) / 2**30
assert abs(float(m.group(1)) - needed) < 0.01, (m.group(1), needed)
assert abs(float(m.group(2)) - memory["activations"] / 2**30) < 0.01, (m.group(2), memory["activations"])
assert int(m.group(3)) == ranks
after = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:"))
# What the run read lies between the samples taken before and after it (within 10%).
low, high = min(before, after) / ranks, max(before, after) / ranks
assert 0.9 * low < float(m.group(4)) * 2**30 < 1.1 * high, (m.group(4), low / 2**30, high / 2**30)
print(f"{ranks} rank(s): refused {float(m.group(1)):.0f} GiB per rank with {float(m.group(4)):.1f} GiB available")
PY
}
start=$SECONDS
available=$(mem_available)
set +e
tiny_train "$WORK/huge" "${huge[@]}" > "$WORK/huge.log" 2>&1
code=$?
set -e
[ $code -eq 1 ] || fail "exit code $code, expected 1: $(tail -3 "$WORK/huge.log")"
[ $((SECONDS - start)) -lt 60 ] || fail "the refusal took $((SECONDS - start)) s"
"$LOOM" info "$SRC/tests/e2e/tiny.yaml" "${huge[@]}" --json > "$WORK/info1.json"
check_refusal "$WORK/huge.log" "$WORK/info1.json" 1 "$available" || fail "single-process refusal"
[ ! -e "$WORK/huge/checkpoints" ] || fail "a checkpoint directory appeared"

available=$(mem_available)
set +e
# shellcheck disable=SC2046
timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$LOOM" train $(tiny_args "$WORK/huge2") \
  "${huge[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch_size=0 > "$WORK/huge2.log" 2>&1
code=$?
set -e
[ $code -ne 0 ] && [ $code -ne 124 ] || fail "mpirun: exit code $code"
"$LOOM" info "$SRC/tests/e2e/tiny.yaml" "${huge[@]}" --set parallel.dp=2 --set parallel.zero=1 \
  --set train.micro_batch_size=0 --json > "$WORK/info2.json"
check_refusal "$WORK/huge2.log" "$WORK/info2.json" 2 "$available" || fail "two-rank refusal"
grep -q "with ZeRO-1" "$WORK/huge2.log" || fail "the ZeRO-1 layout is not named"

start=$SECONDS
set +e
tiny_train "$WORK/batch" --set train.batch_size=1048576 --set train.micro_batch_size=1048576 > "$WORK/batch.log" 2>&1
code=$?
set -e
[ $code -eq 1 ] && grep -q "the batch does not fit: .* train.micro_batch_size=1048576 sequences of data.seq_len=32 tokens" \
  "$WORK/batch.log" || fail "a micro-batch too big: exit $code, $(tail -3 "$WORK/batch.log")"
[ $((SECONDS - start)) -lt 60 ] || fail "the refusal took $((SECONDS - start)) s"
# model.vocab_size 0 resolved from tokenizer.model: GPT-2's ranks with a special token at id 1098000 make a
# 1.1M-token vocabulary whose tied embedding (36 GB with its gradient and AdamW state) does not fit, while the
# blocks alone would: refused in seconds, the total counting the embedding (loom info's), nothing built.
ranks=${LOOM_CACHE:-$HOME/.cache/loom}/gpt2.tiktoken
special='{"<|endoftext|>": 50256, "<|far|>": 1098000}'
head -50 "$KJV_DATA/train.txt" > "$WORK/verses.txt"
"$LOOM" tokenize --tokenizer "$ranks" --pattern gpt2 --special-tokens "$special" --out "$WORK/verses.bin" "$WORK/verses.txt" \
  >/dev/null 2>&1 || fail "loom tokenize with the 1.1M-token tokenizer"
wide=(--set model.vocab_size=0 --set tokenizer.model="$ranks" --set tokenizer.pattern=gpt2 "--set" "tokenizer.special_tokens=$special"
      --set data.train="$WORK/verses.bin" --set data.valid="$WORK/verses.bin" --set model.d_model=2048 --set model.n_heads=16)
start=$SECONDS
available=$(mem_available)
set +e
"$LOOM" train "$SRC/tests/e2e/tiny.yaml" --set run.dir="$WORK/wide" "${wide[@]}" > "$WORK/wide.log" 2>&1
code=$?
set -e
[ $code -eq 1 ] || fail "a tokenizer-sized vocabulary: exit code $code, expected 1: $(tail -3 "$WORK/wide.log")"
[ $((SECONDS - start)) -lt 60 ] || fail "the refusal took $((SECONDS - start)) s"
"$LOOM" info "$SRC/tests/e2e/tiny.yaml" "${wide[@]}" --json > "$WORK/wide.json"
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['parameters'] > 1_098_000 * 2048" "$WORK/wide.json" \
  || fail "loom info does not count the tokenizer's vocabulary"
check_refusal "$WORK/wide.log" "$WORK/wide.json" 1 "$available" || fail "tokenizer-sized vocabulary refusal"
grep -q "Train a smaller model" "$WORK/wide.log" || fail "the remedy is not named"

# A pipeline whose last stage is the largest (1 block, then 7 of 201M parameters): its ranks are refused,
# naming the stage, though the first stage fits; the job ends with that message.
start=$SECONDS
set +e
# shellcheck disable=SC2046
timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$LOOM" train $(tiny_args "$WORK/stages") \
  --set model.d_model=4096 --set model.n_heads=8 --set model.n_layers=8 --set parallel.pp=2 \
  --set "parallel.pp_layers=[1, 7]" --set model.vocab_size=1024 > "$WORK/stages.log" 2>&1
code=$?
set -e
[ $code -ne 0 ] && [ $code -ne 124 ] || fail "pipeline: exit code $code: $(tail -3 "$WORK/stages.log")"
[ $((SECONDS - start)) -lt 60 ] || fail "the pipeline refusal took $((SECONDS - start)) s"
grep -q "the model does not fit: .* at dp 1 x cp 1 x tp 1 x pp 2 on pipeline stage 1, but" "$WORK/stages.log" ||
  fail "the last stage is not the one refused: $(grep -m3 -i 'error\|fit' "$WORK/stages.log")"
! grep -q "pipeline stage 0, but" "$WORK/stages.log" || fail "the first stage, which fits, was refused"
[ ! -e "$WORK/stages/checkpoints" ] || fail "a checkpoint directory appeared"
echo PASS
