#!/usr/bin/env bash
# Speculative decoding (issue 35): trains a target like configs/gpt-kjv.yaml (wider and deeper so that its forward
# dominates, TARGET_STEPS steps) and a 2-layer draft on the same data and tokenizer (DRAFT_STEPS steps), then
# measures single-stream decoding (`loom generate --input --max-batch 1`, greedy, end-of-sequence ignored) alone,
# with --draft (k fixed and adaptive) and with --speculate ngram: tokens/s, the speedup, the acceptance rate, and
# that every greedy output equals the target's alone; then the same sampled at temperature 0.8. Runs already trained in WORK_DIR are reused.
#   scripts/bench_speculative.sh [WORK_DIR]
#   env: LOOM (build/loom), KJV (datasets/kjv), PROMPTS (4), TOKENS (96), K (4), TARGET_STEPS (80), DRAFT_STEPS (100),
#        TARGET ("--set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8"), THREADS (2), REPEAT (3:
#        each rate is the best of 3 runs)
# Both train on 8 windows a step (train.batch_size=8) so that the whole script fits in about 6 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}; KJV=${KJV:-datasets/kjv}; PROMPTS=${PROMPTS:-4}; TOKENS=${TOKENS:-96}; K=${K:-4}
TARGET_STEPS=${TARGET_STEPS:-80}; DRAFT_STEPS=${DRAFT_STEPS:-100}; THREADS=${THREADS:-2}; REPEAT=${REPEAT:-3}
TARGET=${TARGET:-"--set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8"}
work=${1:-$(mktemp -d)}
mkdir -p "$work"
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
data="--set data.train=$KJV/train.bin --set data.valid=$KJV/valid.bin --set tokenizer.model=$KJV/tokenizer.model"
common="--set train.batch_size=8 --set model.dropout=0 --set train.eval_every=100000 --set train.log_every=50 --set runtime.device=cpu"
train() {  # DIR STEPS ARGS...
  local dir=$1 steps=$2; shift 2
  [ -d "$dir/checkpoints" ] && return 0
  # shellcheck disable=SC2086
  "$LOOM" train configs/gpt-kjv.yaml --set run.dir="$dir" $data $common --set train.max_steps="$steps" \
    --set checkpoint.every="$steps" --set schedule.warmup_steps=$((steps / 10)) "$@" > "$dir.log" 2>&1
}
start=$(date +%s)
# shellcheck disable=SC2086
train "$work/target" "$TARGET_STEPS" $TARGET
train "$work/draft" "$DRAFT_STEPS" --set model.n_layers=2
echo "trained in $(( $(date +%s) - start )) s: target $(grep -o 'n_layers: [0-9]*\|d_model: [0-9]*' "$work/target/config.yaml" | tr '\n' ' ')," \
     "draft $(grep -o 'n_layers: [0-9]*\|d_model: [0-9]*' "$work/draft/config.yaml" | tr '\n' ' ')"
python3 - "$KJV/valid.txt" "$PROMPTS" > "$work/prompts.jsonl" <<'PY'
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
for i in range(int(sys.argv[2])):
    print(json.dumps({"prompt": " ".join(lines[(7 * i) % len(lines)][: 3 + i % 8])}))
PY
printf '%-36s %10s %8s %12s\n' "single stream ($PROMPTS prompts x $TOKENS tokens)" "tokens/s" "speedup" "accepted"
base=
run() {  # LABEL NAME TEMPERATURE ARGS...: the best of REPEAT runs (the machine is shared: rates move run to run)
  local label=$1 name=$2 temperature=$3 line seconds tokens rate=0 accepted; shift 3
  for _ in $(seq "$REPEAT"); do
    line=$("$LOOM" generate "$work/target" --input "$work/prompts.jsonl" --output "$work/$name.jsonl" \
             --temperature "$temperature" --max-new-tokens "$TOKENS" --ignore-eos --max-batch 1 "$@" 2>&1 >/dev/null \
             | tail -1)
    seconds=$(sed -E 's/.* tokens in ([0-9.e+-]+) s.*/\1/' <<<"$line")
    tokens=$(sed -E 's/.* prompts, ([0-9]+) tokens.*/\1/' <<<"$line")
    rate=$(python3 -c "print(max($rate, $tokens / $seconds))")
  done
  [ "$name" != alone ] && [ "$name" != sampled ] || base=$rate
  accepted=$(grep -oE '[0-9]+ of [0-9]+ drafted tokens accepted \([0-9.]+%\)' <<<"$line" | sed -E 's/.*\(([0-9.]+)%\)/\1%/' || true)
  printf '%-36s %10.1f %7.2fx %12s\n' "$label" "$rate" "$(python3 -c "print($rate / $base)")" "${accepted:--}"
  if [ "$temperature" = 0 ] && [ "$name" != alone ] && ! python3 - "$work/alone.jsonl" "$work/$name.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["text"] for l in open(p)] for p in sys.argv[1:3])
same = sum(x == y for x, y in zip(a, b))
print(f"  outputs equal to the target's alone: {same} of {len(a)}")
sys.exit(0 if same == len(a) else 1)
PY
  then echo "  (greedy outputs differ: see $work)"; fi
}
run "target alone" alone 0
run "--draft (2 layers), k=$K" draft 0 --draft "$work/draft" --speculate-k "$K"
run "--draft, k adaptive in 1..$K" adaptive 0 --draft "$work/draft" --speculate-k "$K" --speculate-adaptive
run "--speculate ngram, k=$K" ngram 0 --speculate ngram --speculate-k "$K"
# Sampled (temperature 0.8): the rejection rule's acceptance where greedy loops do not inflate it; the outputs are
# other draws from the same distribution, so they are not compared.
run "target alone, temperature 0.8" sampled 0.8
run "--draft, k=$K, temperature 0.8" draft-sampled 0.8 --draft "$work/draft" --speculate-k "$K"
run "--draft, k adaptive, temperature 0.8" adaptive-sampled 0.8 --draft "$work/draft" --speculate-k "$K" \
  --speculate-adaptive
echo "total $(( $(date +%s) - start )) s; runs in $work"
