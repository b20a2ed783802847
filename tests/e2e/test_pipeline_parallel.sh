#!/usr/bin/env bash
# Pipeline parallelism under mpirun equals the single-process run of the same config (fp32, dropout off,
# 10 steps, train and valid losses within 1e-5, and the same clipped gradient norms): PP=2 under GPipe and
# 1F1B for the GPT recipe (tied embeddings: the first and last stage each hold the token embedding, their
# gradients summed) and for a LLaMA-style model (RMSNorm, RoPE, SwiGLU, untied head, 4 query heads sharing
# 2 KV heads), DP=2 x PP=2 (GPT) and TP=2 x PP=2 (LLaMA). Checkpoints reshard between pipeline layouts: a
# PP=2 checkpoint (explicit parallel.pp_layers [1, 3]) continues as one process and as PP=4, and a
# single-process one as PP=2, all on the single-process 20-step curve. One process generates and
# evaluates from a PP=2 run. A bad parallel.pp_layers is a config error (exit 2) naming the key.
source "$(dirname "$0")/common.sh"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
common=(--set model.dropout=0 --set train.max_steps=10 --set schedule.total_steps=10 --set train.micro_batch_size=0
        --set train.eval_every=5)
llama=(--set model.norm=rmsnorm --set model.position=rope --set model.activation=swiglu --set model.bias=false
       --set model.tie_embeddings=false --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=176)

mpi_train() {  # mpi_train RANKS RUN_DIR [--set ...]
  local ranks=$1 dir=$2; shift 2
  # shellcheck disable=SC2046
  "${MPIRUN[@]}" -np "$ranks" "$LOOM" train $(tiny_args "$dir") "$@" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; return 1; }
}
same_curve() {  # same_curve REFERENCE_RUN RUN WHAT: losses within 1e-5, grad norms within 1e-4 relative
  same_losses_within "$1" "$2" "$3" 1e-5
  same_grad_norms "$1" "$2" "$3"
}

for family in gpt llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  tiny_train "$WORK/$family-single" "${common[@]}" --set train.micro_batch_size=8 "${extra[@]}" >"$WORK/$family-single.log" 2>&1 \
    || fail "$family single-process run failed"
  for schedule in gpipe 1f1b; do
    run="$WORK/$family-pp2-$schedule"
    mpi_train 2 "$run" "${common[@]}" "${extra[@]}" --set parallel.pp=2 --set parallel.dp=1 \
      --set parallel.microbatches=4 --set parallel.pp_schedule=$schedule || fail "$family PP=2 $schedule run failed"
    grep -q "layout dp=1 cp=1 tp=1 pp=2" "$run.log" || fail "$family PP=2 did not run with pp=2"
    same_curve "$WORK/$family-single" "$run" "$family PP=2 $schedule"
  done
done
mpi_train 4 "$WORK/gpt-dp2pp2" "${common[@]}" --set parallel.pp=2 --set parallel.dp=2 --set parallel.microbatches=2 \
  || fail "GPT DP=2 x PP=2 run failed"
same_curve "$WORK/gpt-single" "$WORK/gpt-dp2pp2" "gpt DP=2 x PP=2"
mpi_train 4 "$WORK/llama-tp2pp2" "${common[@]}" "${llama[@]}" --set parallel.pp=2 --set parallel.tp=2 --set parallel.dp=1 \
  --set parallel.microbatches=2 --set parallel.pp_schedule=gpipe || fail "LLaMA TP=2 x PP=2 run failed"
same_curve "$WORK/llama-single" "$WORK/llama-tp2pp2" "llama TP=2 x PP=2"

# The PP=2 checkpoint: one shard per stage, each with only its own blocks, the manifest listing them.
python3 - "$WORK/gpt-pp2-1f1b/checkpoints/10" <<'PY' || fail "PP=2 checkpoint layout"
import json, sys
m = json.load(open(f"{sys.argv[1]}/manifest.json"))
assert m["layout"]["pp"] == 2 and {"shard-dp0-tp0-pp0.pt", "shard-dp0-tp0-pp1.pt"} <= set(m["files"]), m["files"]
first, last = (set(n) for n in m["pipeline"]["names"])
assert m["pipeline"]["layers"] == [1, 1], m["pipeline"]
assert "blocks.0.ln1.weight" in first and "blocks.1.ln1.weight" in last and "blocks.1.ln1.weight" not in first
assert "position_embedding.weight" in first and "final_norm.weight" in last and "final_norm.weight" not in first
assert "token_embedding.weight" in first and "token_embedding.weight" in last  # tied: on both
print(f"PP=2 checkpoint: stages hold {len(first)} and {len(last)} tensors")
PY

# Resharding (GPT with tied embeddings, 4 blocks): 20 single-process steps against 10 steps under one
# layout then 10 under another.
twenty=(--set model.dropout=0 --set train.max_steps=20 --set schedule.total_steps=20 --set train.micro_batch_size=0
        --set train.eval_every=5 --set model.n_layers=4)
tiny_train "$WORK/single20" "${twenty[@]}" --set train.micro_batch_size=8 >"$WORK/single20.log" 2>&1 || fail "single 20 steps"
mpi_train 2 "$WORK/pp2-to-pp1" "${twenty[@]}" --set parallel.pp=2 --set 'parallel.pp_layers=[1,3]' \
  --set parallel.microbatches=2 --set train.max_steps=10 || fail "pp2 -> pp1: first half failed"
cp -r "$WORK/pp2-to-pp1" "$WORK/pp2-to-pp4"
tiny_train "$WORK/pp2-to-pp1" "${twenty[@]}" --set train.micro_batch_size=8 >"$WORK/pp2-to-pp1.log" 2>&1 \
  || { tail -5 "$WORK/pp2-to-pp1.log"; fail "pp2 -> pp1: second half failed"; }
grep -q "resumed from .*/checkpoints/10" "$WORK/pp2-to-pp1.log" || fail "pp2 -> pp1 did not resume from step 10"
same_curve "$WORK/single20" "$WORK/pp2-to-pp1" "PP=2 checkpoint resumed as PP=1"
mpi_train 4 "$WORK/pp2-to-pp4" "${twenty[@]}" --set parallel.pp=4 --set parallel.microbatches=4 \
  || fail "pp2 -> pp4: second half failed"
grep -q "resumed from .*/checkpoints/10" "$WORK/pp2-to-pp4.log" || fail "pp2 -> pp4 did not resume from step 10"
same_curve "$WORK/single20" "$WORK/pp2-to-pp4" "PP=2 checkpoint resumed as PP=4"
tiny_train "$WORK/pp1-to-pp2" "${twenty[@]}" --set train.micro_batch_size=8 --set train.max_steps=10 >/dev/null 2>&1 \
  || fail "pp1 -> pp2: first half failed"
mpi_train 2 "$WORK/pp1-to-pp2" "${twenty[@]}" --set parallel.pp=2 --set parallel.pp_schedule=gpipe \
  --set parallel.microbatches=2 || fail "pp1 -> pp2: second half failed"
grep -q "resumed from .*/checkpoints/10" "$WORK/pp1-to-pp2.log" || fail "pp1 -> pp2 did not resume from step 10"
same_curve "$WORK/single20" "$WORK/pp1-to-pp2" "PP=1 checkpoint resumed as PP=2"

# One process generates and evaluates from a PP=2 run (its stages joined): what the single process gives.
gen() { "$LOOM" generate "$1" --step 10 --prompt "And God said" --max-new-tokens 16 --temperature 0 2>/dev/null; }
from_pp2=$(gen "$WORK/llama-pp2-1f1b"); from_single=$(gen "$WORK/llama-single")
[ -n "$from_pp2" ] && [ "$from_pp2" = "$from_single" ] || fail "generation from the PP=2 run: '$from_pp2' vs '$from_single'"
echo "generation from the PP=2 checkpoint: '$from_pp2'"
python3 - <(
  "$LOOM" eval "$WORK/gpt-pp2-gpipe" --step 10 --json 2>/dev/null) <("$LOOM" eval "$WORK/gpt-single" --step 10 --json 2>/dev/null) <<'PY' \
  || fail "loom eval of the PP=2 run differs from the single process"
import json, sys
a, b = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and abs(a["loss"] - b["loss"]) < 1e-5, (a, b)
print(f"loom eval from the PP=2 checkpoint: loss {a['loss']:.6f} (single process {b['loss']:.6f})")
PY

# A pipeline split that does not fit the model: exit 2 naming the key, before any work.
expect_train_config_error "parallel.pp_layers: the stages hold 3 blocks but model.n_layers is 2" \
  --set parallel.pp=2 --set 'parallel.pp_layers=[1,2]'
expect_train_config_error "parallel.pp_layers: lists 3 stages but parallel.pp is 2" --set parallel.pp=2 --set 'parallel.pp_layers=[1,1,1]'
expect_train_config_error "parallel.pp_schedule: 'zigzag' is not one of gpipe, 1f1b" --set parallel.pp_schedule=zigzag
echo "bad pipeline splits: exit 2 before any work"
echo PASS
