#!/usr/bin/env bash
# The Vaswani Transformer (configs/transformer-kjv-es.yaml) against the T5 of the same size and budget
# (configs/t5-kjv-es.yaml: relative position bias, RMSNorm, no biases, unscaled attention, scaled tied head)
# on the English -> Spanish Bible: both trained for the same number of steps on the same token-based batches,
# then each run's test loss and sacreBLEU-exact BLEU (beam 5, the configs' decode settings) side by side.
# usage: scripts/compare_t5_vaswani.sh [STEPS] [OUT_DIR] [--set KEY=VALUE ...]
#   STEPS    the step budget of both runs (default 2000, the configs' own: about an hour each on 2 cores)
#   OUT_DIR  where the two runs go (default runs/compare-t5-vaswani); a finished run there is evaluated again
#   --set    passed to both trainings (for example runtime.threads=1 to run two of these side by side)
#   ONLY=t5 or ONLY=transformer trains and evaluates that one (the table shows the runs found in OUT_DIR).
# Data: datasets/bible-mt (scripts/prepare_bible_mt.sh), or BIBLE_MT_DATA=DIR; LOOM=path of the binary.
set -euo pipefail
steps=${1:-2000}
out=${2:-runs/compare-t5-vaswani}
shift $(( $# < 2 ? $# : 2 ))
root=$(cd "$(dirname "$0")/.." && pwd)
loom=${LOOM:-$root/build/loom}
data=${BIBLE_MT_DATA:-datasets/bible-mt}
[ -f "$data/train.bin" ] || { echo "error: no $data/train.bin: run scripts/prepare_bible_mt.sh or set BIBLE_MT_DATA" >&2; exit 1; }
mkdir -p "$out"
for name in ${ONLY:-transformer t5}; do
  run="$out/$name"
  if [ "$(python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if '\"train\"' in l]; print(r[-1]['step'] if r else 0)" "$run/metrics.jsonl" 2>/dev/null || echo 0)" -lt "$steps" ]; then
    echo "training $name for $steps steps -> $run (log: $run.log)"
    "$loom" train "$root/configs/$name-kjv-es.yaml" --set run.dir="$run" --set train.max_steps="$steps" \
      --set data.train="$data/train.bin" --set data.valid="$data/valid.bin" --set data.test="$data/test.bin" \
      --set tokenizer.model="$data/tokenizer.model" --set train.eval_every="$steps" --set checkpoint.every="$steps" "$@" \
      >"$run.log" 2>&1 || { tail -5 "$run.log"; exit 1; }
  fi
  "$loom" eval "$run" --split test --json >"$run.test.json"
done
python3 - "$out" "$steps" <<'PY'
import json, sys
out, steps = sys.argv[1], sys.argv[2]
print(f"English -> Spanish Bible, test split, beam 5, after {steps} steps of the same batches:")
for name, label in (("transformer", "Vaswani (transformer-kjv-es)"), ("t5", "T5 (t5-kjv-es)")):
    try:
        r = json.load(open(f"{out}/{name}.test.json"))
    except (OSError, ValueError):
        continue
    print(f"  {label:30s} test loss {r['loss']:.3f}  BLEU {r['bleu']:.2f}")
PY
