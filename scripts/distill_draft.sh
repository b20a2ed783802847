#!/usr/bin/env bash
# A draft model for speculative decoding, distilled from its target (as DistillSpec does): the target continues
# PROMPTS prompts cut from its own training text (the first 2 to 8 words of a line; greedily, or sampled at
# TEMPERATURE for a draft that serves sampled requests), `loom prepare` turns prompt + continuation into a corpus with
# the target's tokenizer, and a small GPT (DRAFT shape) trains on it, so that it learns what the target says rather
# than what the corpus says: `loom generate TARGET --draft OUT_DIR/draft` / `loom serve TARGET --draft ...`.
#   scripts/distill_draft.sh TARGET_RUN OUT_DIR
#   env: LOOM (build/loom), CORPUS (the target's training text: datasets/kjv/train.txt), PROMPTS (3000), TOKENS (100
#        new tokens a prompt), STEPS (600), DRAFT ("--set model.d_model=128 --set model.n_layers=2
#        --set model.n_heads=2"), TEMPERATURE (0: greedy continuations; a draft for sampled serving: the serving
#        temperature), THREADS (2)
# Steps already done in OUT_DIR (prompts.jsonl, continuations.jsonl, data/, draft/) are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: scripts/distill_draft.sh TARGET_RUN OUT_DIR" >&2; exit 2; }
target=$1 out=$2
LOOM=${LOOM:-build/loom}; CORPUS=${CORPUS:-datasets/kjv/train.txt}; PROMPTS=${PROMPTS:-3000}; TOKENS=${TOKENS:-100}
STEPS=${STEPS:-600}; THREADS=${THREADS:-2}; TEMPERATURE=${TEMPERATURE:-0}
DRAFT=${DRAFT:-"--set model.d_model=128 --set model.n_layers=2 --set model.n_heads=2"}
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
[ -f "$target/config.yaml" ] || { echo "$target: not a run directory (no config.yaml)" >&2; exit 1; }
[ -f "$CORPUS" ] || { echo "$CORPUS: no such file (set CORPUS to the target's training text)" >&2; exit 1; }
tokenizer=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["tokenizer"]["model"])' \
            "$target/config.yaml")
mkdir -p "$out"
start=$(date +%s)
if [ ! -s "$out/prompts.jsonl" ]; then
  python3 - "$CORPUS" "$PROMPTS" > "$out/prompts.jsonl" <<'PY'
import json, random, sys
lines = [l.split() for l in open(sys.argv[1], encoding="utf-8") if len(l.split()) >= 4]
rng = random.Random(0)
for seed, words in enumerate(rng.sample(lines, min(int(sys.argv[2]), len(lines)))):  # sampled: a seed each
    print(json.dumps({"prompt": " ".join(words[: rng.randint(2, 8)]), "seed": seed}))
PY
fi
if [ ! -s "$out/continuations.jsonl" ]; then
  "$LOOM" generate "$target" --input "$out/prompts.jsonl" --output "$out/continuations.jsonl.part" \
    --temperature "$TEMPERATURE" \
    --ignore-eos --max-new-tokens "$TOKENS" --max-batch 64 2>&1 | tail -1
  mv "$out/continuations.jsonl.part" "$out/continuations.jsonl"
fi
if [ ! -f "$out/data/manifest.json" ]; then
  python3 - "$out/prompts.jsonl" "$out/continuations.jsonl" > "$out/distill.txt" <<'PY'
import json, sys
prompts = [json.loads(l)["prompt"] for l in open(sys.argv[1], encoding="utf-8")]
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
assert len(prompts) == len(texts), "one continuation per prompt"
for p, t in zip(prompts, texts):
    print((p + " " + t).replace("\n", " ").strip())
PY
  "$LOOM" prepare "$out/distill.txt" --tokenizer "$tokenizer" --out "$out/data" 2>&1 | tail -1
fi
if [ ! -d "$out/draft/checkpoints" ]; then
  # shellcheck disable=SC2086
  "$LOOM" train "$target/config.yaml" --set run.dir="$out/draft" --set data.train="$out/data" \
    --set data.valid="$out/data" --set train.max_steps="$STEPS" --set checkpoint.every="$STEPS" \
    --set train.eval_every="$STEPS" --set schedule.warmup_steps=$((STEPS / 10)) $DRAFT > "$out/draft.log" 2>&1 \
    || { tail -5 "$out/draft.log" >&2; exit 1; }
  grep "valid loss" "$out/draft.log" | tail -1
fi
echo "draft in $out/draft ($(( $(date +%s) - start )) s); try: $LOOM generate $target --draft $out/draft --prompt ..."
