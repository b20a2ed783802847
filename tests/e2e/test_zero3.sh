#!/usr/bin/env bash
# ZeRO-3 (parallel.zero: 3: parameters live only as shards; each block, and the ends, is a unit all-gathered
# around its forward and its backward and freed after, its gradients reduce-scattered in backward;
# parallel/gradient_sync.h, parallel/unit_gathers.h) under mpirun equals the single-process run of the same
# global batch (fp32, dropout off, 3 blocks, 20 steps with a validation loss at 10 and 20, losses within
# 1e-5, clipped gradient norms within 1e-4 relative): DP=2, DP=4, DP=2 with 2 micro-batches per rank,
# DP=2 x TP=2, full activation checkpointing (the recompute runs inside the gathered block),
# parallel.reshard_after_forward false, and bf16 parameters (gathered in bf16 from fp32 master shards),
# which write the bf16-parameters single process's losses bit for bit. A checkpoint resumes across ZeRO
# stages, DP and TP sizes on the uninterrupted curve: ZeRO-3 DP=4 (steps 1-5) -> ZeRO-2 DP=2 (6-10) -> one process (11-15)
# -> ZeRO-3 DP=2 x TP=2 (16-20); each rank's file holds only its part of the weights and moments; a rank
# SIGKILLed inside a save leaves the previous checkpoint whole, and with dropout on the run resumed from it
# repeats the uninterrupted losses bit for bit; `loom eval` and `loom export` load a ZeRO-3 checkpoint whole;
# at DP=4 the measured peak in tensors of ZeRO 0 to 3 is within 10% of `loom info`'s estimate. Pipeline stages (each stage sharding its
# own units): DP=2 x PP=2 1F1B (also without resharding) and GPipe, DP=2 x TP=2 x PP=2 (8 ranks), DP=2 x PP=3
# (a middle stage without ends), an untied head at DP=2, and resuming at step 10 out
# of PP=2 into one process and out of DP=2 into DP=2 x PP=2; the encoder-decoder at DP=2 (also with full
# activation checkpointing: the same losses bit for bit) and, pre-norm, DP=2 x PP=2 (10 steps against its
# single run).
source "$(dirname "$0")/common.sh"
common=(--set model.dropout=0 --set model.n_layers=3 --set train.max_steps=20 --set schedule.total_steps=20
        --set train.micro_batch_size=0)
zero3_train() {  # zero3_train RANKS RUN_DIR [--set ...]: a ZeRO-3 run, dp filling the ranks tp leaves
  local ranks=$1 dir=$2; shift 2
  mpi_train "$ranks" "$dir" "${common[@]}" --set parallel.zero=3 --set parallel.dp=-1 "$@" || fail "$(basename "$dir") failed"
}

tiny_train "$WORK/single" "${common[@]}" --set train.micro_batch_size=8 >"$WORK/single.log" 2>&1 || fail "single run"
zero3_train 2 "$WORK/dp2"
grep -q "layout dp=2 cp=1 tp=1 pp=1, 8 gradient buckets" "$WORK/dp2.log" || fail "ZeRO-3 did not bucket by unit (ends + 3 blocks, 2 groups each)"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2" "ZeRO-3 DP=2"
zero3_train 4 "$WORK/dp4"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp4" "ZeRO-3 DP=4"
zero3_train 2 "$WORK/dp2acc" --set train.micro_batch_size=4
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2acc" "ZeRO-3 DP=2 x 2 micro-batches"
zero3_train 4 "$WORK/dp2tp2" --set parallel.tp=2
grep -q "layout dp=2 cp=1 tp=2 pp=1" "$WORK/dp2tp2.log" || fail "DP=2 x TP=2 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2tp2" "ZeRO-3 DP=2 x TP=2"
zero3_train 2 "$WORK/recompute" --set train.activation_checkpointing=full
same_losses_and_grad_norms "$WORK/single" "$WORK/recompute" "ZeRO-3 DP=2, full activation checkpointing"
zero3_train 2 "$WORK/keep" --set parallel.reshard_after_forward=false --set train.micro_batch_size=4
same_losses_and_grad_norms "$WORK/single" "$WORK/keep" "ZeRO-3 DP=2 x 2 micro-batches, reshard_after_forward false"

# Pipeline stages (blocks 0-1 | 2): each stage shards its own units over its DP group: the first stage its
# embeddings, the last its final norm and its copy of the tied embedding, whose bucket is reduced after the
# stages' sum. The schedules interleave micro-batches' forwards and backwards: 1F1B (a warm-up of two
# forwards) and GPipe (every forward, then every backward), each resharded and, for 1F1B, not.
zero3_train 4 "$WORK/dp2pp2-1f1b" --set parallel.pp=2 --set parallel.pp_schedule=1f1b --set parallel.microbatches=4
grep -q "layout dp=2 cp=1 tp=1 pp=2, 5 gradient buckets" "$WORK/dp2pp2-1f1b.log" \
  || fail "DP=2 x PP=2: the first stage did not bucket by its units (the embeddings; 2 blocks x matrices, vectors)"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2pp2-1f1b" "ZeRO-3 DP=2 x PP=2 1f1b, 4 micro-batches"
zero3_train 4 "$WORK/dp2pp2-gpipe" --set parallel.pp=2 --set parallel.pp_schedule=gpipe --set parallel.microbatches=2
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2pp2-gpipe" "ZeRO-3 DP=2 x PP=2 gpipe, 2 micro-batches"
zero3_train 4 "$WORK/dp2pp2-keep" --set parallel.pp=2 --set parallel.pp_schedule=1f1b --set parallel.microbatches=4 \
  --set parallel.reshard_after_forward=false
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2pp2-keep" "ZeRO-3 DP=2 x PP=2 1f1b, reshard_after_forward false"
zero3_train 8 "$WORK/dp2tp2pp2" --set parallel.tp=2 --set parallel.pp=2 --set parallel.microbatches=2
grep -q "layout dp=2 cp=1 tp=2 pp=2" "$WORK/dp2tp2pp2.log" || fail "DP=2 x TP=2 x PP=2 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2tp2pp2" "ZeRO-3 DP=2 x TP=2 x PP=2 1f1b"
# Three stages: the middle one's ends unit is empty and never gathered (1 block each, GPipe).
zero3_train 6 "$WORK/dp2pp3" --set parallel.pp=3 --set parallel.pp_schedule=gpipe --set parallel.microbatches=2
grep -q "layout dp=2 cp=1 tp=1 pp=3" "$WORK/dp2pp3.log" || fail "DP=2 x PP=3 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2pp3" "ZeRO-3 DP=2 x PP=3 gpipe"
# An untied head: its weight is in the ends with the embeddings, freed over the blocks between them.
untied=(--set model.tie_embeddings=false)
tiny_train "$WORK/untied-single" "${common[@]}" "${untied[@]}" --set train.micro_batch_size=8 >"$WORK/untied-single.log" 2>&1 ||
  fail "untied single run"
zero3_train 2 "$WORK/untied" "${untied[@]}" --set train.micro_batch_size=4
same_losses_and_grad_norms "$WORK/untied-single" "$WORK/untied" "ZeRO-3 DP=2 x 2 micro-batches, untied head"
# A run's step-10 checkpoint resumed in another layout (steps 11-20) continues the single process's curve:
# out of the stages' shards into one process, and out of one stage into two (each stage fills its own shards).
resume_at_10() {  # resume_at_10 FROM_RUN RUN RANKS WHAT [--set ...]
  local from=$1 dir=$2 ranks=$3 what=$4; shift 4
  cp -r "$from" "$dir" && rm -r "$dir/checkpoints/20"
  mpi_train "$ranks" "$dir" "${common[@]}" "$@" || fail "$what failed"
  grep -q "resumed from .*/checkpoints/10" "$dir.log" || fail "$what did not resume from step 10"
  same_train_losses "$WORK/single" "$dir" "$what" 20
}
resume_at_10 "$WORK/dp2pp2-1f1b" "$WORK/from-pp2" 1 "ZeRO-3 DP=2 x PP=2 -> one process" --set train.micro_batch_size=8
resume_at_10 "$WORK/dp2" "$WORK/into-pp2" 4 "ZeRO-3 DP=2 -> ZeRO-3 DP=2 x PP=2 gpipe" --set parallel.zero=3 \
  --set parallel.dp=2 --set parallel.pp=2 --set parallel.pp_schedule=gpipe --set parallel.microbatches=2

bf16=(--set precision.dtype=bf16 --set precision.param_dtype=bf16)
tiny_train "$WORK/bf16-single" "${common[@]}" "${bf16[@]}" --set train.micro_batch_size=8 >"$WORK/bf16-single.log" 2>&1 ||
  fail "bf16 parameters, single run"
zero3_train 2 "$WORK/bf16" "${bf16[@]}"
# Two ranks of one micro-batch each sum the single process's two micro-batches' gradients (a + b either way),
# the shards step as the whole does, and the gradient norm is summed in double (the same clip coefficient
# however it is cut): the same bf16 weights every step. Clipping acts in the first steps (norm > 1).
same_losses "$WORK/bf16-single" "$WORK/bf16" "ZeRO-3 DP=2, bf16 parameters"
python3 - "$WORK/bf16" <<'PY' || fail "bf16 parameters: no step was clipped, so the test does not cover clipping"
import json, sys
assert any(r["split"] == "train" and r["grad_norm"] > 1.0 for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")))
PY

# The checkpoint: every DP rank writes its shard, the manifest names ZeRO-3; one process loads it whole.
ls "$WORK/dp2/checkpoints/20/shard-dp0-tp0-pp0.pt" "$WORK/dp2/checkpoints/20/shard-dp1-tp0-pp0.pt" >/dev/null \
  || fail "ZeRO-3 did not write a shard per DP rank"
grep -q '"zero": 3' "$WORK/dp2/checkpoints/20/manifest.json" || fail "the manifest does not name ZeRO-3"
"$LOOM" eval "$WORK/dp2" --json > "$WORK/dp2-eval.json" 2>/dev/null || fail "loom eval of the ZeRO-3 checkpoint"
"$LOOM" eval "$WORK/single" --json > "$WORK/single-eval.json" 2>/dev/null || fail "loom eval of the single run"
"$LOOM" export "$WORK/dp2" --format safetensors --out "$WORK/dp2-export" >/dev/null || fail "export of the ZeRO-3 run"
"$LOOM" export "$WORK/single" --format safetensors --out "$WORK/single-export" >/dev/null || fail "export of the single run"
python3 - "$WORK" <<'PY' || fail "the ZeRO-3 checkpoint, loaded whole, is not the single run's model"
import json, sys
from safetensors.torch import load_file
work = sys.argv[1]
a, b = (json.load(open(f"{work}/{run}-eval.json"))["loss"] for run in ("single", "dp2"))
assert abs(a - b) < 1e-5, (a, b)
x, y = (load_file(f"{work}/{run}-export/model.safetensors") for run in ("single", "dp2"))
assert sorted(x) == sorted(y), (sorted(x), sorted(y))
worst = max(float((x[k] - y[k]).abs().max()) for k in x)
assert worst < 1e-4, worst
print(f"ZeRO-3 checkpoint: loom eval {b:.6f} (single {a:.6f}); {len(x)} exported tensors, max |diff| {worst:.1e}")
PY

# Resume across ZeRO stages, DP and TP sizes, 5 steps per hop, on the single process's 20-step curve.
resume_hop "$WORK/hops" 4 5 "${common[@]}" --set parallel.dp=4 --set parallel.zero=3
resume_hop "$WORK/hops" 2 10 "${common[@]}" --set parallel.dp=2 --set parallel.zero=2 --set parallel.bucket_mb=0.05
resume_hop "$WORK/hops" 1 15 "${common[@]}" --set parallel.dp=1 --set parallel.zero=0 --set train.micro_batch_size=8
resume_hop "$WORK/hops" 4 20 "${common[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=3
same_train_losses "$WORK/single" "$WORK/hops" "ZeRO-3 DP=4 -> ZeRO-2 DP=2 -> single -> ZeRO-3 DP=2 x TP=2" 20

# Each rank writes only its own part of the weights and AdamW moments (by element range, never gathered):
# each of ZeRO-3 DP=4's four files holds about a quarter of what the single process's one file holds.
python3 - "$WORK" <<'PY' || fail "ZeRO-3's shard files do not each hold a quarter of the model"
import os, sys
work = sys.argv[1]
whole = os.path.getsize(f"{work}/single/checkpoints/20/shard-dp0-tp0-pp0.pt")
parts = [os.path.getsize(f"{work}/dp4/checkpoints/20/shard-dp{d}-tp0-pp0.pt") for d in range(4)]
assert all(0.2 < p / whole < 0.3 for p in parts) and 0.95 < sum(parts) / whole < 1.15, (whole, parts)
print(f"ZeRO-3 DP=4 shard files: {[round(p / whole, 3) for p in parts]} of the single process's {whole} bytes")
PY

# SIGKILL in a sharded save (dropout on): rank 1 kills itself right after writing its shard of the step-10
# checkpoint; the job ends, step 5's checkpoint is whole, and the run resumed from it writes the uninterrupted
# run's losses bit for bit (every rank's RNG states and shards travel with the checkpoint).
dropout=(--set model.dropout=0.1 --set checkpoint.every=5)
zero3_train 2 "$WORK/dropout" "${dropout[@]}"
(
  MPIRUN=("${MPIRUN[@]}" -x LOOM_FAULT_INJECTION)
  export LOOM_FAULT_INJECTION=kill_in_save@10:rank1
  zero3_train 2 "$WORK/killed" "${dropout[@]}"
) >/dev/null 2>&1 && fail "the run whose rank 1 was killed in its save did not fail"
[ -e "$WORK/killed/checkpoints/.tmp-10/shard-dp1-tp0-pp0.pt" ] || fail "the kill did not land inside the step-10 save"
[ ! -e "$WORK/killed/checkpoints/10" ] || fail "a checkpoint of step 10 appeared though a rank died saving it"
zero3_train 2 "$WORK/killed" "${dropout[@]}"
grep -q "resumed from .*/checkpoints/5 " "$WORK/killed.log" || fail "the killed run did not resume from its whole step-5 checkpoint"
same_losses "$WORK/dropout" "$WORK/killed" "ZeRO-3 DP=2, dropout 0.1, SIGKILL in the step-10 save"

# Memory at DP=4 on a model whose states dominate (9.7M parameters in 12 blocks of 0.79M, 32-token windows):
# for ZeRO 0, 1, 2 and 3 every rank's measured peak in tensors (`loom bench`, the caching allocator's count)
# is within 10% of `loom info`'s estimate, each stage holds less than the one before, and ZeRO-3 holds at
# most 0.45 of ZeRO-0 (measured 163.1, 116.6, 90.6 and 63.1 MiB: 0.39; loom info 162.4, 116.0, 90.8, 62.9).
states=(--set model.vocab_size=1024 --set model.d_model=256 --set model.n_layers=12 --set model.n_heads=4 --set data.seq_len=32
        --set model.max_seq_len=32 --set model.dropout=0 --set train.batch_size=8 --set train.micro_batch_size=0
        --set parallel.bucket_mb=4 --set parallel.dp=4)
for zero in 0 1 2 3; do
  "${MPIRUN[@]}" -np 4 "$LOOM" bench "$SRC/tests/e2e/tiny.yaml" "${states[@]}" --set parallel.zero=$zero --steps 1 --warmup 1 \
    --profile-steps 0 --json 2>/dev/null | tail -1 > "$WORK/bench-zero$zero.json" || fail "loom bench at ZeRO-$zero failed"
done
python3 - "$WORK" <<'PY' || fail "measured memory differs from loom info's estimate, or sharding does not shrink it"
import json, sys
peaks = []
for zero in range(4):
    r = json.load(open(f"{sys.argv[1]}/bench-zero{zero}.json"))
    ranks = r["ranks"]
    assert len(ranks) == 4 and all(0.9 <= m["tensors_mb"] / m["estimate_mb"] <= 1.1 for m in ranks), (zero, ranks)
    if zero > 0:
        assert r["exposed_dp_communication_ms"] > 0, r  # the reductions and gathers are waited for somewhere
    peaks.append(max(m["tensors_mb"] for m in ranks))
    print(f"ZeRO-{zero} at DP=4: {[round(m['tensors_mb'], 1) for m in ranks]} MiB in tensors, "
          f"{ranks[0]['estimate_mb']:.1f} estimated")
assert all(a > b for a, b in zip(peaks, peaks[1:])) and peaks[3] <= 0.45 * peaks[0], peaks
PY

# The encoder-decoder on the synthetic reversal task (pairs of varying lengths), 10 steps: its units are the
# ends (shared embedding, final norms, head) and every encoder and decoder block. DP=2, and DP=2 x PP=2 1F1B
# pre-norm with parallel.pp_layers [3, 1]: the first stage holds the encoder, its final norm and a decoder
# block, the last the other decoder block, the decoder's norm and the tied embedding's copy.
train_args() { echo "$(reverse_tiny_args "$1") --set model.dropout=0 --set train.max_steps=10"; }
tiny_train "$WORK/mt-single" >"$WORK/mt-single.log" 2>&1 || fail "transformer single run"
mpi_train 2 "$WORK/mt-dp2" --set parallel.dp=2 --set parallel.zero=3 || fail "transformer ZeRO-3 DP=2 failed"
grep -q "layout dp=2 cp=1 tp=1 pp=1, 9 gradient buckets" "$WORK/mt-dp2.log" \
  || fail "the encoder-decoder's ZeRO-3 did not bucket by unit (the ends' embedding; 4 blocks x matrices, vectors)"
same_losses_and_grad_norms "$WORK/mt-single" "$WORK/mt-dp2" "transformer ZeRO-3 DP=2"
# Full activation checkpointing: each encoder and decoder block recomputed inside its gathered unit (the
# gathers stay outside the recompute), the memory's gradient summed over the recomputed decoder blocks:
# the same losses bit for bit.
mpi_train 2 "$WORK/mt-dp2-recompute" --set parallel.dp=2 --set parallel.zero=3 --set train.activation_checkpointing=full ||
  fail "transformer ZeRO-3 DP=2 with activation checkpointing failed"
same_losses "$WORK/mt-dp2" "$WORK/mt-dp2-recompute" "transformer ZeRO-3 DP=2, full activation checkpointing"
pre_norm=(--set model.norm_position=pre)
tiny_train "$WORK/mt-pre-single" "${pre_norm[@]}" >"$WORK/mt-pre-single.log" 2>&1 || fail "pre-norm transformer single run"
mpi_train 4 "$WORK/mt-dp2pp2" "${pre_norm[@]}" --set parallel.dp=2 --set parallel.pp=2 --set 'parallel.pp_layers=[3,1]' \
  --set parallel.microbatches=2 --set parallel.zero=3 || fail "transformer ZeRO-3 DP=2 x PP=2 failed"
same_losses_and_grad_norms "$WORK/mt-pre-single" "$WORK/mt-dp2pp2" "transformer (pre-norm) ZeRO-3 DP=2 x PP=2 1f1b, pp_layers [3, 1]"
echo PASS
