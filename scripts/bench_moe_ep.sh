#!/usr/bin/env bash
# Expert parallelism's exposed communication (issue 36): `loom bench` of an MoE config at DP=RANKS with ep 1 (every
# rank all experts), 2 and 4 (when they divide RANKS): tokens/s, step time and the milliseconds per step each rank
# spent blocked in the MoE layers' all-to-alls (StepPhases::ep_wait_s; the exchanges block, so all of it is
# exposed), beside the bytes `loom info` says one rank sends per step. One thread per rank.
#   scripts/bench_moe_ep.sh [CONFIG] [RANKS] [--set ...]      (default configs/moe-kjv.yaml, 4 ranks)
# `loom bench` trains on synthetic tokens: the vocabulary is VOCAB. env: LOOM (build/loom), VOCAB (8192), STEPS (8)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/moe-kjv.yaml}; ranks=${2:-4}; shift $(( $# > 2 ? 2 : $# ))
LOOM=${LOOM:-build/loom}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks")
data=(--set model.vocab_size="${VOCAB:-8192}")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-6s %10s %10s %16s %16s\n' "ep" "tokens/s" "step ms" "all-to-all ms" "all-to-all MB"
for ep in 1 2 4; do
  [ $((ranks % ep)) -eq 0 ] || continue
  args=("${data[@]}" --set parallel.dp="$ranks" --set parallel.ep="$ep" --set runtime.threads=1 "$@")
  "$LOOM" info "$config" "${args[@]}" --json > "$out/info.json"
  "${MPIRUN[@]}" "$LOOM" bench "$config" "${args[@]}" --steps "${STEPS:-8}" --warmup 2 --profile-steps 0 --json \
    2>/dev/null > "$out/bench.json"
  python3 - "$out" "$ep" <<'PY'
import json, sys
out, ep = sys.argv[1], sys.argv[2]
b, i = json.load(open(f"{out}/bench.json")), json.load(open(f"{out}/info.json"))
sent = i["communication"].get("all_to_all", 0) / 2**20
print(f"{ep:6s} {b['tokens_per_s']:10.0f} {b['step_ms_median']:10.0f} {b['exposed_ep_communication_ms']:16.1f} {sent:16.2f}")
PY
done
