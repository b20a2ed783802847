#!/usr/bin/env bash
# Sequence parallelism for the encoder-decoder (model.arch: transformer, parallel.sequence_parallel): both
# stacks' norms, dropout and residuals on 1/tp of the positions, the memory kept split and gathered by every
# cross-attention. Pair lengths vary from batch to batch and are padded up to multiples of tp (padding that
# the masks and the loss ignore). Under mpirun, fp32, dropout off, 10 steps, each layout gives the
# single-process train and valid losses within 1e-5: on the synthetic reversal task (source lengths 1-10)
# TP=2 (post-norm, sinusoidal, tied), DP=2 x TP=2 (pre-norm, learned positions, GELU, untied head) and
# TP=2 x PP=2 under GPipe and 1F1B; on the Bible pairs (token-based batches) TP=2 and TP=2 x PP=2. A TP=2+SP checkpoint
# resumes as one process, and a single-process one as TP=2+SP, on the single 20-step curve; TP=2+SP with
# dropout 0.1 resumes bit for bit, its halves recomputing the blocks in backward (activation checkpointing
# full, then selective); `loom eval` and `loom translate` of the SP checkpoint give the single
# run's loss and translations.
source "$(dirname "$0")/common.sh"
: "${BIBLE_MT_DATA:?set BIBLE_MT_DATA to prepared English-Spanish data}"
train_args() { reverse_tiny_args "$1"; }
common=(--set model.dropout=0 --set train.max_steps=10)
variant=(--set model.norm_position=pre --set model.position=learned --set model.activation=gelu
         --set model.tie_embeddings=false)
sp=(--set parallel.sequence_parallel=true --set parallel.tp=2)
# sp_train RANKS RUN_DIR [--set ...]: a run that must report the SP layout it ran with.
sp_train() {
  local ranks=$1 dir=$2; shift 2
  mpi_train "$ranks" "$dir" "${sp[@]}" "$@" || fail "$(basename "$dir") run failed"
  grep -q "layout dp=.* cp=1 tp=2 pp=" "$dir.log" || fail "$(basename "$dir") did not run with tp=2"
}

tiny_train "$WORK/single" "${common[@]}" >"$WORK/single.log" 2>&1 || { tail "$WORK/single.log"; fail "single-process run"; }
sp_train 2 "$WORK/tp2sp" "${common[@]}" --set parallel.dp=1
same_curve "$WORK/single" "$WORK/tp2sp" "transformer TP=2 + SP"
tiny_train "$WORK/variant-single" "${common[@]}" "${variant[@]}" >"$WORK/variant-single.log" 2>&1 \
  || fail "pre-norm single-process run failed"
sp_train 4 "$WORK/variant-dp2tp2sp" "${common[@]}" "${variant[@]}" --set parallel.dp=2
same_curve "$WORK/variant-single" "$WORK/variant-dp2tp2sp" "transformer (pre-norm, untied) DP=2 x TP=2 + SP"
for schedule in gpipe 1f1b; do
  sp_train 4 "$WORK/tp2pp2sp-$schedule" "${common[@]}" --set parallel.pp=2 --set parallel.dp=1 \
    --set parallel.microbatches=2 --set parallel.pp_schedule=$schedule
  same_curve "$WORK/single" "$WORK/tp2pp2sp-$schedule" "transformer TP=2 x PP=2 ($schedule) + SP"
done

# One process evaluates and translates from the TP=2+SP checkpoint (loaded whole): the single run's results.
same_eval_and_translation "$WORK/tp2sp" "TP=2+SP"

# Resharding: 20 single-process steps against 10 under one layout then 10 under the other.
twenty=(--set model.dropout=0 --set train.max_steps=20)
tiny_train "$WORK/single20" "${twenty[@]}" >"$WORK/single20.log" 2>&1 || fail "single 20 steps"
cp -r "$WORK/tp2sp" "$WORK/sp-to-single"
tiny_train "$WORK/sp-to-single" "${twenty[@]}" >"$WORK/sp-to-single.log" 2>&1 || fail "TP=2+SP -> one process"
grep -q "resumed from .*/checkpoints/10" "$WORK/sp-to-single.log" || fail "TP=2+SP -> one process did not resume"
same_curve "$WORK/single20" "$WORK/sp-to-single" "transformer TP=2+SP checkpoint resumed as one process" 20
cp -r "$WORK/single" "$WORK/single-to-sp"
sp_train 2 "$WORK/single-to-sp" "${twenty[@]}" --set parallel.dp=1
grep -q "resumed from .*/checkpoints/10" "$WORK/single-to-sp.log" || fail "one process -> TP=2+SP did not resume"
same_curve "$WORK/single20" "$WORK/single-to-sp" "transformer single checkpoint resumed as TP=2+SP" 20

# Exact resume under TP=2+SP with dropout (sequence shards drop from each rank's TP stream, saved in its
# shard): steps 1-10, then 11-20, against 20 uninterrupted steps. The halves recompute their blocks in
# backward (full, then selective activation checkpointing), which replays every dropout mask (the TP
# stream's too) and so changes no loss.
dropout=(--set model.dropout=0.1 --set train.max_steps=20 --set parallel.dp=1)
sp_train 2 "$WORK/dropout-reference" "${dropout[@]}"
sp_train 2 "$WORK/dropout-resumed" "${dropout[@]}" --set train.max_steps=10 --set train.activation_checkpointing=full
sp_train 2 "$WORK/dropout-resumed" "${dropout[@]}" --set train.activation_checkpointing=selective
grep -q "resumed from .*/checkpoints/10" "$WORK/dropout-resumed.log" || fail "TP=2+SP with dropout did not resume"
same_losses "$WORK/dropout-reference" "$WORK/dropout-resumed" \
  "transformer TP=2+SP (dropout 0.1) resumed at step 10, recomputed (full, then selective)"
# The sequence shards really are dropped on their own: the same run without SP (residual dropout alike on
# both ranks, from the default generator) follows another curve.
mpi_train 2 "$WORK/dropout-no-sp" "${dropout[@]}" --set parallel.tp=2 || fail "TP=2 without SP, dropout, failed"
losses "$WORK/dropout-no-sp" > "$WORK/dropout-no-sp.losses"
! diff -q "$WORK/dropout-reference.losses" "$WORK/dropout-no-sp.losses" >/dev/null \
  || fail "TP=2 with and without SP drew the same dropout: sequence parallelism did not act"
echo "TP=2 with dropout: SP and no SP follow different curves (shards drop on the TP stream)"

# Bible pairs, token-based batches: S and T of every batch vary and are mostly odd, padded up for SP.
train_args() { echo "$(bible_tiny_args "$1") --set checkpoint.every=10"; }
tiny_train "$WORK/bible-single" >"$WORK/bible-single.log" 2>&1 || { tail "$WORK/bible-single.log"; fail "Bible single run"; }
sp_train 2 "$WORK/bible-tp2sp" --set parallel.dp=1
same_curve "$WORK/bible-single" "$WORK/bible-tp2sp" "Bible pairs, token batches, TP=2 + SP"
# ... and under TP=2 x PP=2, 2 micro-batches (each padded on its own, its shards' shapes its own).
sp_train 4 "$WORK/bible-tp2pp2sp" --set parallel.dp=1 --set parallel.pp=2 --set train.micro_batch_size=4
same_curve "$WORK/bible-single" "$WORK/bible-tp2pp2sp" "Bible pairs, token batches, TP=2 x PP=2 (1f1b) + SP"
echo PASS
