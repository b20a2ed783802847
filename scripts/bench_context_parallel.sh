#!/usr/bin/env bash
# Context-parallel memory benchmark (issue 22): for configs/llama-tiny.yaml (fp32, one sequence per step,
# synthetic tokens) at each sequence length and cp size, every rank's measured peak bytes in tensors during
# `loom bench` against `loom info`'s estimate, and the activations (peak minus the model states: weights,
# gradients, AdamW) relative to cp 1's; plus tokens/s and the exposed cp communication (time blocked on the
# ring's messages). A run that the memory check refuses before it starts is reported as such.
#   scripts/bench_context_parallel.sh [SEQ_LENS] [CP_SIZES] [--set ...]   (default "4096 8192 16384", "1 2 4")
set -euo pipefail
cd "$(dirname "$0")/.."
seq_lens=${1:-4096 8192 16384}; cp_sizes=${2:-1 2 4}; shift $(( $# > 2 ? 2 : $# ))
LOOM=${LOOM:-build/loom}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%6s %3s  %-26s %-26s %10s %8s %10s\n' seq cp "peak in tensors (MiB/rank)" "loom info (MiB/rank)" activations "tok/s" "cp wait"
for T in $seq_lens; do
  base_activations=
  for cp in $cp_sizes; do
    args=(configs/llama-tiny.yaml --set model.vocab_size=1024 --set precision.dtype=fp32 --set data.seq_len="$T"
          --set model.max_seq_len="$T" --set train.batch_size=1 --set train.micro_batch_size=0 --set parallel.cp="$cp"
          --set runtime.threads=1 "$@")
    "$LOOM" info "${args[@]}" --json > "$out/info.json"
    if ! "${MPIRUN[@]}" -np "$cp" "$LOOM" bench "${args[@]}" --steps 1 --warmup 1 --profile-steps 0 --json \
        > "$out/bench.json" 2> "$out/bench.log"; then
      reason=$(grep -o "does not fit[^;]*\|the batch does not fit[^.]*" "$out/bench.log" | head -1 || true)
      printf '%6s %3s  refused: %s\n' "$T" "$cp" "${reason:-$(tail -1 "$out/bench.log")}"
      continue
    fi
    line=$(python3 - "$out/info.json" "$out/bench.json" "${base_activations:-0}" <<'PY'
import json, sys
info = json.load(open(sys.argv[1]))
bench = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
m = info["memory"]
states = (m["weights"] + m["gradients"] + m["optimizer"]) / 2**20
peaks = [r["tensors_mb"] for r in bench["ranks"]]
estimate = bench["ranks"][0]["estimate_mb"]
activations = max(peaks) - states
base = float(sys.argv[3]) or activations
print(f"{max(peaks):.1f} {estimate:.1f} {activations:.1f} {activations / base:.2f} {bench['tokens_per_s']:.0f} "
      f"{bench['exposed_cp_communication_ms']:.0f}")
PY
)
    read -r peak estimate activations share tokens wait <<<"$line"
    [ -n "$base_activations" ] || base_activations=$activations
    printf '%6s %3s  %-26s %-26s %10s %8s %8s ms\n' "$T" "$cp" "$peak" "$estimate (x$(python3 -c "print(f'{$peak / $estimate:.2f}')"))" \
      "$activations MiB (${share}x)" "$tokens" "$wait"
  done
done
