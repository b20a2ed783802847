#!/usr/bin/env bash
# Expert parallelism (parallel.ep, models/moe_dispatch.h) on the tiny Mixtral-shaped MoE of test_moe.sh
# (moe_setup.sh): 20 fp32 steps, dropout 0, dropless, against the single process of the same global batch and
# micro-batches (losses within 1e-5, clipped gradient norms within 1e-3 relative as test_moe.sh's): EP=2 at
# DP=2 (each rank keeps 2 of the 4 experts, tokens exchanged by all-to-all), EP=2 and EP=4 at DP=4, EP=2 x TP=2
# (each TP rank dispatches the group's replicated tokens in its own ep group), EP=2 x PP=2 with ZeRO-1 (each
# stage's experts split over its ep group), EP=2 with ZeRO-3 at DP=4 (expert units gathered over the expert
# shard group), the Qwen-style variant (a gated shared expert, the expert bias) at EP=2 with ZeRO-1, with and
# without activation checkpointing, and EP folded over dp x cp: EP=4 over DP=2 x CP=2 with ZeRO-2, its
# checkpoint resumed at EP=2 over CP=2 alone (DP=1), then at EP=2 inside CP=4 with ZeRO-3. Checkpoints name
# each expert tensor whole: a run hops EP=4 -> EP=2 x TP=2 -> EP=2 x PP=2 -> one process on the uninterrupted
# curve, and an EP=2 run with dropout resumed at step 10 repeats its losses bit for bit. The layouts expert
# parallelism does not take are refused naming parallel.ep.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/moe_setup.sh"

tiny_train "$WORK/single" "${moe[@]}" >"$WORK/single.log" 2>&1 || { tail -20 "$WORK/single.log"; fail "single run"; }

moe_mpi 2 "$WORK/ep2" --set parallel.ep=2
grep -q "dp=2 (ep=2)" "$WORK/ep2.log" || fail "the layout line does not say ep=2"
same_moe_curve "$WORK/single" "$WORK/ep2" "MoE EP=2 DP=2"
moe_mpi 4 "$WORK/ep2-dp4" --set parallel.ep=2
same_moe_curve "$WORK/single" "$WORK/ep2-dp4" "MoE EP=2 DP=4"
moe_mpi 4 "$WORK/ep4" --set parallel.ep=4
same_moe_curve "$WORK/single" "$WORK/ep4" "MoE EP=4 DP=4"
# With TP the ep group is the ranks of one tp index: every TP rank dispatches the same tokens; the gradient norm
# counts the TP-split dense parameters over the TP group and each expert once.
moe_mpi 4 "$WORK/ep2-tp2" --set parallel.ep=2 --set parallel.tp=2
grep -q "dp=2 (ep=2) cp=1 tp=2" "$WORK/ep2-tp2.log" || fail "the layout line does not say ep=2 and tp=2"
same_moe_curve "$WORK/single" "$WORK/ep2-tp2" "MoE EP=2 x TP=2"
moe_mpi 4 "$WORK/ep2-pp2" --set parallel.ep=2 --set parallel.pp=2 --set parallel.zero=1
same_moe_curve "$WORK/single" "$WORK/ep2-pp2" "MoE EP=2 x PP=2 ZeRO-1"
# ZeRO-3 at DP=4: an MoE block's unit gathers its experts over the 2 ranks holding them (the expert shard group),
# its dense parameters over all 4; an ep rank none of whose experts gets a token still reduces their (zero)
# gradients in step with the rank sharing them.
moe_mpi 4 "$WORK/ep2-zero3" --set parallel.ep=2 --set parallel.zero=3
same_moe_curve "$WORK/single" "$WORK/ep2-zero3" "MoE EP=2 DP=4 ZeRO-3"
# The routing metrics are the single process's too (each rank's load summed over DP).
python3 - "$WORK/single" "$WORK/ep2" "$WORK/ep4" "$WORK/ep2-tp2" "$WORK/ep2-pp2" <<'PY' || fail "the MoE metrics under ep differ from the single process's"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
single = moe(sys.argv[1])
for d in sys.argv[2:]:
    for a, b in zip(single, moe(d), strict=True):
        for k in a:
            assert (a[k]["max_load"], a[k]["mean_load"]) == (b[k]["max_load"], b[k]["mean_load"]), (d, k)
print("MoE loads under EP=2, EP=4, EP=2 x TP=2 and EP=2 x PP=2: the single process's")
PY

# Shared expert and expert bias, ZeRO-1.
tiny_train "$WORK/qwen" "${moe[@]}" "${qwen[@]}" >"$WORK/qwen.log" 2>&1 || { tail -20 "$WORK/qwen.log"; fail "qwen-style run"; }
moe_mpi 2 "$WORK/qwen-ep2" "${qwen[@]}" --set parallel.ep=2 --set parallel.zero=1
same_moe_curve "$WORK/qwen" "$WORK/qwen-ep2" "MoE shared expert + expert bias, EP=2 DP=2 ZeRO-1"
# Activation checkpointing under ep: each MoE layer's re-run in backward replays its first run's exchanges (no
# second dispatch; tests/unit/test_all_to_all.cpp counts them), the shared expert's halves overlapping the rows
# in flight: the curve of the same run without checkpointing and of the single process.
moe_mpi 2 "$WORK/qwen-ep2-recompute" "${qwen[@]}" --set parallel.ep=2 --set parallel.zero=1 \
  --set train.activation_checkpointing=full
same_moe_curve "$WORK/qwen-ep2" "$WORK/qwen-ep2-recompute" "MoE EP=2 with activation checkpointing against without"
same_moe_curve "$WORK/qwen" "$WORK/qwen-ep2-recompute" "MoE EP=2 with activation checkpointing"

# Resume across layouts: 5 steps at EP=4 (4 ranks), to 10 at EP=2 x TP=2 (TP-split dense tensors beside ep-split
# experts), to 15 at EP=2 x PP=2 (a stage's file holds its experts), to 20 in one process: the uninterrupted curve.
hop() {  # hop RANKS STEPS [--set ...]
  local ranks=$1 steps=$2; shift 2
  if [ "$ranks" -eq 1 ]; then
    tiny_train "$WORK/hops" "${moe[@]}" "$@" >>"$WORK/hops.log" 2>&1 || { tail -20 "$WORK/hops.log"; fail "hop to $steps"; }
  else
    # shellcheck disable=SC2046
    "${MPIRUN[@]}" -np "$ranks" "$LOOM" train $(train_args "$WORK/hops") "${moe[@]}" --set parallel.dp=-1 \
      --set train.max_steps="$steps" --set checkpoint.every=5 "$@" >>"$WORK/hops.log" 2>&1 \
      || { tail -20 "$WORK/hops.log"; fail "hop to $steps"; }
  fi
  [ "$steps" -eq 5 ] || [ "$(grep -c "resumed from .*/checkpoints/$((steps - 5)) " "$WORK/hops.log")" -ge 1 ] \
    || fail "the hop to $steps did not resume from step $((steps - 5))"
}
hop 4 5 --set parallel.ep=4
ls "$WORK/hops/checkpoints/5/" | grep -q "shard-dp3" || fail "EP=4 wrote no file for its last ep rank"
hop 4 10 --set parallel.ep=2 --set parallel.tp=2
ls "$WORK/hops/checkpoints/10/" | grep -q "shard-dp1-tp1" || fail "EP=2 x TP=2 wrote no file for ep rank 1, tp rank 1"
hop 4 15 --set parallel.ep=2 --set parallel.pp=2
ls "$WORK/hops/checkpoints/15/" | grep -q "shard-dp1-tp0-pp1" || fail "EP=2 x PP=2 wrote no file for ep rank 1 of stage 1"
hop 1 20
same_train_losses "$WORK/single" "$WORK/hops" "MoE resumed EP=4 -> EP=2 x TP=2 -> EP=2 x PP=2 -> one process" 20

# Dropout under EP: an EP=2 run stopped at its step-10 checkpoint and resumed at EP=2 repeats the uninterrupted
# EP=2 run's losses bit for bit (each rank's dropout streams come back from the checkpoint).
dropout=(--set model.dropout=0.1 --set checkpoint.every=10 --set parallel.ep=2)
moe_mpi 2 "$WORK/drop-whole" "${dropout[@]}"
moe_mpi 2 "$WORK/drop-resumed" "${dropout[@]}" --set train.max_steps=10
mv "$WORK/drop-resumed.log" "$WORK/drop-first.log"
moe_mpi 2 "$WORK/drop-resumed" "${dropout[@]}"
grep -q "resumed from .*/checkpoints/10" "$WORK/drop-resumed.log" || fail "the EP=2 dropout run did not resume"
same_losses "$WORK/drop-whole" "$WORK/drop-resumed" "MoE EP=2 with dropout 0.1, resumed at step 10"
python3 - "$WORK/single" "$WORK/drop-whole" <<'PY' || fail "dropout 0.1 did not change the EP=2 losses"
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"] for d in sys.argv[1:3])
assert max(abs(x - y) for x, y in zip(a, b)) > 1e-3
PY

# One process loads what expert parallelism wrote (loom eval, generate and export): the EP=2 x TP=2 and ZeRO-3
# runs' step-20 checkpoints evaluate to the single run's validation loss.
for run in single ep2-tp2 ep2-zero3; do
  "$LOOM" eval "$WORK/$run" --json > "$WORK/eval-$run.json" 2>"$WORK/eval-$run.log" || { tail -5 "$WORK/eval-$run.log"; fail "loom eval $run"; }
done
python3 - "$WORK" <<'PY' || fail "loom eval of an expert-parallel checkpoint"
import json, sys
loss = {r: json.load(open(f"{sys.argv[1]}/eval-{r}.json"))["loss"] for r in ("single", "ep2-tp2", "ep2-zero3")}
assert all(abs(v - loss["single"]) < 1e-5 for v in loss.values()), loss
print("loom eval of the EP=2 x TP=2 and EP=2 ZeRO-3 checkpoints in one process:", loss)
PY

# loom bench under ep: the time each step spent blocked in the MoE all-to-alls (exposed ep communication), a
# positive part of the step; none without ep.
for ep in 1 2; do
  "${MPIRUN[@]}" -np 2 "$LOOM" bench "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=512 "${moe[@]}" \
    --set parallel.dp=2 --set parallel.ep=$ep --steps 2 --warmup 1 --json > "$WORK/bench-ep$ep.json" 2>"$WORK/bench-ep$ep.log" \
    || { tail -5 "$WORK/bench-ep$ep.log"; fail "loom bench at ep $ep"; }
done
python3 - "$WORK/bench-ep1.json" "$WORK/bench-ep2.json" <<'PY' || fail "loom bench's exposed ep communication"
import json, sys
one, two = (json.load(open(f)) for f in sys.argv[1:3])
assert one["exposed_ep_communication_ms"] == 0, one
assert 0 < two["exposed_ep_communication_ms"] < two["step_ms_mean"], two
print(f"exposed ep communication at ep 2: {two['exposed_ep_communication_ms']:.2f} of {two['step_ms_mean']:.2f} ms a step")
PY

# loom info: ep 2 keeps half of each block's experts (weights, gradients; ZeRO-1's optimizer shard is unchanged:
# the experts shard over dp / ep ranks) and sends the routed slots by all-to-all. Under TP=2 every TP rank holds
# its experts whole (not 1/tp of them); under PP=2 a rank sends its stage's blocks' slots; under ZeRO-3 a rank
# reduce-scatters only its experts' gradients, and its shard is as large as without ep.
info() {  # info NAME [--set ...]
  local name=$1; shift
  # shellcheck disable=SC2046
  "$LOOM" info $(train_args "$WORK/info") "${moe[@]}" "$@" --json > "$WORK/info-$name.json" || fail "loom info $name"
}
for ep in 1 2; do
  info "ep$ep" --set parallel.dp=2 --set parallel.ep=$ep --set parallel.zero=1
  info "tp2-ep$ep" --set parallel.dp=2 --set parallel.tp=2 --set parallel.ep=$ep
  info "zero3-ep$ep" --set parallel.dp=4 --set parallel.ep=$ep --set parallel.zero=3
done
info pp2-ep2 --set parallel.dp=2 --set parallel.pp=2 --set parallel.ep=2
# Folded over dp x cp: EP=2 over CP=2 alone (DP=1), and EP=4 over DP=2 x CP=2 beside the same layout without ep.
info cp2-ep2 --set parallel.dp=1 --set parallel.cp=2 --set parallel.ep=2
for ep in 1 4; do info "cp2-ep$ep" --set parallel.dp=2 --set parallel.cp=2 --set parallel.ep=$ep --set parallel.zero=1; done
python3 - "$WORK" <<'PY' || fail "loom info under ep"
import json, sys
info = lambda name: json.load(open(f"{sys.argv[1]}/info-{name}.json"))
one, two = info("ep1"), info("ep2")
C, F, E, k, L, T = 64, 48, 4, 2, 3, 4 * 32  # micro-batches of 4 x 32 tokens, 2 per step at dp 2
experts_not_held = L * (E - E // 2) * 3 * C * F
assert one["memory"]["weights"] - two["memory"]["weights"] == 4 * experts_not_held, (one["memory"], two["memory"])
assert one["memory"]["optimizer"] == two["memory"]["optimizer"], (one["memory"], two["memory"])
assert one["communication"]["all_to_all"] == 0
# Every routed slot's row (fp32) out and back, forward and backward; half of them leave the rank.
assert two["communication"]["all_to_all"] == L * 2 * 4 * T * k * C * 4 // 2, two["communication"]
tp1, tp2 = info("tp2-ep1"), info("tp2-ep2")
assert tp1["memory"]["weights"] - tp2["memory"]["weights"] == 4 * experts_not_held, (tp1["memory"], tp2["memory"])
assert tp2["communication"]["all_to_all"] == two["communication"]["all_to_all"], tp2["communication"]
# 3 blocks over 2 stages: the busier stage has 2 MoE blocks.
assert info("pp2-ep2")["communication"]["all_to_all"] == 2 * 2 * 4 * T * k * C * 4 // 2
z1, z2 = info("zero3-ep1"), info("zero3-ep2")
assert z1["memory"]["weights"] == z2["memory"]["weights"], (z1["memory"], z2["memory"])
assert z1["communication"]["reduce_scattered"] - z2["communication"]["reduce_scattered"] == 4 * experts_not_held
assert z2["memory"]["gathered"] < z1["memory"]["gathered"], (z1["memory"], z2["memory"])
# A CP rank routes half of each sequence: at DP=1 its 4 micro-batches of 4 x 16 tokens send what DP=2's 2 of 4 x 32
# do; EP=4 over DP=2 x CP=2 holds one expert of four, sends 3/4 of its slots, and its ZeRO-1 optimizer shard (the
# dense parameters over 4 ranks, its expert over the 1 rank holding it) is that of ep 1.
assert info("cp2-ep2")["communication"]["all_to_all"] == two["communication"]["all_to_all"], info("cp2-ep2")["communication"]
c1, c4 = info("cp2-ep1"), info("cp2-ep4")
assert c1["memory"]["weights"] - c4["memory"]["weights"] == 4 * L * (E - E // 4) * 3 * C * F, (c1["memory"], c4["memory"])
assert c1["memory"]["optimizer"] == c4["memory"]["optimizer"], (c1["memory"], c4["memory"])
assert c4["communication"]["all_to_all"] == L * 2 * 4 * (T // 2) * k * C * 4 * 3 // 4, c4["communication"]
assert c4["layout"]["ep"] == 4 and c4["layout"]["cp"] == 2 and c4["layout"]["dp"] == 2, c4["layout"]
print("loom info: ep 2 weights", two["memory"]["weights"], "all-to-all bytes per step", two["communication"]["all_to_all"],
      "; under TP=2 weights", tp2["memory"]["weights"], "; ZeRO-3 gathered", z2["memory"]["gathered"])
PY

# Expert parallelism folded over dp x cp (Megatron's: an ep group is ep consecutive ranks of dp x cp, cp
# innermost; parallel/mesh.h). Steps 1-10 at DP=2 x CP=2 with EP=4 and ZeRO-2 (4 ranks, one ep group spanning
# both cp and dp: a rank holds one expert, its cp peer another); its step-10 checkpoint (each rank's file holding
# its expert, cp rank 1's too) resumed for steps 11-15 at DP=1 x CP=2 with EP=2 (2 ranks: the ep group is the
# cp pair, each holding two experts it reads by range from the four files); that one's step-15 checkpoint
# resumed for steps 16-20 at DP=1 x CP=4 with EP=2 and ZeRO-3 (4 ranks: ep groups inside the cp group, the
# experts averaged and sharded over the other half of it). Each rank routes its part of the sequences (the
# routing statistics summed over cp, as test_moe.sh's CP=2). Losses, gradient norms, loads, aux and z losses
# are the single process's.
moe_mpi 4 "$WORK/ep-cp" --set parallel.ep=4 --set parallel.cp=2 --set parallel.zero=2 --set train.max_steps=10 \
  --set checkpoint.every=10
grep -q "layout dp=2 cp=2 (ep=4)" "$WORK/ep-cp.log" || fail "EP=4 over DP=2 x CP=2 did not run as such"
[ "$(ls "$WORK/ep-cp/checkpoints/10/" | grep -c "^shard-dp[0-3]")" -eq 4 ] || fail "EP=4 x CP=2: not one file per rank"
mv "$WORK/ep-cp.log" "$WORK/ep-cp-1.log"
moe_mpi 2 "$WORK/ep-cp" --set parallel.ep=2 --set parallel.cp=2 --set train.max_steps=15 --set checkpoint.every=5
grep -q "layout dp=1 cp=2 (ep=2)" "$WORK/ep-cp.log" || fail "EP=2 over CP=2 did not run as such"
grep -q "resumed from .*/checkpoints/10" "$WORK/ep-cp.log" || fail "EP=2 over CP=2: did not resume from step 10"
mv "$WORK/ep-cp.log" "$WORK/ep-cp-2.log"
moe_mpi 4 "$WORK/ep-cp" --set parallel.ep=2 --set parallel.cp=4 --set parallel.zero=3
grep -q "layout dp=1 cp=4 (ep=2)" "$WORK/ep-cp.log" || fail "EP=2 inside CP=4 did not run as such"
grep -q "resumed from .*/checkpoints/15" "$WORK/ep-cp.log" || fail "EP=2 inside CP=4: did not resume from step 15"
same_train_losses "$WORK/single" "$WORK/ep-cp" "MoE EP=4 over DP=2 x CP=2 ZeRO-2 -> EP=2 over CP=2 -> EP=2 inside CP=4 ZeRO-3" 20
same_grad_norms "$WORK/single" "$WORK/ep-cp" "MoE EP=4 over DP=2 x CP=2 -> EP=2 over CP=2 -> EP=2 inside CP=4" 1e-3
python3 - "$WORK/single" "$WORK/ep-cp" <<'PY' || fail "the MoE metrics under EP folded over CP differ from the single process's"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
for a, b in zip(moe(sys.argv[1]), moe(sys.argv[2]), strict=True):
    for k in a:
        assert (a[k]["max_load"], a[k]["mean_load"]) == (b[k]["max_load"], b[k]["mean_load"]), k
        assert abs(a[k]["aux_loss"] - b[k]["aux_loss"]) < 1e-5 and abs(a[k]["z_loss"] - b[k]["z_loss"]) < 1e-4, k
print("MoE loads, aux and z losses under EP folded over DP x CP (EP=4 over 2 x 2, EP=2 over CP=2 and inside CP=4): the single process's")
PY

# Refused, naming the key.
refused() {  # refused LABEL MESSAGE [--set ...]
  local label=$1 message=$2; shift 2
  tiny_train "$WORK/refused" "$@" >"$WORK/refused.log" 2>&1 && fail "$label: accepted"
  grep -q "$message" "$WORK/refused.log" || { tail -5 "$WORK/refused.log"; fail "$label: not refused with '$message'"; }
}
refused "ep on a dense model" "parallel.ep.*dense model" --set parallel.ep=2 --set parallel.dp=2
refused "ep not dividing the experts" "parallel.ep.*does not divide model.moe.num_experts" "${moe[@]}" \
  --set parallel.ep=3 --set parallel.dp=3
refused "ep not dividing dp x cp" "parallel.ep.*does not divide parallel.dp x parallel.cp" "${moe[@]}" \
  --set parallel.ep=2 --set parallel.dp=3
refused "ep neither a multiple nor a divisor of cp" "parallel.ep.*with parallel.cp=2: an ep group is ep consecutive ranks" \
  "${moe[@]}" --set parallel.ep=3 --set parallel.dp=3 --set parallel.cp=2 --set model.moe.num_experts=6
echo PASS
