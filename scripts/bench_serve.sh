#!/usr/bin/env bash
# Serving throughput (issue 35): the inference engine (`loom generate --input`, continuous batching over a paged
# KV cache) at 1, 8, 32 and 64 concurrent requests (--max-batch) against sequential single-prompt generation
# (--sequential: one prompt at a time on the contiguous cache), on the same prompts and model: by default a
# one-step run of configs/gpt-kjv.yaml (its shape, nearly random weights), greedy, end-of-sequence ignored so every
# prompt generates TOKENS tokens.
#   scripts/bench_serve.sh [RUN_DIR]      env: LOOM (build/loom), KJV (datasets/kjv), PROMPTS (64), TOKENS (64)
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}; KJV=${KJV:-datasets/kjv}; PROMPTS=${PROMPTS:-64}; TOKENS=${TOKENS:-64}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=${1:-}
if [ -z "$run" ]; then
  run=$out/run
  "$LOOM" train configs/gpt-kjv.yaml --set run.dir="$run" --set train.max_steps=1 --set train.batch_size=4 \
    --set data.train="$KJV/train.bin" --set data.valid="$KJV/valid.bin" --set tokenizer.model="$KJV/tokenizer.model" \
    >/dev/null 2>&1
fi
# The first words of the validation verses, 2 to 12 of them.
python3 - "$KJV/valid.txt" "$PROMPTS" > "$out/prompts.jsonl" <<'PY'
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
for i in range(int(sys.argv[2])):
    print(json.dumps({"prompt": " ".join(lines[i % len(lines)][: 2 + i % 11])}))
PY
gen() { "$LOOM" generate "$run" --input "$out/prompts.jsonl" --output "$out/$1.jsonl" --temperature 0 \
          --max-new-tokens "$TOKENS" --ignore-eos "${@:2}" 2>&1 >/dev/null | tail -1; }
rate() { sed -E 's/.*: ([0-9.]+) tokens\/s.*/\1/' <<<"$1"; }
sequential=$(gen sequential --sequential)
printf '%-28s %10s %8s  %s\n' "mode ($PROMPTS prompts x $TOKENS tokens)" "tokens/s" "speedup" "peak KV blocks in use"
printf '%-28s %10.1f %8s\n' "sequential generate" "$(rate "$sequential")" "1.00x"
for batch in 1 8 32 64; do
  line=$(gen "engine-$batch" --max-batch "$batch")
  cmp -s "$out/engine-$batch.jsonl" "$out/sequential.jsonl" || echo "note: engine at $batch differs from sequential" >&2
  printf '%-28s %10.1f %7.2fx  %s\n' "engine, $batch concurrent" "$(rate "$line")" \
    "$(python3 -c "print($(rate "$line") / $(rate "$sequential"))")" "$(sed -E 's/.*peak ([0-9]+) of.*/\1/' <<<"$line")"
done
context=$("$LOOM" config "$run/config.yaml" --get model.max_seq_len)
echo "(a block holds 16 positions; a contiguous cache of model.max_seq_len=$context positions takes" \
     "$(( (context + 15) / 16 )) blocks' memory a sequence)"
