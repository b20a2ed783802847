#!/usr/bin/env bash
# T5 (the encoder-decoder with T5's options: relative position bias, RMSNorm, no biases, unscaled attention,
# the scaled tied head; configs/t5-kjv-es.yaml made tiny) on the Bible pairs under mpirun equals the
# single-process run of the same token-based batches (fp32, dropout off, 20 steps with a validation loss at 10
# and 20; losses within 1e-5, clipped gradient norms within 1e-4 relative; in bf16, DP=2 within twice the single
# process's own bf16 error): DP=2, TP=2 (heads, MLP, the tied
# vocabulary, the relative bias tables by head), PP=2 with parallel.pp_layers [1, 3] (the first stage computes
# both stacks' biases and passes them on with the encoder's and the decoder's hidden states; the second holds
# an encoder block and both decoder blocks), PP=2 GPipe split between the stacks (only the decoder's bias
# passed on) and ZeRO-3 at DP=2, and so does activation checkpointing (the bias a side input of every
# recomputed block). A TP=2 checkpoint at step 10 resumed by one
# process continues the single-process curve; with dropout, a run resumed at the same layout repeats its losses
# bit for bit. A tiny T5 trained on the synthetic reversal task, exported
# (`loom export`) and read back (model.init_from) evaluates as the run (another bucket count refused naming
# both), translates in transformers (generate, num_beams=1) exactly as `loom translate --beam 1`
# does, token for token, and its cached beam search equals the one that recomputes the whole prefix. Span
# corruption pretraining on the KJV token files lowers the loss and gives the same curve at DP=2.
source "$(dirname "$0")/common.sh"
: "${BIBLE_MT_DATA:?set BIBLE_MT_DATA to prepared English-Spanish data}"
tiny_t5=(--set model.d_model=32 --set model.n_layers=2 --set model.n_encoder_layers=2 --set model.n_heads=2
         --set model.head_dim=8 --set model.d_ff=48 --set model.relative_buckets=8 --set model.relative_max_distance=20)
train_args() {
  local D=$BIBLE_MT_DATA
  echo "$SRC/configs/t5-kjv-es.yaml --set run.dir=$1 --set data.train=$D/train.bin" \
       "--set data.valid=$D/valid.bin --set data.test=$D/test.bin --set tokenizer.model=$D/tokenizer.model" \
       "${tiny_t5[*]} --set model.dropout=0 --set precision.dtype=fp32" \
       "--set train.batch_tokens=1000 --set train.batch_size=8 --set train.max_steps=20 --set train.log_every=1" \
       "--set train.eval_every=10 --set train.eval_batches=1 --set checkpoint.every=0 --set runtime.threads=1" \
       "--set schedule.warmup_steps=5 --set optim.lr=0.1 --set decode.beam=1 --set decode.batch_size=8" \
       "--set runtime.device=$E2E_DEVICE --set runtime.deterministic=$([ "$E2E_DEVICE" = cpu ] && echo false || echo true)"
}

tiny_train "$WORK/single" >"$WORK/single.log" 2>&1 || { tail -20 "$WORK/single.log"; fail "single run"; }
python3 - "$WORK/single" <<'PY' || fail "a T5 loss that did not fall, or no validation rows"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
train = [r["loss"] for r in rows if r["split"] == "train"]
assert [r["step"] for r in rows if r["split"] == "valid"] == [10, 20], rows
assert len(train) == 20 and train[-1] < train[0], train
print(f"single: train loss {train[0]:.3f} -> {train[-1]:.3f}")
PY
# Activation checkpointing recomputes every block from its input and the shared bias (a side input whose
# gradient sums the recomputed blocks' in another order): the same curve within 1e-5.
tiny_train "$WORK/recompute" --set train.activation_checkpointing=full >"$WORK/recompute.log" 2>&1 \
  || fail "activation checkpointing"
same_losses_and_grad_norms "$WORK/single" "$WORK/recompute" "T5 with activation checkpointing (full)"
mpi_train 2 "$WORK/dp2" --set parallel.dp=2 || fail "DP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2" "T5 DP=2"
# bf16 autocast: DP=2 sums its gradients in another order, so its curve is held within twice the single
# process's own bf16 error (its largest distance from $WORK/single, the same run in fp32).
tiny_train "$WORK/bf16" --set precision.dtype=bf16 >"$WORK/bf16.log" 2>&1 || fail "bf16 run"
mpi_train 2 "$WORK/bf16-dp2" --set precision.dtype=bf16 --set parallel.dp=2 || fail "bf16 DP=2"
same_losses_within_dtype_error "$WORK/bf16" "$WORK/bf16-dp2" "$WORK/single" "T5 bf16 autocast, DP=2" 2
mpi_train 2 "$WORK/tp2" --set parallel.tp=2 --set parallel.dp=1 || fail "TP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/tp2" "T5 TP=2"
mpi_train 2 "$WORK/pp2" --set parallel.pp=2 --set parallel.dp=1 --set parallel.microbatches=2 \
  --set 'parallel.pp_layers=[1,3]' || fail "PP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/pp2" "T5 PP=2, pp_layers [1, 3]"
mpi_train 2 "$WORK/pp2-split" --set parallel.pp=2 --set parallel.dp=1 --set parallel.microbatches=2 \
  --set parallel.pp_schedule=gpipe || fail "PP=2 [2, 2] failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/pp2-split" "T5 PP=2 gpipe, the encoder | the decoder"
mpi_train 2 "$WORK/zero3" --set parallel.dp=2 --set parallel.zero=3 || fail "ZeRO-3 DP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/zero3" "T5 ZeRO-3 DP=2"

# TP=2 for 10 steps, then one process from its checkpoint to 20: the single-process curve (inverse-sqrt
# does not depend on train.max_steps).
resumed_as_one_process "$WORK/single" "$WORK/tp2-to-single" "T5 TP=2 checkpoint resumed as one process" \
  --set parallel.tp=2 --set parallel.dp=1
# Dropout on: a run stopped at its step-10 checkpoint and trained on to 20 repeats the uninterrupted losses bit
# for bit (the token-based batches and dropout's RNG state come back from the checkpoint).
resume_repeats_losses "T5 resumed at step 10 with dropout" --set model.dropout=0.1

# Generation: a tiny T5 learns to reverse token sequences, then loom and transformers decode it greedily.
t5_reverse=(--set model.norm=rmsnorm --set model.norm_position=pre --set model.norm_eps=1e-6
            --set model.position=relative --set model.relative_buckets=8 --set model.relative_max_distance=20
            --set model.bias=false --set model.scale_attention=false --set model.scale_embeddings=false
            --set model.scale_head=true --set train.max_steps=300 --set checkpoint.every=300 --set train.eval_every=300)
# shellcheck disable=SC2046
"$LOOM" train $(reverse_tiny_args "$WORK/reverse") "${t5_reverse[@]}" >"$WORK/reverse.log" 2>&1 \
  || { tail "$WORK/reverse.log"; fail "T5 on the reversal task"; }
"$LOOM" export "$WORK/reverse" --out "$WORK/reverse-hf" >/dev/null 2>&1 || fail "loom export of a T5 run"
# model.init_from of the exported directory evaluates as the run itself; other buckets are refused naming both.
"$LOOM" eval "$WORK/reverse" --json >"$WORK/run-eval.json" 2>/dev/null || fail "loom eval of the T5 run"
"$LOOM" eval "$WORK/reverse/config.yaml" --set model.init_from="$WORK/reverse-hf" --json >"$WORK/hf-eval.json" 2>/dev/null \
  || fail "loom eval with model.init_from of the exported T5"
python3 - "$WORK/run-eval.json" "$WORK/hf-eval.json" <<'PY' || fail "the exported T5 read back evaluates otherwise"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert abs(a["loss"] - b["loss"]) < 1e-6 and a["exact_match"] == b["exact_match"], (a, b)
print(f"model.init_from of loom's export: valid loss {b['loss']:.7f} (the run's {a['loss']:.7f})")
PY
set +e
out=$("$LOOM" eval "$WORK/reverse/config.yaml" --set model.init_from="$WORK/reverse-hf" --set model.relative_buckets=16 2>&1)
code=$?
set -e
[ $code -eq 2 ] && grep -q "relative_attention_num_buckets=8 but model.relative_buckets=16" <<<"$out" \
  || fail "a T5 file of 8 buckets under model.relative_buckets=16: expected exit 2 naming both, got $code: $out"
printf '5 9 14 3 22\n7 7 8\n20 19 18 17 16 15 14 13 12 11\n4 4 4 4\n23 3\n' > "$WORK/source.txt"
"$LOOM" translate "$WORK/reverse" --beam 1 < "$WORK/source.txt" > "$WORK/loom-greedy.txt" || fail "loom translate --beam 1"
"$LOOM" translate "$WORK/reverse" --beam 4 < "$WORK/source.txt" > "$WORK/cached.txt" || fail "loom translate --beam 4"
"$LOOM" translate "$WORK/reverse" --beam 4 --no-cache < "$WORK/source.txt" > "$WORK/recomputed.txt" \
  || fail "loom translate --no-cache"
diff "$WORK/cached.txt" "$WORK/recomputed.txt" || fail "beam search with the KV cache differs from recomputing"
python3 - "$WORK/reverse-hf" "$WORK/source.txt" "$WORK/loom-greedy.txt" <<'PY' || fail "transformers' greedy T5 differs"
import json, sys
import torch
from transformers import T5ForConditionalGeneration
from transformers.utils import logging
logging.disable_progress_bar()
model = T5ForConditionalGeneration.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
config = json.load(open(f"{sys.argv[1]}/config.json"))
assert (config["decoder_start_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 0), config
sources = [[int(t) for t in l.split()] for l in open(sys.argv[2])]
ours = [[int(t) for t in l.split()] for l in open(sys.argv[3])]
exact = ended = 0
for source, mine in zip(sources, ours):
    with torch.no_grad():  # decode.max_len_a 1, max_len_b 5: at most len + 5 tokens, eos included
        out = model.generate(torch.tensor([source]), num_beams=1, do_sample=False, max_new_tokens=len(source) + 5)
    tokens = out[0].tolist()[1:]  # after the decoder start
    if 2 in tokens:  # it ended within loom's maximum length: the same tokens
        tokens = tokens[:tokens.index(2)]
        assert tokens == mine, (source, tokens, mine)
        ended += 1
    else:  # loom ended it at its maximum length (eos forced there): what it wrote comes first
        assert tokens[:len(mine)] == mine and len(mine) >= len(source), (source, tokens, mine)
    exact += mine == source[::-1]
assert ended >= len(sources) - 1, ended
print(f"transformers generate(num_beams=1) = loom translate --beam 1 on {len(sources)} lines ({ended} ended by eos, "
      f"{exact} reversed exactly)")
PY

# Span corruption pretraining on the KJV token files (32-token windows: 5 noise tokens in 2 spans, the
# sentinels ids 1025 and 1024 above the tokenizer's 1024): the loss falls, and DP=2 gives the same curve.
train_args() {
  echo "$SRC/configs/t5-kjv-es.yaml --set run.dir=$1 --set data.train=$KJV_DATA/train.bin" \
       "--set data.valid=$KJV_DATA/valid.bin --set tokenizer.model=$KJV_DATA/tokenizer.model" \
       "--set data.span_corruption=true --set model.vocab_size=1026 --set data.seq_len=32 --set model.max_seq_len=64" \
       "${tiny_t5[*]} --set model.dropout=0 --set precision.dtype=fp32 --set train.batch_tokens=0" \
       "--set train.batch_size=8 --set train.max_steps=20 --set train.log_every=1 --set train.eval_every=10" \
       "--set train.eval_batches=2 --set checkpoint.every=0 --set runtime.threads=1 --set schedule.warmup_steps=5" \
       "--set optim.lr=0.1 --set runtime.device=$E2E_DEVICE"
}
tiny_train "$WORK/span" >"$WORK/span.log" 2>&1 || { tail -20 "$WORK/span.log"; fail "span corruption run"; }
python3 - "$WORK/span" <<'PY' || fail "span corruption: no validation rows, or a loss that did not fall"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
train = [r["loss"] for r in rows if r["split"] == "train"]
assert [r["step"] for r in rows if r["split"] == "valid"] == [10, 20] and train[-1] < train[0] - 0.3, rows
print(f"span corruption: train loss {train[0]:.3f} -> {train[-1]:.3f}")
PY
mpi_train 2 "$WORK/span-dp2" --set parallel.dp=2 || fail "span corruption DP=2"
same_losses_and_grad_norms "$WORK/span" "$WORK/span-dp2" "T5 span corruption DP=2"
echo "PASS"
