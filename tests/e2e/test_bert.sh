#!/usr/bin/env bash
# BERT (model.arch: bert, masked language modelling on the KJV token files; train/mlm_task.h) under mpirun
# equals the single-process run of the same global batch (fp32, dropout off, 2 post-norm blocks, 20 steps
# with a validation MLM loss and accuracy at 10 and 20; losses within 1e-5, clipped gradient norms within
# 1e-4 relative): DP=2, TP=2 (heads, MLP, the vocabulary of the tied embedding and of the MLM output bias)
# and PP=2 (1F1B, the tied embedding's gradients summed across the first and last stage), activation
# checkpointing, bf16 TP=2 (within twice the single process's own bf16 error), and ZeRO-3
# test at DP=2 (the ends kept gathered over the step); a DP=2 checkpoint resumed by one process stays on the
# single-process curve. The validation
# rows carry the MLM accuracy, and `loom eval` of the run repeats the last one. With dropout, a run resumed
# from its step-10 checkpoint repeats the uninterrupted losses bit for bit.
source "$(dirname "$0")/common.sh"
train_args() {
  echo "$SRC/configs/bert-kjv.yaml --set run.dir=$1 --set data.train=$KJV_DATA/train.bin" \
       "--set data.valid=$KJV_DATA/valid.bin --set tokenizer.model=$KJV_DATA/tokenizer.model" \
       "--set model.d_model=64 --set model.n_layers=2 --set model.n_heads=2 --set model.max_seq_len=32" \
       "--set data.seq_len=32 --set model.dropout=0 --set precision.dtype=fp32 --set train.max_steps=20" \
       "--set train.batch_size=8 --set train.log_every=1 --set train.eval_every=10 --set train.eval_batches=1" \
       "--set schedule.warmup_steps=5 --set checkpoint.every=0 --set runtime.threads=1" \
       "--set runtime.device=$E2E_DEVICE --set runtime.deterministic=$([ "$E2E_DEVICE" = cpu ] && echo false || echo true)"
}

tiny_train "$WORK/single" >"$WORK/single.log" 2>&1 || { tail -20 "$WORK/single.log"; fail "single run"; }
python3 - "$WORK/single" <<'PY' || fail "no validation MLM accuracy, or a loss that did not fall"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
valid = [r for r in rows if r["split"] == "valid"]
train = [r["loss"] for r in rows if r["split"] == "train"]
assert [r["step"] for r in valid] == [10, 20] and all(0 <= r["accuracy"] <= 1 for r in valid), valid
assert train[-1] < train[0], train
print(f"single: train loss {train[0]:.3f} -> {train[-1]:.3f}, valid accuracy {valid[-1]['accuracy']:.3f}")
PY
# loom eval of the run repeats training's last validation row, accuracy included.
"$LOOM" eval "$WORK/single" --json >"$WORK/eval.json" || fail "loom eval of a BERT run"
python3 - "$WORK/single" "$WORK/eval.json" <<'PY' || fail "loom eval differs from training's validation"
import json, sys
last = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"valid"' in l][-1]
out = json.load(open(sys.argv[2]))
assert abs(out["loss"] - last["loss"]) < 1e-6 and abs(out["accuracy"] - last["accuracy"]) < 1e-9, (out, last)
PY
# Activation checkpointing recomputes every block from its input: the same curve within 1e-5.
tiny_train "$WORK/recompute" --set train.activation_checkpointing=full >"$WORK/recompute.log" 2>&1 \
  || fail "activation checkpointing"
same_losses_and_grad_norms "$WORK/single" "$WORK/recompute" "BERT with activation checkpointing (full)"
# bf16 autocast: TP=2 rounds its partial sums apart from one process, so its curve is held within twice the
# single process's own bf16 error (its largest distance from $WORK/single, the same run in fp32).
tiny_train "$WORK/bf16" --set precision.dtype=bf16 >"$WORK/bf16.log" 2>&1 || fail "bf16 run"
mpi_train 2 "$WORK/bf16-tp2" --set precision.dtype=bf16 --set parallel.tp=2 --set parallel.dp=1 || fail "bf16 TP=2"
same_losses_within_dtype_error "$WORK/bf16" "$WORK/bf16-tp2" "$WORK/single" "BERT bf16 autocast, TP=2" 2
mpi_train 2 "$WORK/dp2" --set parallel.dp=2 || fail "DP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2" "BERT DP=2"
mpi_train 2 "$WORK/tp2" --set parallel.tp=2 --set parallel.dp=1 || fail "TP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/tp2" "BERT TP=2"
mpi_train 2 "$WORK/pp2" --set parallel.pp=2 --set parallel.dp=1 --set parallel.microbatches=2 || fail "PP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/pp2" "BERT PP=2"
mpi_train 2 "$WORK/zero3" --set parallel.dp=2 --set parallel.zero=3 || fail "ZeRO-3 DP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/zero3" "BERT ZeRO-3 DP=2"
# DP=2 for 10 steps, then one process from its checkpoint to 20: the single-process curve (the masks are a
# function of seed, step and sequence, whatever rank draws them).
resumed_as_one_process "$WORK/single" "$WORK/dp2-to-single" "BERT DP=2 checkpoint resumed as one process" \
  --set parallel.dp=2
# Dropout on: a run stopped at its step-10 checkpoint and trained on to 20 repeats the uninterrupted losses bit
# for bit (the masks are a function of seed, step and sequence; dropout's RNG state is in the checkpoint).
resume_repeats_losses "BERT resumed at step 10 with dropout" --set model.dropout=0.1
echo "PASS"
