#!/usr/bin/env bash
# A small Mixture of Experts against the dense model of the same active FLOPs, at the same token budget
# (issue 36's comparison): configs/moe-kjv.yaml (8 experts of SwiGLU d_ff 256 in each of 4 blocks, top-2) and
# its dense twin (the same model with one SwiGLU MLP of d_ff 512 = top_k x the expert's: the same multiply-adds
# per token, the router's d_model x 8 aside), both trained on the same KJV batches for the same steps, then
# each run's validation curve, final validation loss, total and active parameters side by side and both curves
# drawn by scripts/plot_run.py (OUT_DIR/curves.png).
# usage: scripts/compare_moe_dense.sh [STEPS] [OUT_DIR] [--set KEY=VALUE ...]
#   STEPS    the step budget of both runs (default 800, the config's own)
#   OUT_DIR  where the two runs go (default runs/compare-moe-dense); a finished run there is not trained again
#   --set    passed to both trainings (for example runtime.threads=1 to run the two side by side)
#   ONLY=moe or ONLY=dense trains that one (the table shows the runs found in OUT_DIR).
# Data: datasets/kjv (scripts/prepare_kjv.sh), or KJV_DATA=DIR; LOOM=path of the binary.
set -euo pipefail
steps=${1:-800}
out=${2:-runs/compare-moe-dense}
shift $(( $# < 2 ? $# : 2 ))
root=$(cd "$(dirname "$0")/.." && pwd)
loom=${LOOM:-$root/build/loom}
data=${KJV_DATA:-datasets/kjv}
[ -f "$data/train.bin" ] || { echo "error: no $data/train.bin: run scripts/prepare_kjv.sh or set KJV_DATA" >&2; exit 1; }
mkdir -p "$out"
common=(--set train.max_steps="$steps" --set data.train="$data/train.bin" --set data.valid="$data/valid.bin"
        --set tokenizer.model="$data/tokenizer.model" --set train.eval_every=100 --set train.eval_batches=8
        --set checkpoint.every="$steps")
dense=(--set model.moe.num_experts=0 --set model.d_ff=512)
for name in ${ONLY:-moe dense}; do
  run="$out/$name"
  extra=(); [ "$name" = dense ] && extra=("${dense[@]}")
  "$loom" info "$root/configs/moe-kjv.yaml" "${common[@]}" "${extra[@]}" --set run.dir="$run" "$@" --json >"$run.info.json"
  last=$(python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if '\"train\"' in l]; print(r[-1]['step'] if r else 0)" "$run/metrics.jsonl" 2>/dev/null || echo 0)
  if [ "$last" -lt "$steps" ]; then
    echo "training $name for $steps steps -> $run (log: $run.log)"
    "$loom" train "$root/configs/moe-kjv.yaml" "${common[@]}" "${extra[@]}" --set run.dir="$run" "$@" \
      >"$run.log" 2>&1 || { tail -5 "$run.log"; exit 1; }
  fi
done
python3 - "$out" "$steps" <<'PY'
import json, sys
out, steps = sys.argv[1], sys.argv[2]
print(f"KJV, validation loss every 100 steps of the same batches ({steps} steps):")
rows = {}
for name, label in (("moe", "MoE 8 experts top-2 (moe-kjv)"), ("dense", "dense, d_ff 512")):
    try:
        info = json.load(open(f"{out}/{name}.info.json"))
        valid = [(r["step"], r["loss"]) for r in map(json.loads, open(f"{out}/{name}/metrics.jsonl")) if r["split"] == "valid"]
    except (OSError, ValueError):
        continue
    rows[name] = valid
    print(f"  {label:32s} parameters {info['parameters']:,} (active {info['active_parameters']:,}, "
          f"{info['flops_per_token'] / 1e6:.2f} MFLOP/token)  valid loss {valid[-1][1]:.3f} at step {valid[-1][0]}")
if len(rows) == 2:
    for (s, m), (_, d) in zip(rows["moe"], rows["dense"]):
        print(f"    step {s:5d}  moe {m:.3f}  dense {d:.3f}  difference {d - m:+.3f}")
PY
python3 "$root/scripts/plot_run.py" --out "$out/curves.png" "$out"/moe "$out"/dense >/dev/null 2>&1 || true
