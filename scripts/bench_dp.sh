#!/usr/bin/env bash
# Data-parallel benchmark on this machine (issue 5): for a config,
#  1. all-reduce of the model's gradient bytes: one plain MPI_Allreduce vs loom's buckets (loom comm-bench);
#  2. `loom bench` single-process (all cores) vs DP=N under mpirun (cores / N threads per rank);
#  3. the share of all-reduce time hidden behind backward: 1 - (time a DP step waited for gradients after
#     backward) / (time the same all-reduce takes on its own).
#   scripts/bench_dp.sh [CONFIG] [RANKS] [--set ...]      (default configs/gpt-kjv.yaml, 2 ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/gpt-kjv.yaml}; ranks=${2:-2}; shift $(( $# > 2 ? 2 : $# ))
LOOM=${LOOM:-build/loom}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks")
cores=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--steps "${STEPS:-12}" --warmup 3 --profile-steps 0 --json "$@")
"$LOOM" info "$config" "$@" --json > "$out/info.json"
params=$(python3 -c "import json; print(json.load(open('$out/info.json'))['parameters'])")
grad_mb=$(python3 -c "print($params * 4 / 2**20)")
bucket_mb=$("$LOOM" config "$config" "$@" --get parallel.bucket_mb)
"${MPIRUN[@]}" "$LOOM" comm-bench --mb "$grad_mb" --bucket-mb "$bucket_mb" --iterations 20 --json > "$out/comm.json"
"$LOOM" bench "$config" --set runtime.threads="$cores" "${common[@]}" 2>/dev/null > "$out/single.json"
"${MPIRUN[@]}" "$LOOM" bench "$config" --set parallel.dp="$ranks" --set runtime.threads=$((cores / ranks > 0 ? cores / ranks : 1)) \
  "${common[@]}" 2>/dev/null > "$out/dp.json"
python3 - "$out" "$ranks" "$grad_mb" <<'PY'
import json, sys
out, ranks, grad_mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
comm = json.load(open(f"{out}/comm.json"))["sizes"][0]
single, dp = json.load(open(f"{out}/single.json")), json.load(open(f"{out}/dp.json"))
print(f"gradients: {grad_mb:.1f} MB fp32 in {comm['buckets']} bucket(s)")
print(f"all-reduce on its own: MPI_Allreduce {comm['plain_ms']:.2f} ms ({comm['plain_busbw_gbps']:.2f} GB/s bus), "
      f"loom buckets {comm['bucketed_ms']:.2f} ms ({comm['bucketed_busbw_gbps']:.2f} GB/s bus)")
print(f"single process: {single['tokens_per_s']:.0f} tok/s, step {single['step_ms_median']:.0f} ms")
print(f"DP={ranks}:        {dp['tokens_per_s']:.0f} tok/s, step {dp['step_ms_median']:.0f} ms "
      f"-> {dp['tokens_per_s'] / single['tokens_per_s']:.2f}x the single process")
wait = dp["phases_ms"]["gradient_sync"]
hidden = max(0.0, 1 - wait / comm["bucketed_ms"])
print(f"waited for gradients after backward: {wait:.2f} ms per step -> {100 * hidden:.0f}% of the all-reduce hidden")
PY
