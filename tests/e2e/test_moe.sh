#!/usr/bin/env bash
# Mixture of Experts (model.moe, models/moe.h) on the KJV: a tiny Mixtral-shaped model (4 experts, top-2,
# Switch aux loss and router z-loss) trained 20 steps in fp32 (dropout off) under mpirun equals the single
# process of the same global batch and micro-batches (the aux loss is per micro-batch; losses within 1e-5,
# clipped gradient norms within 1e-3 relative): DP=2, ZeRO-3 DP=2, PP=2 (the aux losses reach backward on
# every stage), TP=2 (experts replicated over the group), TP=2 with sequence parallelism, CP=2 (the routing
# statistics summed over the cp group; with a capacity factor the same slots dropped); a Qwen-style variant (softmax_topk, renormalised, a gated shared expert, first block dense,
# the aux-loss-free expert bias) at ZeRO-1 DP=2 and PP=2, and resumed at step 10 on the uninterrupted losses
# (the bias comes back from the checkpoint). metrics.jsonl holds each MoE block's load and aux loss; `loom
# info` counts total and active parameters; the export loads in transformers as a MixtralForCausalLM whose
# greedy generation is the tokens `loom generate --temperature 0` writes and whose validation loss is loom eval's.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/moe_setup.sh"

tiny_train "$WORK/single" "${moe[@]}" >"$WORK/single.log" 2>&1 || { tail -20 "$WORK/single.log"; fail "single run"; }
grep -q "moe max/mean load" "$WORK/single.log" || fail "the progress line has no MoE summary"
python3 - "$WORK/single" <<'PY' || fail "metrics.jsonl: the MoE rows"
import json, sys
rows = [r for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")) if r["split"] == "train"]
assert len(rows) == 20
for r in rows:
    moe = r["moe"]
    assert sorted(moe) == ["blocks.0", "blocks.1", "blocks.2"], moe
    for layer in moe.values():
        # 16 sequences x 32 tokens x top-2 slots over 4 experts: a mean load of 256.
        assert layer["mean_load"] == 256 and layer["max_load"] >= 256 and layer["dropped"] == 0, layer
        assert 1.0 <= layer["aux_loss"] < 4.0 and layer["z_loss"] > 0, layer
print("metrics.jsonl: per-block load, aux and z loss on every train row; step 20:",
      {k: round(v["max_load"] / v["mean_load"], 2) for k, v in rows[-1]["moe"].items()})
PY

moe_mpi 2 "$WORK/dp2"
same_moe_curve "$WORK/single" "$WORK/dp2" "MoE DP=2"
moe_mpi 2 "$WORK/zero3" --set parallel.zero=3
same_moe_curve "$WORK/single" "$WORK/zero3" "MoE ZeRO-3 DP=2"
moe_mpi 2 "$WORK/recompute" --set parallel.zero=2 --set train.activation_checkpointing=full
same_moe_curve "$WORK/single" "$WORK/recompute" "MoE ZeRO-2 DP=2, full activation checkpointing (counted once)"
python3 - "$WORK/single" "$WORK/recompute" <<'PY' || fail "the recomputed forwards counted the load again"
import json, sys
loads = [[r["moe"]["blocks.0"]["mean_load"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
         for d in sys.argv[1:3]]
assert loads[0] == loads[1] == [256] * 20, loads
PY
moe_mpi 2 "$WORK/pp2" --set parallel.pp=2 --set parallel.dp=1 --set parallel.microbatches=4
same_moe_curve "$WORK/single" "$WORK/pp2" "MoE PP=2 (aux losses from both stages)"
# TP=2 splits attention and the vocabulary; every rank of the group runs the router and all experts on the same
# tokens (replicated, as norms), and only tp rank 0 counts the routing statistics.
moe_mpi 2 "$WORK/tp2" --set parallel.tp=2 --set parallel.dp=1
same_moe_curve "$WORK/single" "$WORK/tp2" "MoE TP=2 (experts replicated over the group)"
# Sequence parallelism: each MoE MLP gathers the group's positions and runs as under TP alone.
moe_mpi 2 "$WORK/sp2" --set parallel.tp=2 --set parallel.dp=1 --set parallel.sequence_parallel=true
same_moe_curve "$WORK/single" "$WORK/sp2" "MoE TP=2 + SP (the sequence gathered before the experts)"
# Context parallelism: each rank routes its part of the sequences; loads and token counts summed over cp make
# each rank's aux and z losses its part of the whole sequences', whose gradients the gradient sync adds.
moe_mpi 2 "$WORK/cp2" --set parallel.cp=2 --set parallel.dp=1
grep -q "layout dp=1 cp=2 tp=1 pp=1" "$WORK/cp2.log" || fail "MoE CP=2 did not run as such"
same_moe_curve "$WORK/single" "$WORK/cp2" "MoE CP=2 (routing statistics over the cp group)"
# Capacity dropping under CP: the ranks serve every expert's slots in token order over the whole sequences, so
# they drop the slots one process drops (the same counts per block and step). Over 10 steps: with a capacity a
# near-tie that rounds the other way drops another slot, which moves the curve by ~1e-5 within 20 steps (DP too).
capacity=(--set model.moe.capacity_factor=1.0 --set train.max_steps=10)
tiny_train "$WORK/capacity" "${moe[@]}" "${capacity[@]}" >"$WORK/capacity.log" 2>&1 || fail "capacity run"
moe_mpi 2 "$WORK/capacity-cp2" "${capacity[@]}" --set parallel.cp=2 --set parallel.dp=1
same_moe_curve "$WORK/capacity" "$WORK/capacity-cp2" "MoE capacity factor 1.0, CP=2 (slots served over the whole sequences)"
python3 - "$WORK/capacity" "$WORK/capacity-cp2" <<'PY2' || fail "MoE capacity under CP=2 dropped other slots than one process"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
single, cp2 = moe(sys.argv[1]), moe(sys.argv[2])
assert len(single) == len(cp2) == 10
dropped = [[a[k]["dropped"] for k in sorted(a)] for a in single]
assert dropped == [[b[k]["dropped"] for k in sorted(b)] for b in cp2], (dropped, cp2)
assert all(sum(d) > 0 for d in dropped), dropped
print("capacity under CP=2: the single process's dropped slots per block and step, e.g. step 10", dropped[-1])
PY2
# The routing metrics too: every rank's load summed over DP, each stage's blocks gathered to rank 0.
python3 - "$WORK/single" "$WORK/dp2" "$WORK/zero3" "$WORK/pp2" "$WORK/tp2" "$WORK/sp2" "$WORK/cp2" <<'PY' || fail "the MoE metrics differ from the single process's"
import json, sys
def moe(d): return [r["moe"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["split"] == "train"]
single = moe(sys.argv[1])
for d in sys.argv[2:]:
    other = moe(d)
    assert len(other) == len(single) == 20, d
    for a, b in zip(single, other):
        assert sorted(a) == sorted(b), (d, a, b)
        for k in a:
            assert (a[k]["max_load"], a[k]["mean_load"], a[k]["dropped"]) == (b[k]["max_load"], b[k]["mean_load"], b[k]["dropped"]), (d, k)
            assert abs(a[k]["aux_loss"] - b[k]["aux_loss"]) < 1e-5 and abs(a[k]["z_loss"] - b[k]["z_loss"]) < 1e-4, (d, k)
print("MoE metrics of DP=2, ZeRO-3, PP=2, TP=2, TP=2 + SP and CP=2: the single process's loads, aux and z losses")
PY

# Shared expert, dense first block, softmax_topk and the expert bias.
tiny_train "$WORK/qwen" "${moe[@]}" "${qwen[@]}" >"$WORK/qwen.log" 2>&1 || { tail -20 "$WORK/qwen.log"; fail "qwen-style run"; }
python3 - "$WORK/qwen" <<'PY' || fail "qwen-style metrics"
import json, sys
rows = [r for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")) if r["split"] == "train"]
assert sorted(rows[0]["moe"]) == ["blocks.1", "blocks.2"], rows[0]["moe"]
PY
moe_mpi 2 "$WORK/qwen-zero1" "${qwen[@]}" --set parallel.zero=1
same_moe_curve "$WORK/qwen" "$WORK/qwen-zero1" "MoE shared expert + expert bias, ZeRO-1 DP=2"
# Over 10 steps: this tiny router collapses onto one expert within a few steps, and the second choices among
# the other three then tie often enough that a rounding-level difference flips one by step 18 or so.
tiny_train "$WORK/qwen10" "${moe[@]}" "${qwen[@]}" --set train.max_steps=10 >"$WORK/qwen10.log" 2>&1 || fail "qwen-style 10 steps"
moe_mpi 2 "$WORK/qwen-pp2" "${qwen[@]}" --set parallel.pp=2 --set parallel.dp=1 --set parallel.microbatches=4 \
  --set train.max_steps=10
same_moe_curve "$WORK/qwen10" "$WORK/qwen-pp2" "MoE shared expert + expert bias, PP=2 (10 steps)"
tiny_train "$WORK/resumed" "${moe[@]}" "${qwen[@]}" --set train.max_steps=10 >"$WORK/resumed.log" 2>&1 || fail "first half"
tiny_train "$WORK/resumed" "${moe[@]}" "${qwen[@]}" >>"$WORK/resumed.log" 2>&1 || fail "second half"
grep -q "resumed from .*/checkpoints/10" "$WORK/resumed.log" || fail "did not resume from step 10"
same_train_losses "$WORK/qwen" "$WORK/resumed" "MoE with the expert bias resumed at step 10" 20

# loom info: total and active parameters of the tiny Mixtral; at tp 2 a rank's weights are half the model's but
# the routers and experts whole.
# shellcheck disable=SC2046
"$LOOM" info $(train_args "$WORK/info") "${moe[@]}" --json > "$WORK/info.json"
# shellcheck disable=SC2046
"$LOOM" info $(train_args "$WORK/info") "${moe[@]}" --set parallel.tp=2 --json > "$WORK/info-tp2.json"
python3 - "$WORK/info.json" "$WORK/info-tp2.json" <<'PY' || fail "loom info: MoE parameters"
import json, sys
info, tp2 = (json.load(open(f)) for f in sys.argv[1:3])
C, V, L, F, E, k = 64, 1024, 3, 48, 4, 2  # the KJV tokenizer's 1024 tokens
attention = 4 * C * C  # q, k, v, out (2 heads, no GQA)
block = 2 * C + attention + C * E + E * 3 * C * F
total = 2 * V * C + L * block + C
assert info["parameters"] == total, (info["parameters"], total)
assert info["active_parameters"] == total - L * (E - k) * 3 * C * F, info
replicated = L * (C * E + E * 3 * C * F)  # routers and experts, fp32 weights
halved = info["memory"]["weights"] - tp2["memory"]["weights"]
assert halved == 4 * (total - (total + 1) // 2 - (replicated - replicated // 2)), (info["memory"], tp2["memory"])
print(f"loom info: {total} parameters, {info['active_parameters']} active; weights per rank at tp 2 "
      f"{tp2['memory']['weights']} bytes of {info['memory']['weights']}")
PY

# The export is a MixtralForCausalLM greedy-generating the tokens `loom generate --temperature 0` does.
"$LOOM" export "$WORK/single" --format safetensors --out "$WORK/hf" || fail "export failed"
prompt="And God said"
"$LOOM" generate "$WORK/single" --prompt "$prompt" --max-new-tokens 12 --temperature 0 --ignore-eos --json \
  > "$WORK/generated.json" 2>/dev/null || fail "loom generate"
python3 - "$WORK/hf" "$KJV_DATA/tokenizer.model" "$prompt" "$WORK/generated.json" <<'PY' || fail "transformers' greedy tokens differ"
import json, sys
import sentencepiece, torch
from transformers import AutoModelForCausalLM
directory, tokenizer, prompt, ours = sys.argv[1], sys.argv[2], sys.argv[3], json.load(open(sys.argv[4]))
config = json.load(open(f"{directory}/config.json"))
assert config["model_type"] == "mixtral" and config["num_local_experts"] == 4, config
ids = sentencepiece.SentencePieceProcessor(model_file=tokenizer).encode(prompt)
model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
model.generation_config.eos_token_id = None  # as --ignore-eos: an EOS is a token like another
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0)
theirs = out[0, len(ids):].tolist()
print(f"loom generate: {ours['tokens']}\ntransformers:  {theirs}")
assert len(theirs) == 12 and ours["tokens"] == theirs, (ours, theirs)
PY
# Its validation loss in transformers (tiny.yaml's windows: seq_len 32, 2 batches of 16) is loom eval's.
ours=$("$LOOM" eval "$WORK/single" --json 2>/dev/null | tail -1 | python3 -c "import json, sys; print(json.load(sys.stdin)['loss'])")
theirs=$(python3 "$SRC/tests/golden/hf_safetensors.py" loss "$WORK/hf" "$KJV_DATA/valid.bin" 32 2 16 2>/dev/null \
         | tail -1 | python3 -c "import json, sys; print(json.load(sys.stdin)['loss'])")
python3 -c "import sys; sys.exit(not abs($ours - $theirs) <= 1e-5 * max(1.0, abs($ours)))" \
  || fail "valid loss: loom eval $ours, transformers from the export $theirs"
echo "valid loss: loom eval $ours, transformers (MixtralForCausalLM from the export) $theirs"
echo PASS
