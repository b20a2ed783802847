#!/usr/bin/env bash
# Expert parallelism (parallel.ep, models/moe_dispatch.h) on the tiny Mixtral-shaped MoE of test_moe.sh
# (moe_setup.sh): 20 fp32 steps, dropout 0, dropless, against the single process of the same global batch and
# micro-batches (losses within 1e-5, clipped gradient norms within 1e-3 relative as test_moe.sh's): EP=2 at
# DP=2 (each rank keeps 2 of the 4 experts, tokens exchanged by all-to-all), EP=2 and EP=4 at DP=4, EP=2 with
# ZeRO-2, and the Qwen-style variant (a gated shared expert, the expert bias) at EP=2 with ZeRO-1; EP=2 x CP=2
# at DP=2 with ZeRO-2 (routing statistics summed over cp), its checkpoint resumed in one process. A checkpoint
# written at EP=2 names each expert tensor whole: the single process resumes it on the uninterrupted curve.
# The layouts expert parallelism does not take are refused naming parallel.ep.
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
moe_mpi 2 "$WORK/ep2-zero2" --set parallel.ep=2 --set parallel.zero=2
same_moe_curve "$WORK/single" "$WORK/ep2-zero2" "MoE EP=2 DP=2 ZeRO-2"
# The routing metrics are the single process's too (each rank's load summed over DP).
python3 - "$WORK/single" "$WORK/ep2" "$WORK/ep4" <<'PY' || fail "the MoE metrics under ep differ from the single process's"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
single = moe(sys.argv[1])
for d in sys.argv[2:]:
    for a, b in zip(single, moe(d), strict=True):
        for k in a:
            assert (a[k]["max_load"], a[k]["mean_load"]) == (b[k]["max_load"], b[k]["mean_load"]), (d, k)
print("MoE loads under EP=2 and EP=4: the single process's")
PY

# Shared expert and expert bias, ZeRO-1.
tiny_train "$WORK/qwen" "${moe[@]}" "${qwen[@]}" >"$WORK/qwen.log" 2>&1 || { tail -20 "$WORK/qwen.log"; fail "qwen-style run"; }
moe_mpi 2 "$WORK/qwen-ep2" "${qwen[@]}" --set parallel.ep=2 --set parallel.zero=1
same_moe_curve "$WORK/qwen" "$WORK/qwen-ep2" "MoE shared expert + expert bias, EP=2 DP=2 ZeRO-1"

# Resume: 10 steps at EP=2 (checkpoint at 10), the rest in a single process.
moe_mpi 2 "$WORK/resumed" --set parallel.ep=2 --set train.max_steps=10 --set checkpoint.every=10
ls "$WORK/resumed/checkpoints/10/" | grep -q "shard-dp1" || fail "EP=2 wrote no file for its second ep rank"
tiny_train "$WORK/resumed" "${moe[@]}" >>"$WORK/resumed.log" 2>&1 || { tail -20 "$WORK/resumed.log"; fail "single second half"; }
grep -q "resumed from .*/checkpoints/10" "$WORK/resumed.log" || fail "did not resume from step 10"
same_train_losses "$WORK/single" "$WORK/resumed" "MoE EP=2 resumed in a single process at step 10" 20

# loom info: ep 2 keeps half of each block's experts (weights, gradients; ZeRO-1's optimizer shard is unchanged:
# the experts shard over dp / ep ranks) and sends the routed slots by all-to-all.
for ep in 1 2; do
  # shellcheck disable=SC2046
  "$LOOM" info $(train_args "$WORK/info") "${moe[@]}" --set parallel.dp=2 --set parallel.ep=$ep --set parallel.zero=1 \
    --json > "$WORK/info-ep$ep.json" || fail "loom info at ep $ep"
done
python3 - "$WORK/info-ep1.json" "$WORK/info-ep2.json" <<'PY' || fail "loom info under ep"
import json, sys
one, two = (json.load(open(f)) for f in sys.argv[1:3])
C, F, E, k, L, T = 64, 48, 4, 2, 3, 4 * 32  # micro-batches of 4 x 32 tokens, 2 per step at dp 2
experts_not_held = L * (E - E // 2) * 3 * C * F
assert one["memory"]["weights"] - two["memory"]["weights"] == 4 * experts_not_held, (one["memory"], two["memory"])
assert one["memory"]["optimizer"] == two["memory"]["optimizer"], (one["memory"], two["memory"])
assert one["communication"]["all_to_all"] == 0
# Every routed slot's row (fp32) out and back, forward and backward; half of them leave the rank.
assert two["communication"]["all_to_all"] == L * 2 * 4 * T * k * C * 4 // 2, two["communication"]
print("loom info: ep 2 weights", two["memory"]["weights"], "all-to-all bytes per step", two["communication"]["all_to_all"])
PY

# EP=2 x CP=2 at DP=2 with ZeRO-2 (4 ranks): the ep groups join the ranks of one cp position, each routing its
# part of the sequences (the routing statistics summed over cp, as test_moe.sh's CP=2); the experts averaged and
# sharded over the cp ranks holding the same ones. 10 steps, then its checkpoint resumed in one process.
moe_mpi 4 "$WORK/ep2-cp2" --set parallel.ep=2 --set parallel.cp=2 --set parallel.zero=2 --set train.max_steps=10 \
  --set checkpoint.every=10
grep -q "layout dp=2 (ep=2) cp=2" "$WORK/ep2-cp2.log" || fail "EP=2 x CP=2 did not run as such"
tiny_train "$WORK/ep2-cp2" "${moe[@]}" >>"$WORK/ep2-cp2.log" 2>&1 || { tail -20 "$WORK/ep2-cp2.log"; fail "EP x CP resumed"; }
grep -q "resumed from .*/checkpoints/10" "$WORK/ep2-cp2.log" || fail "EP x CP: did not resume from step 10"
same_train_losses "$WORK/single" "$WORK/ep2-cp2" "MoE EP=2 x CP=2 DP=2 ZeRO-2 (steps 1-10), resumed in one process" 20
same_grad_norms "$WORK/single" "$WORK/ep2-cp2" "MoE EP=2 x CP=2 DP=2 ZeRO-2, resumed in one process" 1e-3
python3 - "$WORK/single" "$WORK/ep2-cp2" <<'PY' || fail "the MoE metrics under EP x CP differ from the single process's"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
for a, b in zip(moe(sys.argv[1]), moe(sys.argv[2]), strict=True):
    for k in a:
        assert (a[k]["max_load"], a[k]["mean_load"]) == (b[k]["max_load"], b[k]["mean_load"]), k
        assert abs(a[k]["aux_loss"] - b[k]["aux_loss"]) < 1e-5 and abs(a[k]["z_loss"] - b[k]["z_loss"]) < 1e-4, k
print("MoE loads, aux and z losses under EP=2 x CP=2: the single process's")
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
refused "ep not dividing dp" "parallel.ep.*does not divide parallel.dp" "${moe[@]}" --set parallel.ep=2 --set parallel.dp=3
refused "ep with zero 3" "parallel.ep.*parallel.zero 3" "${moe[@]}" --set parallel.ep=2 --set parallel.dp=2 \
  --set parallel.zero=3
echo PASS
