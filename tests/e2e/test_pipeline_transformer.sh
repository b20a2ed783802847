#!/usr/bin/env bash
# Pipeline parallelism for the encoder-decoder (model.arch: transformer): the encoder blocks then the
# decoder blocks split into parallel.pp stages, the first stage embedding source and target, every stage
# passing on [source side, target side] (the memory reaching every decoder stage, its gradient summed on
# the way back). Under mpirun, on the synthetic reversal task made small (fp32, dropout off, label
# smoothing 0.1, pairs of varying lengths: every micro-batch its own B, S and T), each layout gives the
# single-process train and valid losses within 1e-5 over 10 steps: PP=2 GPipe (2 encoder | 2 decoder
# blocks), PP=2 1F1B with parallel.pp_layers [3, 1] (a decoder block on the first stage), PP=4 1F1B (a
# stage passing the embedded target on, one passing the memory on), TP=2 x PP=2 (post-norm, tied
# embedding on the first and last stage) and DP=2 x PP=2 (pre-norm, learned positions, GELU, untied head).
# Checkpoints reshard: PP=2 -> one process, TP=2 x PP=2 -> one process and one process -> PP=2 continue the
# single-process 20-step curve, and a PP=2 run with dropout resumes bit for bit, its halves recomputing the
# blocks in backward (activation checkpointing selective, then full). `loom eval` and `loom translate` from a PP=2 run give the single run's loss
# and translations; on the Bible pairs (token-based batches: the pairs per step vary) PP=2 gives the
# single run's losses (also with steps of one pair, one micro-batch left empty) and `loom eval --split
# test` its BLEU. Bad splits are config errors naming the key.
source "$(dirname "$0")/common.sh"
: "${BIBLE_MT_DATA:?set BIBLE_MT_DATA to prepared English-Spanish data}"
train_args() { echo "$(reverse_tiny_args "$1") --set model.dropout=0"; }
common=(--set train.max_steps=10)
variant=(--set model.norm_position=pre --set model.position=learned --set model.activation=gelu
         --set model.tie_embeddings=false)
# same_run REFERENCE_RUN RUN WHAT [STEPS]: same_curve, and the same clipped gradient norms within 1e-4
# relative (clipping counts the tied embedding's two copies once, every stage's parameters once).
same_run() {
  same_curve "$@"
  same_grad_norms "$1" "$2" "$3"
}
# pp_train RANKS RUN_DIR PP [--set ...]: a pipeline run that must report the layout it was given.
pp_train() {
  local ranks=$1 dir=$2 pp=$3; shift 3
  mpi_train "$ranks" "$dir" --set parallel.pp="$pp" "$@" || fail "$(basename "$dir") run failed"
  grep -q "layout dp=.* cp=1 tp=.* pp=$pp" "$dir.log" || fail "$(basename "$dir") did not run with pp=$pp"
}

tiny_train "$WORK/single" "${common[@]}" >"$WORK/single.log" 2>&1 || { tail "$WORK/single.log"; fail "single-process run"; }
pp_train 2 "$WORK/pp2-gpipe" 2 "${common[@]}" --set parallel.dp=1 --set parallel.microbatches=4 --set parallel.pp_schedule=gpipe
same_run "$WORK/single" "$WORK/pp2-gpipe" "transformer PP=2 gpipe"
pp_train 2 "$WORK/pp2-1f1b" 2 "${common[@]}" --set parallel.dp=1 --set parallel.microbatches=4 --set parallel.pp_schedule=1f1b \
  --set 'parallel.pp_layers=[3,1]'
same_run "$WORK/single" "$WORK/pp2-1f1b" "transformer PP=2 1f1b, pp_layers [3, 1]"
pp_train 4 "$WORK/pp4" 4 "${common[@]}" --set parallel.dp=1 --set parallel.microbatches=4 --set parallel.pp_schedule=1f1b
same_run "$WORK/single" "$WORK/pp4" "transformer PP=4 1f1b"
pp_train 4 "$WORK/tp2pp2" 2 "${common[@]}" --set parallel.tp=2 --set parallel.dp=1 --set parallel.microbatches=2
same_run "$WORK/single" "$WORK/tp2pp2" "transformer TP=2 x PP=2"
tiny_train "$WORK/variant-single" "${common[@]}" "${variant[@]}" >"$WORK/variant-single.log" 2>&1 \
  || fail "pre-norm single-process run failed"
pp_train 4 "$WORK/variant-dp2pp2" 2 "${common[@]}" "${variant[@]}" --set parallel.dp=2 --set parallel.microbatches=2
same_run "$WORK/variant-single" "$WORK/variant-dp2pp2" "transformer (pre-norm, untied) DP=2 x PP=2"

# The PP=2 checkpoint: each stage's shard holds its own blocks, the manifest lists them.
python3 - "$WORK/pp2-gpipe/checkpoints/10" "$WORK/variant-dp2pp2/checkpoints/10" <<'PY' || fail "PP=2 checkpoint layout"
import json, sys
m = json.load(open(f"{sys.argv[1]}/manifest.json"))
assert m["layout"]["pp"] == 2 and m["pipeline"]["layers"] == [2, 2], m["pipeline"]["layers"]
first, last = (set(n) for n in m["pipeline"]["names"])
assert "encoder.1.ln1.weight" in first and "decoder.0.ln1.weight" in last and not any(n.startswith("decoder.") for n in first)
assert "token_embedding.weight" in first and "token_embedding.weight" in last  # tied: on both
v = json.load(open(f"{sys.argv[2]}/manifest.json"))
first, last = (set(n) for n in v["pipeline"]["names"])
assert {"encoder_positions.weight", "decoder_positions.weight", "encoder_norm.weight"} <= first, first
assert {"decoder_norm.weight", "lm_head.weight"} <= last and "token_embedding.weight" not in last, last
print(f"PP=2 checkpoints: stages hold {len(first)} and {len(last)} tensors (pre-norm, untied)")
PY

# Resharding: 20 single-process steps against 10 under one layout then 10 under another (the inverse
# square-root schedule does not depend on train.max_steps, so a 10-step run is the 20-step run's start).
twenty=(--set train.max_steps=20)
tiny_train "$WORK/single20" "${twenty[@]}" >"$WORK/single20.log" 2>&1 || fail "single 20 steps"
resumed() {  # resumed RUN_DIR LABEL: it resumed from step 10 and continues the single 20-step curve
  grep -q "resumed from .*/checkpoints/10" "$1.log" || fail "$2 did not resume from step 10"
  same_run "$WORK/single20" "$1" "$2" 20
}
cp -r "$WORK/pp2-gpipe" "$WORK/pp2-to-pp1"
tiny_train "$WORK/pp2-to-pp1" "${twenty[@]}" >"$WORK/pp2-to-pp1.log" 2>&1 || { tail -5 "$WORK/pp2-to-pp1.log"; fail "pp2 -> pp1"; }
resumed "$WORK/pp2-to-pp1" "transformer PP=2 checkpoint resumed as PP=1"
cp -r "$WORK/tp2pp2" "$WORK/tp2pp2-to-single"
tiny_train "$WORK/tp2pp2-to-single" "${twenty[@]}" >"$WORK/tp2pp2-to-single.log" 2>&1 || fail "tp2pp2 -> tp1pp1"
resumed "$WORK/tp2pp2-to-single" "transformer TP=2 x PP=2 checkpoint resumed as one process"
cp -r "$WORK/single" "$WORK/pp1-to-pp2"
pp_train 2 "$WORK/pp1-to-pp2" 2 "${twenty[@]}" --set parallel.dp=1 --set parallel.microbatches=2
resumed "$WORK/pp1-to-pp2" "transformer PP=1 checkpoint resumed as PP=2"

# Exact resume under PP=2 with dropout (each stage's generator state in its shard): steps 1-10, then
# 11-20, against 20 uninterrupted steps. The halves recompute their blocks in backward (selective, then full
# activation checkpointing: each stage's blocks, two micro-batches in flight, the memory's gradient summed
# over the decoder stage's recomputed blocks), which changes no loss.
dropout=(--set model.dropout=0.1 --set train.max_steps=20 --set parallel.dp=1 --set parallel.microbatches=2)
pp_train 2 "$WORK/dropout-reference" 2 "${dropout[@]}"
pp_train 2 "$WORK/dropout-resumed" 2 "${dropout[@]}" --set train.max_steps=10 --set train.activation_checkpointing=selective
pp_train 2 "$WORK/dropout-resumed" 2 "${dropout[@]}" --set train.activation_checkpointing=full
grep -q "resumed from .*/checkpoints/10" "$WORK/dropout-resumed.log" || fail "PP=2 with dropout did not resume"
same_losses "$WORK/dropout-reference" "$WORK/dropout-resumed" \
  "transformer PP=2 (dropout 0.1) resumed at step 10, recomputed (selective, then full)"

# One process evaluates and translates from the PP=2 run (its stages joined): what the single run gives.
same_eval_and_translation "$WORK/pp2-gpipe" "PP=2"

# Bible pairs, token-based batches (the pairs per step, and so the micro-batches' B, vary): PP=2 over 2
# micro-batches gives the single run's losses, and its test BLEU.
train_args() { echo "$(bible_tiny_args "$1") --set checkpoint.every=10 --set decode.batch_size=64 --set decode.max_len_b=10"; }
tiny_train "$WORK/bible-single" >"$WORK/bible-single.log" 2>&1 || { tail "$WORK/bible-single.log"; fail "Bible single run"; }
pp_train 2 "$WORK/bible-pp2" 2 --set parallel.dp=1 --set train.micro_batch_size=4
same_losses_within "$WORK/bible-single" "$WORK/bible-pp2" "Bible pairs, token batches, PP=2 x 2 micro-batches" 1e-5
"$LOOM" eval "$WORK/bible-pp2" --split test --json > "$WORK/bible-pp2.json" 2>/dev/null || fail "loom eval --split test from PP=2"
"$LOOM" eval "$WORK/bible-single" --split test --json > "$WORK/bible-single.json" 2>/dev/null || fail "loom eval --split test"
python3 - "$WORK/bible-single.json" "$WORK/bible-pp2.json" <<'PY' || fail "loom eval --split test: PP=2 differs"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert abs(a["loss"] - b["loss"]) < 1e-5 and a["bleu"] == b["bleu"] and a["sentences"] == b["sentences"] > 0, (a, b)
print(f"Bible test split from the PP=2 checkpoint: loss {b['loss']:.6f} (single {a['loss']:.6f}), BLEU {b['bleu']:.2f}")
PY
# 200 padded tokens: one or two verse pairs per step for 2 micro-batches (a step of one pair leaves a
# micro-batch empty: its stand-in pair runs through the stages and counts for nothing).
small=(--set train.batch_tokens=200 --set train.eval_every=0 --set checkpoint.every=0)
tiny_train "$WORK/bible-small" "${small[@]}" >"$WORK/bible-small.log" 2>&1 || fail "Bible single run, small batches"
pp_train 2 "$WORK/bible-small-pp2" 2 "${small[@]}" --set parallel.dp=1 --set train.micro_batch_size=4
same_losses_within "$WORK/bible-small" "$WORK/bible-small-pp2" "Bible pairs, 1-2 pairs per step, PP=2 x 2 micro-batches" 1e-5

# A pipeline split that does not fit the encoder-decoder, and what does not combine with it: exit 2
# naming the key, before any work.
train_args() { echo "$SRC/configs/reverse-synthetic.yaml --set run.dir=$1"; }
expect_train_config_error "parallel.pp_layers: the stages hold 3 blocks but model.n_encoder_layers + model.n_layers is 4" \
  --set parallel.pp=2 --set 'parallel.pp_layers=[1,2]'
expect_train_config_error "parallel.pp: 5 exceeds model.n_encoder_layers + model.n_layers=4" --set parallel.pp=5
expect_train_config_error "model.max_seq_len: 30 must be a multiple of 4" --set parallel.pp=2 --set parallel.tp=2 \
  --set parallel.sequence_parallel=true --set data.pad_to_multiple=4 --set model.max_seq_len=30
echo "bad encoder-decoder pipeline splits: exit 2 before any work"
echo PASS
