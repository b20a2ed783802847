#!/usr/bin/env bash
# One MoE layer's experts, forward + backward (4096 tokens, C 256, SwiGLU experts of F 512, fp32, 8 experts
# top-2 and 32 top-4): loom's grouped experts and its per-expert masked loop (`loom_tests "[.moe-bench]"`)
# against PyTorch eager running Hugging Face Mixtral's expert loop (scripts/bench_moe_pytorch.py), alternating
# for ROUNDS rounds in one run on the same thread count, so machine noise hits all alike; read the ratios.
#   scripts/bench_moe.sh [ROUNDS] [THREADS]      (default 3 rounds, 2 threads; build/tests/loom_tests built)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3} threads=${2:-2}
tests=${LOOM_TESTS:-$SRC/build/tests/loom_tests}
[ -x "$tests" ] || { echo "bench_moe.sh: $tests is not built (cmake -DBUILD_TESTING=ON, cmake --build build)" >&2; exit 2; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  echo "round $round"
  OMP_NUM_THREADS=$threads "$tests" "[.moe-bench]" 2>/dev/null | grep "^E="
  python3 "$SRC/scripts/bench_moe_pytorch.py" --threads "$threads"
done
