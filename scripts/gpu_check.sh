#!/usr/bin/env bash
# loom's checks on one NVIDIA GPU, as one short script for a GPU machine that has PyTorch but nothing else of
# loom's (no compiler needed): pack loom where it was built (scripts/bundle.sh) and bring the end-to-end
# tests' KJV data (1024-token vocabulary: ctest's kjv_data fixture writes it to build/test-data/kjv, or
# `scripts/prepare_kjv.sh --out build/test-data/kjv --vocab 1024`), then on the GPU machine:
#   scripts/gpu_check.sh [--loom bundle/loom] [--kjv build/test-data/kjv] [--out DIR] [--skip-tests] [--seconds 480]
# 1. the machine: GPU, driver, torch;
# 2. speed: `loom bench` of GPT-2 124M (configs/gpt2-124m.yaml, 16 x 1024 tokens per step) in bf16 and fp32;
#    in bf16 also with 32 x 1024 tokens per micro-batch, full activation checkpointing, bf16 weights, and the
#    fused head + loss in larger chunks or unfused: tokens/s and MFU against the matmul ceiling measured in
#    the same process; then the PyTorch eager twin (scripts/bench_pytorch.py) of the same model on the GPU;
# 3. CPU against CUDA: a small GPT's loss after 5 fp32 steps from the same init on the same tokens agrees;
# 4. end-to-end tests with the tiny GPT trained on the GPU (LOOM_E2E_DEVICE=cuda): exact resume, gradient
#    accumulation, fp16 loss scaling, non-finite steps, generation, loss falls.
# Every step runs under a time limit, steps left when --seconds have passed are skipped, and a failure does
# not stop the later ones. DIR (default gpu-check/) gets summary.txt (also printed) and every step's log (a
# bench's ends in its JSON line); with $OUT set (the device tool) the summary and an archive of DIR go there.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
cd "$SRC"
loom=$SRC/bundle/loom kjv=$SRC/build/test-data/kjv out=$SRC/gpu-check skip_tests=0 seconds_in_all=480
while [ $# -gt 0 ]; do
  case $1 in
    --loom) loom=$(realpath "$2"); shift 2 ;;
    --kjv) kjv=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    --seconds) seconds_in_all=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
# Under the device tool ($OUT set), which hands back only a few files: the summary and one archive of the logs.
if [ -n "${OUT:-}" ]; then
  trap 'cp "$summary" "$OUT/" 2>/dev/null; tar czf "$OUT/gpu-check-logs.tar.gz" -C "$out" . 2>/dev/null' EXIT
fi
note() { echo "$*" | tee -a "$summary"; }
failures=0
deadline=$((SECONDS + seconds_in_all))
# check NAME SECONDS COMMAND...: runs COMMAND with its output in DIR/NAME.log, notes PASS or FAIL; SKIP once
# the whole script's time (--seconds) is spent.
check() {
  local name=$1 seconds=$2; shift 2
  local start=$SECONDS
  if [ "$SECONDS" -ge "$deadline" ]; then note "SKIP $name (--seconds $seconds_in_all spent)"; return 0; fi
  [ $((deadline - SECONDS)) -lt "$seconds" ] && seconds=$((deadline - SECONDS))
  if timeout "$seconds" "$@" > "$out/$name.log" 2>&1; then
    note "PASS $name ($((SECONDS - start)) s)"
  else
    note "FAIL $name (exit $?, $((SECONDS - start)) s): $(tail -3 "$out/$name.log" | tr '\n' ' ')"
    failures=$((failures + 1))
  fi
}

note "== machine"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
note "loom bundle of $(cat "$(dirname "$loom")/COMMIT" 2>/dev/null || echo "an unknown commit"), source tree at $(git describe --always --dirty=+ 2>/dev/null || echo "?")"
note "torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1)"
python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' || { note "FAIL no GPU visible to torch"; exit 1; }
[ "$skip_tests" -eq 1 ] || [ -s "$kjv/tokenizer.model" ] || { note "FAIL no KJV data in $kjv (--kjv, --skip-tests)"; exit 1; }
if ! "$loom" config configs/gpt2-124m.yaml --get model.d_model > "$out/loom-starts.log" 2>&1; then
  note "FAIL loom does not start: $(tail -5 "$out/loom-starts.log" | tr '\n' ' ')"
  note "missing libraries: $(LD_LIBRARY_PATH=$(dirname "$loom")/lib ldd "$(dirname "$loom")/bin/loom" 2>&1 | grep 'not found' | tr '\n' ' ')"
  exit 1
fi

note "== speed: GPT-2 124M, 16 x 1024 tokens per step"
gpt2=(configs/gpt2-124m.yaml --set runtime.device=cuda --set train.batch_size=16 --set train.micro_batch_size=16)
# Each run prints its JSON line (the one line of its log that starts with "{") after its log lines.
bench() { local name=$1; shift; check "loom-$name" 240 "$loom" bench "${gpt2[@]}" "$@" --steps 20 --warmup 5 --json; }
twin() {
  local name=$1; shift
  check "pytorch-$name" 240 python3 scripts/bench_pytorch.py "${gpt2[@]}" "$@" --steps 20 --warmup 5 --json --loom "$loom"
}
bench bf16 --set precision.dtype=bf16
twin bf16 --set precision.dtype=bf16
bench bf16-micro32 --set precision.dtype=bf16 --set train.batch_size=32 --set train.micro_batch_size=32
bench bf16-full --set precision.dtype=bf16 --set train.activation_checkpointing=full
bench bf16-params --set precision.dtype=bf16 --set precision.param_dtype=bf16
bench bf16-loss-chunk8192 --set precision.dtype=bf16 --set train.loss_chunk_tokens=8192
bench bf16-loss-unfused --set precision.dtype=bf16 --set train.loss_chunk_tokens=0
bench fp32 --set precision.dtype=fp32
twin fp32 --set precision.dtype=fp32
python3 - "$out" <<'PY' | tee -a "$summary"
import glob, json, os, sys
rows = []
for log in sorted(glob.glob(os.path.join(sys.argv[1], "*.log"))):
    name = os.path.basename(log)[:-4]
    for line in open(log):
        if line.startswith("{") and name.startswith(("loom-", "pytorch-")):
            rows.append(dict(json.loads(line), name=name))
for r in rows:
    extra = (f"MFU {100 * r['mfu']:5.1f}% of {r['gemm_peak_gflops'] / 1e3:.1f} TFLOP/s, peak {r['peak_memory_mb']:.0f} MB"
             if "mfu" in r else "")
    print(f"{r['name']:24} {r['tokens_per_s']:10.0f} tokens/s  step {r['step_ms_median']:7.1f} ms  {extra}")
by_name = {r["name"]: r for r in rows}
for dtype in ("bf16", "fp32"):
    if f"loom-{dtype}" in by_name and f"pytorch-{dtype}" in by_name:
        ratio = by_name[f"loom-{dtype}"]["tokens_per_s"] / by_name[f"pytorch-{dtype}"]["tokens_per_s"]
        print(f"loom / pytorch eager, {dtype}: {ratio:.2f}")
PY

note "== CPU against CUDA: a small GPT, 5 fp32 steps from the same init on the same tokens"
small=(configs/bench-gpt.yaml --set model.n_layers=2 --set train.batch_size=4 --set precision.dtype=fp32 --steps 5 --warmup 0 --json)
check parity-cpu 180 "$loom" bench "${small[@]}" --set runtime.device=cpu
check parity-cuda 120 "$loom" bench "${small[@]}" --set runtime.device=cuda
check parity 10 python3 -c "
import json, sys
cpu, cuda = (json.loads([l for l in open(f'$out/parity-{d}.log') if l.startswith('{')][-1])['final_loss'] for d in ('cpu', 'cuda'))
print(f'loss after 5 steps: cpu {cpu:.6f}, cuda {cuda:.6f}')
sys.exit(abs(cpu - cuda) > 1e-4 * abs(cpu))"
[ -s "$out/parity.log" ] && note "  $(cat "$out/parity.log")"

if [ "$skip_tests" -eq 0 ]; then
  note "== end-to-end tests, tiny GPT on the GPU"
  for t in exact_resume grad_accumulation fp16_loss_scaling nonfinite_steps generate train_loss_falls; do
    check "e2e-$t" 120 env LOOM="$loom" KJV_DATA="$kjv" LOOM_E2E_DEVICE=cuda bash "tests/e2e/test_$t.sh"
  done
fi
note "== $failures failed"
[ "$failures" -eq 0 ]
