#!/usr/bin/env bash
# loom info on the presets: the published parameter counts (text and --json), FLOPs per token and a
# memory estimate whose parts add up, all without building the model (an 8B config stays far under 1 GB).
source "$(dirname "$0")/common.sh"
"$LOOM" info "$SRC/configs/gpt2-124m.yaml" > "$WORK/gpt2.txt"
cat "$WORK/gpt2.txt"
grep -q "^parameters     124,439,808$" "$WORK/gpt2.txt" || fail "gpt2-124m: not 124,439,808 parameters"
# KV cache: 12 layers x (K, V) x 12 heads x 64 x 4 bytes = 73,728 bytes a token; 256 MiB / 73,728 = 3,640 tokens,
# 3 contexts of 1,024.
grep -q "^KV cache       73,728 bytes per token (fp32); loom serve's default --kv-mb 256 holds 3,640 tokens, 3 of" \
  "$WORK/gpt2.txt" || fail "gpt2-124m: not 73,728 KV bytes per token"
"$LOOM" info "$SRC/configs/llama2-7b.yaml" --json | python3 -c "
import json, sys; kv = json.load(sys.stdin)['kv_bytes_per_token']
assert kv == 32 * 2 * 32 * 128 * 4, kv  # 512 KiB a token in fp32 (MHA: 32 KV heads)" || fail "llama2-7b: KV bytes per token"
"$LOOM" info "$SRC/configs/llama2-7b.yaml" | grep -q "^parameters     6,738,415,616$" || fail "llama2-7b: not 6,738,415,616"
# Mixture of Experts: transformers' counts of MixtralForCausalLM and Qwen3MoeForCausalLM at the released configs.
"$LOOM" info "$SRC/configs/mixtral-8x7b.yaml" | tee "$WORK/mixtral.txt" | grep -q "^parameters     46,702,792,704 (12,879,925,248 active per token" \
  || { cat "$WORK/mixtral.txt"; fail "mixtral-8x7b: not 46,702,792,704 (12,879,925,248 active)"; }
"$LOOM" info "$SRC/configs/qwen3-30b-a3b.yaml" | grep -q "^parameters     30,532,122,624 (3,353,032,704 active per token" \
  || fail "qwen3-30b-a3b: not 30,532,122,624 (3,353,032,704 active)"

python3 - "$LOOM" "$SRC/configs" <<'PY' || fail "loom info --json"
import json, resource, subprocess, sys
loom, configs = sys.argv[1], sys.argv[2]
expected = {"gpt2-124m": 124439808, "gpt2-350m": 354823168, "llama2-7b": 6738415616, "llama3-8b": 8030261248,
            "llama-tiny": 3295488}
for name, parameters in expected.items():
    out = json.loads(subprocess.check_output([loom, "info", f"{configs}/{name}.yaml", "--json",
                                              "--set", "model.vocab_size=1024" if name == "llama-tiny" else "run.seed=1"]))
    m = out["memory"]
    print(name, out["parameters"], f"{out['flops_per_token']:.4g} FLOPs/token", {k: f"{v / 2**30:.2f} GiB" for k, v in m.items()})
    assert out["parameters"] == parameters, (name, out["parameters"])
    assert out["flops_per_token"] > 6 * parameters * 0.5, name
    assert m["total"] == m["weights"] + m["gradients"] + m["optimizer"] + m["gathered"] + m["activations"] + m["pipeline_sends"], name
    assert all(m[k] > 0 for k in m if k not in ("pipeline_sends", "gathered")), name  # 0 without stages, without ZeRO-3
# Closed forms only: the 8B config never allocates its 32 GB of fp32 weights.
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
assert peak_kb < 1024 * 1024, f"loom info used {peak_kb} kB"
# tp divides the weights and the split activations; pp the layers.
base = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.tp=1",
                                           "--set", "parallel.pp=1", "--set", "parallel.dp=1"]))
split = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.tp=8",
                                            "--set", "parallel.pp=4", "--set", "parallel.dp=1"]))
# Per pipeline stage: its own parameters (untied: each on exactly one stage) over tp; the headline is the
# stage with the largest total (1F1B: the first, which keeps the most micro-batches in flight).
stages = split["stages"]
assert [s["stage"] for s in stages] == [0, 1, 2, 3]
assert sum(s["parameters"] for s in stages) == base["parameters"], stages
tp = 8
for s in stages:  # two fp32 moments of ceil(stage parameters / tp) per rank
    assert s["memory"]["optimizer"] == 8 * -(-s["parameters"] // tp), s
assert split["memory"] == max((s["memory"] for s in stages), key=lambda m: m["total"])
assert split["memory"]["optimizer"] * 32 >= base["memory"]["optimizer"] * 0.9
assert stages[3]["memory"]["activations"] < base["memory"]["activations"] / 4
# ZeRO-1 over 8 DP ranks keeps an eighth of the AdamW state per rank; nothing else changes.
zero = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.dp=8",
                                           "--set", "parallel.zero=1"]))
plain = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.dp=8"]))
assert zero["memory"]["optimizer"] == (plain["memory"]["optimizer"] // 8 + 7) // 8 * 8 or \
    abs(zero["memory"]["optimizer"] * 8 - plain["memory"]["optimizer"]) <= 64, (zero["memory"], plain["memory"])
assert zero["memory"]["weights"] == plain["memory"]["weights"]
print(f"llama2-7b optimizer state per rank at dp=8: {plain['memory']['optimizer'] / 2**30:.2f} GiB plain, "
      f"{zero['memory']['optimizer'] / 2**30:.2f} GiB with ZeRO-1")
# ZeRO-2 shards the gradients too: 1/dp of them plus the buckets alive at once (the one backward fills and
# two reduce-scatters in flight: 3 x parallel.bucket_mb of fp32 gradients). Per step and rank the collectives
# take the fp32 gradients (all-reduced; ZeRO-1 reduce-scattered once, ZeRO-2 once per micro-batch: 2 here)
# and the updated parameters (all-gathered).
two = ["--set", "train.batch_size=16", "--set", "train.micro_batch_size=1", "--set", "parallel.bucket_mb=25",
       "--set", "parallel.tp=1", "--set", "parallel.pp=1"]
info = lambda zero: json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set",
                                                        "parallel.dp=8", "--set", f"parallel.zero={zero}", *two]))
z0, z1, z2 = info(0), info(1), info(2)
P = z0["parameters"]
assert z2["memory"]["gradients"] == 4 * (-(-P // 8) + 3 * 25 * 2**20 // 4), (z2["memory"], P)
assert z2["memory"]["optimizer"] == z1["memory"]["optimizer"] and z2["memory"]["weights"] == z1["memory"]["weights"]
assert z0["memory"]["gradients"] == 4 * P and z1["memory"]["gradients"] == 4 * P + 4 * -(-P // 8)  # + the shard's
assert z0["communication"] == {"all_reduced": 4 * P, "reduce_scattered": 0, "all_gathered": 0, "all_to_all": 0}, z0["communication"]
assert z1["communication"] == {"all_reduced": 0, "reduce_scattered": 4 * P, "all_gathered": 4 * P, "all_to_all": 0}, z1["communication"]
assert z2["communication"] == {"all_reduced": 0, "reduce_scattered": 2 * 4 * P, "all_gathered": 4 * P, "all_to_all": 0}, z2["communication"]
assert [z["layout"]["zero"] for z in (z0, z1, z2)] == [0, 1, 2]
print(f"llama2-7b gradients per rank at dp=8: {z1['memory']['gradients'] / 2**30:.2f} GiB with ZeRO-1, "
      f"{z2['memory']['gradients'] / 2**30:.2f} GiB with ZeRO-2")
# ZeRO-3: the weights are fp32 shards too; gathered at once are two units: the ends (embedding, final norm,
# head), gathered for the embeddings and again for the head and freed between, take a block's place beside
# the first or the last block; the gradients alive are two blocks' (one reduce-scattering, one filling) and
# the untied head's. Per micro-batch (2 here): the ends twice, 32 blocks for forward and 31 again for
# backward (the last one is kept); without resharding the ends and every block once per step.
block = 2 * 4096 + 4 * 4096**2 + 3 * 4096 * 11008
ends = P - 32 * block
assert ends == 2 * 32000 * 4096 + 4096
z3 = info(3)
shard = -(-P // 8)
assert z3["memory"]["weights"] == 4 * shard and z3["memory"]["optimizer"] == 8 * shard, z3["memory"]
assert ends > block and z3["memory"]["gathered"] == 4 * (ends + block), z3["memory"]
head = 32000 * 4096  # untied: its gradient's bucket is alive all through backward, beside two blocks'
assert z3["memory"]["gradients"] == 4 * (shard + 2 * block + head), z3["memory"]
assert z3["communication"] == {"all_reduced": 0, "reduce_scattered": 2 * 4 * P,
                               "all_gathered": 4 * (2 * 2 * ends + 2 * 63 * block), "all_to_all": 0}, z3["communication"]
kept = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.dp=8",
                                           "--set", "parallel.zero=3", "--set", "parallel.reshard_after_forward=false", *two]))
assert kept["memory"]["gathered"] == 4 * P and kept["communication"]["all_gathered"] == 4 * (ends + 32 * block)
# With pipeline stages (1F1B, 2 micro-batches, 16 blocks a stage) each stage gathers its own ends and blocks:
# the first its embedding and, running two forwards back to back in its warm-up, three blocks (the one
# computing, the one prefetched, the last one kept for its backward); the last its final norm and head, and
# two blocks (it alternates forward and backward); a stage's ends count beside its blocks (the last stage keeps
# them for a head's backward while other forwards run), gathered once per micro-batch. The step's gathers: the
# busiest stage's (the last's).
staged = json.loads(subprocess.check_output([loom, "info", f"{configs}/llama2-7b.yaml", "--json", "--set", "parallel.dp=8",
                                             "--set", "parallel.zero=3", *two, "--set", "parallel.pp=2",
                                             "--set", "parallel.pp_schedule=1f1b"]))
first, last = (s["memory"]["gathered"] for s in staged["stages"])
assert first == 4 * (32000 * 4096 + 3 * block) and last == 4 * (32000 * 4096 + 4096 + 2 * block), (first, last)
assert staged["communication"]["all_gathered"] == 4 * (2 * (32000 * 4096 + 4096) + 2 * 31 * block), \
    staged["communication"]
states = lambda z: sum(z["memory"][k] for k in ("weights", "gradients", "optimizer", "gathered"))
print(f"llama2-7b model states per rank at dp=8: {states(z0) / 2**30:.2f} GiB plain, {states(z2) / 2**30:.2f} GiB "
      f"with ZeRO-2, {states(z3) / 2**30:.2f} GiB with ZeRO-3")
# Sequence parallelism keeps 1/tp of what TP alone keeps whole on every rank. GPT-2 124M in bf16 with
# dropout, tp=4, micro-batch 16 of 1024: 14sbh per layer (Korthikanti et al.'s 10sbh, sbh(10 + 24/t +
# 5as/(ht)) -> sbh(34/t + 5as/(ht)), with the two norm inputs in fp32: +4sbh) and the final norm's fp32
# input, 4sbh.
gpt2 = [f"{configs}/gpt2-124m.yaml", "--json", "--set", "parallel.tp=4", "--set", "parallel.dp=1",
        "--set", "precision.dtype=bf16", "--set", "model.dropout=0.1", "--set", "train.micro_batch_size=16"]
tp_only = json.loads(subprocess.check_output([loom, "info", *gpt2]))["memory"]["activations"]
with_sp = json.loads(subprocess.check_output([loom, "info", *gpt2, "--set", "parallel.sequence_parallel=true"]))["memory"]["activations"]
sbh = 1024 * 16 * 768
expected = (12 * 14 * sbh + 4 * sbh) * (1 - 1 / 4)
assert abs((tp_only - with_sp) - expected) <= 2, (tp_only, with_sp, expected)
print(f"gpt2-124m activations per rank at tp=4: {tp_only / 2**30:.2f} GiB, {with_sp / 2**30:.2f} GiB with sequence parallelism")
PY

# model.vocab_size: 0 takes the size of tokenizer.model (the KJV's 1024 pieces), and without the file says how
# to get one.
"$LOOM" info "$SRC/configs/llama-tiny.yaml" --set tokenizer.model="$KJV_DATA/tokenizer.model" \
  | grep -q "^parameters     3,295,488$" || fail "llama-tiny: the vocabulary of tokenizer.model was not used"
"$LOOM" info "$SRC/configs/gpt-kjv.yaml" --set tokenizer.model="$KJV_DATA/tokenizer.model" --json \
  | python3 -c "import json, sys; assert json.load(sys.stdin)['parameters'] == 1024 * 256 + 128 * 256 + 4 * 789760 + 512" \
  || fail "gpt-kjv: the vocabulary of tokenizer.model was not used"
set +e
out=$("$LOOM" info "$SRC/configs/llama-tiny.yaml" --set tokenizer.model="$WORK/absent.model" 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "tokenizer.model=$WORK/absent.model does not exist yet" <<<"$out" \
  && grep -q "model.vocab_size=N" <<<"$out" || fail "vocab without a tokenizer: exit $code, '$out'"
set +e
out=$("$LOOM" info "$SRC/configs/llama3-8b.yaml" --set model.n_kv_heads=5 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "model.n_kv_heads: 5 does not divide model.n_heads=32" <<<"$out" || fail "bad n_kv_heads: exit $code, '$out'"
echo PASS
