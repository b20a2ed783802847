#!/usr/bin/env bash
# loom against PyTorch eager on the same model, init, optimizer, dtype and thread count, in the same run:
# `loom bench` and scripts/bench_pytorch.py alternate for several rounds per dtype (so machine noise hits
# both alike), then the median tokens/s of each and their ratio are printed, and tokens per CPU second
# (all threads), which a shared machine disturbs far less than wall-clock time. Prints the load average
# too: on a shared machine, read the ratios, not the absolute numbers.
# A dtype is fp32, bf16 (autocast over fp32 weights) or bf16-params (precision.param_dtype=bf16: bf16
# weights over an fp32 master copy, on both sides).
#   scripts/bench_vs_pytorch.sh [--config configs/bench-gpt.yaml] [--rounds 5] [--steps 10] [--warmup 3]
#                               [--dtypes "bf16 bf16-params fp32"] [--loom build/loom] [--set key=value ...]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
config=$SRC/configs/bench-gpt.yaml rounds=5 steps=10 warmup=3 dtypes="bf16 bf16-params fp32" loom=${LOOM:-$SRC/build/loom}
sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --loom) loom=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_vs_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$loom" ] || { echo "bench_vs_pytorch.sh: $loom is not built (cmake --build build)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-vs-pytorch.XXXXXX")
trap 'rm -rf "$out"' EXIT

echo "config $config, $rounds rounds of $steps timed steps ($warmup warm-up), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for dtype in $dtypes; do
  case $dtype in
    bf16-params) precision=(--set precision.dtype=bf16 --set precision.param_dtype=bf16) ;;
    fp32|bf16) precision=(--set precision.dtype="$dtype" --set precision.param_dtype=fp32) ;;
    *) echo "bench_vs_pytorch.sh: dtype $dtype is not one of fp32, bf16, bf16-params" >&2; exit 2 ;;
  esac
  for round in $(seq "$rounds"); do
    "$loom" bench "$config" "${sets[@]}" "${precision[@]}" --steps "$steps" --warmup "$warmup" --profile-steps 0 \
      --json 2>/dev/null >> "$out/loom-$dtype.jsonl"
    python3 "$SRC/scripts/bench_pytorch.py" "$config" "${sets[@]}" "${precision[@]}" --steps "$steps" \
      --warmup "$warmup" --json --loom "$loom" >> "$out/pytorch-$dtype.jsonl"
    echo "  $dtype round $round: loom $(tail -1 "$out/loom-$dtype.jsonl" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"]))') tok/s," \
         "pytorch $(tail -1 "$out/pytorch-$dtype.jsonl" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"]))') tok/s"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" $dtypes <<'PY'
import json, statistics, sys
out, dtypes = sys.argv[1], sys.argv[2:]
print(f"{'dtype':11} {'loom tok/s':>11} {'pytorch tok/s':>14} {'ratio':>6} {'per round':>16}"
      f" {'loom tok/cpu-s':>15} {'pytorch tok/cpu-s':>18} {'ratio':>6}  loom MFU")
for dtype in dtypes:
    loom = [json.loads(l) for l in open(f"{out}/loom-{dtype}.jsonl")]
    torch = [json.loads(l) for l in open(f"{out}/pytorch-{dtype}.jsonl")]
    lt, pt = [r["tokens_per_s"] for r in loom], [r["tokens_per_s"] for r in torch]
    per_round = [a / b for a, b in zip(lt, pt)]
    # Tokens per CPU second (all threads): what a step costs whatever share of the machine it got.
    lc = [r["tokens_per_step"] / (r["cpu_ms_per_step"] / 1e3) for r in loom]
    pc = [r["tokens_per_step"] / (r["cpu_ms_per_step"] / 1e3) for r in torch]
    m = statistics.median
    print(f"{dtype:11} {m(lt):11.0f} {m(pt):14.0f} {m(lt) / m(pt):6.2f} {m(per_round):5.2f} ({min(per_round):.2f}-{max(per_round):.2f})"
          f" {m(lc):15.0f} {m(pc):18.0f} {m(lc) / m(pc):6.2f}"
          f"  {100 * m(r['mfu'] for r in loom):.1f}% of {m(r['gemm_peak_gflops'] for r in loom):.0f} GFLOP/s")
PY
