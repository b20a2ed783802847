#!/usr/bin/env bash
# scripts/fixed_runs.sh OUT_DIR [LOOM]: a fixed set of short runs (12 steps of tests/e2e/tiny.yaml, dropout on,
# and the encoder-decoder of configs/reverse-synthetic.yaml) over the layouts a structural change can disturb:
# one process, with full recompute; ZeRO-3 at DP=2 (also with selective recompute); hybrid ZeRO-2 at DP=4
# over shards of 2; ZeRO-1 with bf16 parameters; TP=2 with sequence parallelism; PP=2 1F1B; CP=2; the
# encoder-decoder at DP=2 and with ZeRO-3. Run it with the binaries of two commits, then
#   python3 tests/e2e/metrics.py compare BEFORE_DIR AFTER_DIR
# says whether every loss, gradient norm and learning rate is bit-identical (about a minute per binary).
# Needs the KJV test data (build/test-data/kjv, made by the test build).
set -euo pipefail
out=${1:?usage: scripts/fixed_runs.sh OUT_DIR [LOOM]}
root=$(cd "$(dirname "$0")/.." && pwd)
export LOOM=${2:-$root/build/loom} KJV_DATA=${KJV_DATA:-$root/build/test-data/kjv} LOOM_SOURCE_DIR=$root
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
# shellcheck source=../tests/e2e/common.sh
source "$root/tests/e2e/common.sh"
rm -rf "$out"; mkdir -p "$out"; out=$(cd "$out" && pwd)
steps=(--set train.max_steps=12 --set schedule.total_steps=12)
tiny_train "$out/single" "${steps[@]}" >"$out/single.log" 2>&1 || fail "single"
tiny_train "$out/recompute" "${steps[@]}" --set train.activation_checkpointing=full >"$out/recompute.log" 2>&1 \
  || fail "recompute"
mpi_train 2 "$out/dp2-zero3" "${steps[@]}" --set parallel.zero=3 --set parallel.dp=2
mpi_train 2 "$out/dp2-zero3-selective" "${steps[@]}" --set parallel.zero=3 --set parallel.dp=2 \
  --set train.activation_checkpointing=selective
mpi_train 4 "$out/hsdp-zero2" "${steps[@]}" --set parallel.zero=2 --set parallel.dp=4 --set parallel.shard_size=2 \
  --set train.micro_batch_size=2
mpi_train 2 "$out/dp2-zero1-bf16" "${steps[@]}" --set parallel.zero=1 --set parallel.dp=2 --set precision.dtype=bf16 \
  --set precision.param_dtype=bf16
mpi_train 2 "$out/tp2-sp" "${steps[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true
mpi_train 2 "$out/pp2" "${steps[@]}" --set parallel.pp=2 --set parallel.microbatches=4 --set train.micro_batch_size=0
mpi_train 2 "$out/cp2" "${steps[@]}" --set parallel.cp=2 --set model.position=rope
train_args() { reverse_tiny_args "$1"; }
mpi_train 2 "$out/encoder-decoder-dp2" --set train.max_steps=12 --set parallel.dp=2
mpi_train 2 "$out/encoder-decoder-dp2-zero3" --set train.max_steps=12 --set parallel.dp=2 --set parallel.zero=3
echo "fixed runs of $LOOM in $out"
