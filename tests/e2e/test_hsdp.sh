#!/usr/bin/env bash
# Hybrid sharding (parallel.shard_size: ZeRO shards over groups of shard_size DP ranks, reduce-scatters and
# all-gathers inside a group, and all-reduces each shard's gradient over the groups; parallel/mesh.h's
# dp_shard and dp_replicate axes, parallel/gradient_sync.h) under mpirun equals the single-process run of
# the same global batch (fp32, dropout off, 3 blocks, 20 steps with a validation loss at 10 and 20, losses
# within 1e-5, clipped gradient norms within 1e-4 relative): shard_size 2 at DP=4 for ZeRO-3, ZeRO-2 (2
# micro-batches per rank: one reduce-scatter each, one all-reduce per step) and ZeRO-1; ZeRO-3 at DP=4 x PP=2,
# ZeRO-2 at DP=4 x TP=2;
# ZeRO-1 at CP=2 x DP=2 with shard_size 1 (shard group cp, replicas dp). A checkpoint holds one optimizer
# shard per rank of the shard group, written by the first replica, and resumes on the uninterrupted curve:
# ZeRO-3 DP=4 shard_size 2 (steps 1-5) -> ZeRO-3 DP=2 whole (6-10) -> one process (11-15) -> ZeRO-2 DP=4
# shard_size 2 (16-20). `loom info` counts a shard group's memory and the replicas' all-reduce; bad
# shard sizes are refused naming parallel.shard_size.
source "$(dirname "$0")/common.sh"
common=(--set model.dropout=0 --set model.n_layers=3 --set train.max_steps=20 --set schedule.total_steps=20
        --set train.micro_batch_size=0)
hsdp_train() {  # hsdp_train RANKS RUN_DIR [--set ...]: DP=4 in groups of 2, unless the --sets say otherwise
  local ranks=$1 dir=$2; shift 2
  mpi_train "$ranks" "$dir" "${common[@]}" --set parallel.dp=4 --set parallel.shard_size=2 "$@" \
    || fail "$(basename "$dir") failed"
}

tiny_train "$WORK/single" "${common[@]}" --set train.micro_batch_size=8 >"$WORK/single.log" 2>&1 || fail "single run"
hsdp_train 4 "$WORK/zero3" --set parallel.zero=3
grep -q "layout dp=4 (shard_size=2) cp=1 tp=1 pp=1" "$WORK/zero3.log" || fail "ZeRO-3 did not run as DP=4 in groups of 2"
same_losses_and_grad_norms "$WORK/single" "$WORK/zero3" "HSDP ZeRO-3 DP=4, shard_size 2"
hsdp_train 4 "$WORK/zero2" --set parallel.zero=2 --set train.micro_batch_size=2 --set parallel.bucket_mb=0.05
same_losses_and_grad_norms "$WORK/single" "$WORK/zero2" "HSDP ZeRO-2 DP=4 x 2 micro-batches, shard_size 2"
hsdp_train 4 "$WORK/zero1" --set parallel.zero=1
same_losses_and_grad_norms "$WORK/single" "$WORK/zero1" "HSDP ZeRO-1 DP=4, shard_size 2"
# Pipeline stages: each stage shards its units over its own shard group and all-reduces over its replicas.
hsdp_train 8 "$WORK/zero3pp2" --set parallel.zero=3 --set parallel.pp=2 --set parallel.microbatches=2
grep -q "layout dp=4 (shard_size=2) cp=1 tp=1 pp=2" "$WORK/zero3pp2.log" || fail "DP=4 x PP=2 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/zero3pp2" "HSDP ZeRO-3 DP=4 x PP=2 1f1b, shard_size 2"
# Tensor parallelism: each TP rank shards its own slices over its shard group.
hsdp_train 8 "$WORK/zero2tp2" --set parallel.zero=2 --set parallel.tp=2
grep -q "layout dp=4 (shard_size=2) cp=1 tp=2 pp=1" "$WORK/zero2tp2.log" || fail "DP=4 x TP=2 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/zero2tp2" "HSDP ZeRO-2 DP=4 x TP=2, shard_size 2"
# Context parallelism: the shard group is cp x dp_shard; with shard_size 1 that is the CP pair alone.
hsdp_train 4 "$WORK/cp2" --set parallel.zero=1 --set parallel.cp=2 --set parallel.dp=2 --set parallel.shard_size=1
grep -q "layout dp=2 (shard_size=1) cp=2 tp=1 pp=1" "$WORK/cp2.log" || fail "CP=2 x DP=2 did not run as such"
same_losses_and_grad_norms "$WORK/single" "$WORK/cp2" "HSDP ZeRO-1 CP=2 x DP=2, shard_size 1"

# Resume across shard sizes, ZeRO stages and DP sizes, 5 steps per hop, on the single process's curve.
resume_hop "$WORK/hops" 4 5 "${common[@]}" --set parallel.dp=4 --set parallel.shard_size=2 --set parallel.zero=3
# The first replica writes the shard group's files: shard-dp0 and shard-dp1, not one per DP rank.
python3 - "$WORK/hops/checkpoints/5" <<'PY' || fail "the HSDP checkpoint's files or manifest"
import json, os, sys
d = sys.argv[1]
shards = sorted(f for f in os.listdir(d) if f.startswith("shard-"))
assert shards == ["shard-dp0-tp0-pp0.pt", "shard-dp1-tp0-pp0.pt"], shards
layout = json.load(open(f"{d}/manifest.json"))["layout"]
assert layout == {"dp": 4, "cp": 1, "tp": 1, "pp": 1, "ep": 1, "shard_size": 2, "zero": 3}, layout
print(f"HSDP checkpoint: {shards}, layout {layout}")
PY
resume_hop "$WORK/hops" 2 10 "${common[@]}" --set parallel.dp=2 --set parallel.shard_size=0 --set parallel.zero=3
resume_hop "$WORK/hops" 1 15 "${common[@]}" --set parallel.dp=1 --set parallel.shard_size=0 --set parallel.zero=0 \
  --set train.micro_batch_size=8
resume_hop "$WORK/hops" 4 20 "${common[@]}" --set parallel.dp=4 --set parallel.shard_size=2 --set parallel.zero=2
same_train_losses "$WORK/single" "$WORK/hops" "HSDP ZeRO-3 DP=4/2 -> ZeRO-3 DP=2 -> single -> HSDP ZeRO-2 DP=4/2" 20

# loom info: a rank of DP=4 in groups of 2 holds what a rank of DP=2 does (ZeRO-3: weights, gradients,
# AdamW state), moves the same reduce-scatters and all-gathers, and all-reduces its fp32 gradient shard
# (half the parameters) over the 2 replicas once per step.
info() { "$LOOM" info "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=1024 --set parallel.zero=3 --set train.micro_batch_size=0 "$@"; }
info --set parallel.dp=4 --set parallel.shard_size=2 | tee "$WORK/info.txt"
grep -q "dp 4 (shard_size 2) x cp 1 x tp 1 x pp 1 with ZeRO-3" "$WORK/info.txt" || fail "loom info does not name the shard size"
grep -q "within 2 ranks, all-reduced over 2 replicas" "$WORK/info.txt" || fail "loom info does not name the groups"
info --json --set parallel.dp=4 --set parallel.shard_size=2 > "$WORK/hsdp.json"
info --json --set parallel.dp=2 > "$WORK/dp2.json"
python3 - "$WORK/hsdp.json" "$WORK/dp2.json" <<'PY' || fail "loom info's HSDP estimate"
import json, sys
h, d = (json.load(open(f)) for f in sys.argv[1:3])
P = h["parameters"]
assert h["layout"]["shard_size"] == 2 and d["layout"]["shard_size"] == 2, (h["layout"], d["layout"])
for k in ("weights", "gradients", "optimizer", "gathered"):
    assert h["memory"][k] == d["memory"][k], (k, h["memory"], d["memory"])
assert h["memory"]["optimizer"] == 8 * -(-P // 2), h["memory"]
assert h["communication"] == {"all_reduced": 4 * -(-P // 2), "reduce_scattered": d["communication"]["reduce_scattered"],
                              "all_gathered": d["communication"]["all_gathered"], "all_to_all": 0}, (h["communication"], d["communication"])
assert d["communication"]["all_reduced"] == 0
print(f"loom info, DP=4 in groups of 2: {h['memory']['optimizer']} optimizer bytes per rank (DP=2: {d['memory']['optimizer']}), "
      f"{h['communication']['all_reduced']} bytes all-reduced over replicas")
PY

# Refused before any work, naming the key.
expect_train_config_error "parallel.shard_size: 3 does not divide parallel.dp=4" --set parallel.dp=4 \
  --set parallel.shard_size=3 --set parallel.zero=1
expect_train_config_error "parallel.shard_size: 2 shards ZeRO's state, but parallel.zero is 0" --set parallel.dp=4 \
  --set parallel.shard_size=2
expect_train_config_error "parallel.shard_size: -1 must be >= 0" --set parallel.shard_size=-1
expect_train_config_error "parallel.shard_size = 2 does not divide parallel.dp = 1" --set parallel.dp=-1 \
  --set parallel.shard_size=2 --set parallel.zero=1
echo PASS
