#!/usr/bin/env bash
# The LLaMA recipe at tiny size (RMSNorm, RoPE, SwiGLU, no biases, untied head, 4 query heads sharing 2
# key/value heads) on KJV: the loss falls over 40 steps; a run SIGKILLed right after its step-20 checkpoint
# resumes to the very losses of the uninterrupted run (dropout on, so RNG state matters); generation with
# and without the KV cache agrees, also past the context.
source "$(dirname "$0")/common.sh"
llama=(--set model.norm=rmsnorm --set model.position=rope --set model.activation=swiglu --set model.bias=false
       --set model.tie_embeddings=false --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=176)
steps=(--set train.max_steps=120 --set checkpoint.every=20 --set train.eval_every=20)
reference=$WORK/reference
tiny_train "$reference" "${llama[@]}" "${steps[@]}" >"$reference.log" 2>&1 || { cat "$reference.log"; fail "training failed"; }
grep -q "position: rope" "$reference/config.yaml" || fail "the resolved config lost the variant"

get() { python3 "$SRC/tests/e2e/metrics.py" get "$reference" "$@"; }
first=$(get train 1 loss); at40=$(get train 40 loss); valid20=$(get valid 20 loss); valid120=$(get valid 120 loss)
echo "train loss $first -> $at40 at step 40, valid loss $valid20 -> $valid120"
python3 -c "import sys; sys.exit(not ($at40 < $first - 1.0))" || fail "train loss did not fall by 1 nat in 40 steps"
python3 -c "import sys; sys.exit(not ($valid120 < $valid20 - 0.2))" || fail "valid loss did not fall"

sigkill_resume "$WORK/killed" 20 "${llama[@]}" "${steps[@]}"
[ "$killed_at" -lt 120 ] || fail "SIGKILL came too late to test anything (the run had finished)"
grep -q "resumed from .*/checkpoints/$killed_at" "$WORK/killed.log" || fail "did not resume from step $killed_at"
same_losses "$reference" "$WORK/killed" "SIGKILL after checkpoint 20 (stopped at $killed_at)"

gen() { "$LOOM" generate "$reference" --prompt "And God said" --max-new-tokens 40 --temperature 0 "$@" 2>/dev/null; }
cached=$(gen); uncached=$(gen --no-cache)
echo "greedy: $cached"
[ -n "$cached" ] && [ "$cached" = "$uncached" ] || fail "cached and uncached greedy output differ: '$cached' vs '$uncached'"
echo PASS
