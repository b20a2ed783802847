#!/usr/bin/env bash
# loom bench on the tiny config (synthetic tokens, no data files): the JSON has every key and its numbers
# agree with each other (tokens/s with the step times, MFU with FLOPs/token and the measured ceiling, the
# phases with the step), the loss on uniform random tokens starts at ln(vocab), the synthetic stream is
# deterministic, activation checkpointing trains identically (the GPT's and the encoder-decoder's, whose
# measured memory with and without it follows `loom info`), and bad input is a usage error.
source "$(dirname "$0")/common.sh"
bench() { "$LOOM" bench "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=512 --steps 4 --warmup 1 --json "$@"; }
bench > "$WORK/fp32.json"
bench > "$WORK/fp32-again.json"
bench --set precision.dtype=bf16 > "$WORK/bf16.json"
bench --set train.activation_checkpointing=full > "$WORK/full.json"
bench --set train.activation_checkpointing=selective > "$WORK/selective.json"
"$LOOM" info "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=512 --json > "$WORK/info.json"
cat "$WORK/fp32.json" "$WORK/bf16.json"

python3 - "$WORK" <<'PY' || fail "loom bench --json"
import json, math, sys
work = sys.argv[1]
info = json.load(open(f"{work}/info.json"))
for dtype in ("fp32", "bf16"):
    r = json.load(open(f"{work}/{dtype}.json"))
    keys = {"tokens_per_s", "step_ms_median", "step_ms_mean", "step_ms_min", "mfu", "gemm_peak_gflops", "flops_per_token",
            "peak_memory_mb", "phases_ms", "gemm_share", "attention_share", "non_matmul_share", "tokens_per_step",
            "steps", "warmup", "threads", "dtype", "final_loss", "parameters"}
    assert keys <= r.keys(), keys - r.keys()
    assert set(r["phases_ms"]) == {"data", "forward", "backward", "gradient_sync", "optimizer", "pipeline_wait"}, r["phases_ms"]
    assert r["phases_ms"]["pipeline_wait"] == 0, r["phases_ms"]  # no stages
    assert r["exposed_dp_communication_ms"] == 0, r  # one process, no ZeRO: nothing is waited for
    assert r["exposed_ep_communication_ms"] == 0, r  # a dense model: no all-to-all
    assert r["dtype"] == dtype and r["threads"] == 1 and r["steps"] == 4 and r["warmup"] == 1
    assert r["tokens_per_step"] == 16 * 32, r["tokens_per_step"]
    assert r["parameters"] == info["parameters"] and math.isclose(r["flops_per_token"], info["flops_per_token"])
    # tokens/s is the tokens of the timed steps over their total time, i.e. over the mean step.
    assert math.isclose(r["tokens_per_s"], r["tokens_per_step"] / (r["step_ms_mean"] / 1e3), rel_tol=1e-9)
    assert r["step_ms_min"] <= r["step_ms_median"] <= 4 * r["step_ms_mean"]
    assert 0.25 < r["tokens_per_step"] / (r["step_ms_median"] / 1e3) / r["tokens_per_s"] < 4
    assert math.isclose(r["mfu"], r["flops_per_token"] * r["tokens_per_s"] / (r["gemm_peak_gflops"] * 1e9), rel_tol=1e-9)
    assert 0 < r["mfu"] < 1 and 1 < r["gemm_peak_gflops"] < 1e5, (r["mfu"], r["gemm_peak_gflops"])
    # The Trainer's phases cover its whole step; bench times the same call from outside.
    phases = sum(r["phases_ms"].values())
    assert all(v >= 0 for v in r["phases_ms"].values()) and r["phases_ms"]["forward"] > 0 and r["phases_ms"]["backward"] > 0
    assert 0.8 * r["step_ms_mean"] <= phases <= r["step_ms_mean"] * 1.0001, (phases, r["step_ms_mean"])
    shares = r["gemm_share"], r["attention_share"], r["non_matmul_share"]
    assert 0 < r["gemm_share"] < 1 and 0 <= r["attention_share"] < 1 and 0 < r["non_matmul_share"] < 1, shares
    assert math.isclose(sum(shares), 1.0, abs_tol=1e-9), shares
    assert 20 < r["peak_memory_mb"] < 4096, r["peak_memory_mb"]
    # One rank: its peak above the base it had before the model, next to `loom info`'s estimate.
    rank = r["ranks"]
    assert len(rank) == 1 and (rank[0]["rank"], rank[0]["dp"], rank[0]["tp"], rank[0]["pp"]) == (0, 0, 0, 0), rank
    assert abs(rank[0]["base_mb"] + rank[0]["peak_mb"] - r["peak_memory_mb"]) < 1e-6 and rank[0]["peak_mb"] > 0, rank
    assert rank[0]["tensors_mb"] == r["peak_allocated_mb"] > 0, rank
    if dtype == "fp32":
        assert abs(rank[0]["estimate_mb"] - info["memory"]["total"] / 2**20) < 1e-6, (rank, info["memory"])
    # Uniform random tokens: nothing to learn, so the loss stays near ln(vocab) = 6.24.
    assert abs(r["final_loss"] - math.log(512)) < 0.3, r["final_loss"]
    print(dtype, f"{r['tokens_per_s']:.0f} tok/s, MFU {100 * r['mfu']:.2f}% of {r['gemm_peak_gflops']:.0f} GFLOP/s, "
          f"phases {phases:.1f} of {r['step_ms_mean']:.1f} ms, loss {r['final_loss']:.4f}")
again = json.load(open(f"{work}/fp32-again.json"))
assert again["final_loss"] == json.load(open(f"{work}/fp32.json"))["final_loss"], "synthetic batches are not deterministic"
# Activation checkpointing recomputes blocks in backward (dropout replayed): the same training, bit for bit.
for mode in ("full", "selective"):
    r = json.load(open(f"{work}/{mode}.json"))
    assert r["final_loss"] == again["final_loss"], (mode, r["final_loss"], again["final_loss"])
PY

# The caching CPU allocator (the default) trains bit for bit as malloc does and counts the bytes in tensors.
bench --set runtime.cpu_allocator=system > "$WORK/system.json"
# The encoder-decoder: copy pairs of data.seq_len tokens, batch_size pairs per step.
seq2seq=(--set model.vocab_size=64 --set data.seq_len=12 --set train.batch_size=6)
"$LOOM" bench "$SRC/configs/reverse-synthetic.yaml" "${seq2seq[@]}" --steps 3 --warmup 1 --json > "$WORK/seq2seq.json"
"$LOOM" info "$SRC/configs/reverse-synthetic.yaml" "${seq2seq[@]}" --json > "$WORK/seq2seq-info.json"
# ... which is `loom train` on those pairs: the same loss after the same 4 steps.
"$LOOM" train "$SRC/configs/reverse-synthetic.yaml" "${seq2seq[@]}" --set run.dir="$WORK/seq2seq-train" --set data.synthetic=copy \
  --set data.synthetic_vocab=64 --set data.synthetic_min_len=11 --set data.synthetic_max_len=11 --set train.max_steps=4 \
  --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 > /dev/null 2>&1 || fail "loom train copy pairs"
python3 - "$WORK" <<'PY' || fail "loom bench: allocator, transformer"
import json, math, sys
work = sys.argv[1]
cached, system = (json.load(open(f"{work}/{name}.json")) for name in ("fp32-again", "system"))
assert system["final_loss"] == cached["final_loss"], (system["final_loss"], cached["final_loss"])
assert system["peak_allocated_mb"] is None
assert 0 < cached["peak_allocated_mb"] < cached["peak_memory_mb"], (cached["peak_allocated_mb"], cached["peak_memory_mb"])
r, info = json.load(open(f"{work}/seq2seq.json")), json.load(open(f"{work}/seq2seq-info.json"))
assert r["tokens_per_step"] == 6 * 12, r["tokens_per_step"]
assert r["parameters"] == info["parameters"] and math.isclose(r["flops_per_token"], info["flops_per_token"]), (r, info)
assert math.isclose(r["tokens_per_s"], r["tokens_per_step"] / (r["step_ms_mean"] / 1e3), rel_tol=1e-9)
trained = [row for row in map(json.loads, open(f"{work}/seq2seq-train/metrics.jsonl")) if row["split"] == "train"]
assert trained[-1]["step"] == 4 and math.isclose(r["final_loss"], trained[-1]["loss"], rel_tol=1e-6), (r["final_loss"], trained[-1])
print(f"transformer {r['tokens_per_s']:.0f} tok/s, loss {r['final_loss']:.4f}; allocator: cached "
      f"{cached['peak_allocated_mb']:.1f} MB in tensors of {cached['peak_memory_mb']:.1f} MB resident")
PY

# The encoder-decoder's activation checkpointing, on bench-transformer's model made small (2 + 2 pre-norm
# blocks of d_model 128, bf16 autocast, 16 copy pairs of 64 tokens; no dropout, whose CPU attention keeps
# fp32 probabilities the estimate does not model): full and selective train bit for bit as none does, each
# run's measured peak in tensors is within 10% of `loom info`'s estimate for it (measured 63.6, 47.3 and
# 58.6 MiB against 63.1, 47.5 and 58.1), and recomputing keeps less: full < selective < none.
mt_small=(--set model.vocab_size=2000 --set model.d_model=128 --set model.d_ff=512 --set model.n_layers=2
          --set model.n_encoder_layers=2 --set model.dropout=0 --set train.batch_size=16)
for mode in none full selective; do
  "$LOOM" bench "$SRC/configs/bench-transformer.yaml" "${mt_small[@]}" --set train.activation_checkpointing=$mode \
    --steps 1 --warmup 1 --profile-steps 0 --json > "$WORK/mt-$mode.json" || fail "loom bench transformer, $mode"
done
python3 - "$WORK" <<'PY' || fail "the encoder-decoder's activation checkpointing: losses or memory"
import json, sys
runs = {mode: json.load(open(f"{sys.argv[1]}/mt-{mode}.json")) for mode in ("none", "full", "selective")}
peaks = {}
for mode, r in runs.items():
    rank = r["ranks"][0]
    peaks[mode] = rank["tensors_mb"]
    print(f"transformer, activation checkpointing {mode}: loss {r['final_loss']:.6f}, {rank['tensors_mb']:.1f} MiB in "
          f"tensors, {rank['estimate_mb']:.1f} estimated ({rank['tensors_mb'] / rank['estimate_mb']:.2f})")
    assert r["final_loss"] == runs["none"]["final_loss"], (mode, r["final_loss"], runs["none"]["final_loss"])
    assert 0.9 <= rank["tensors_mb"] / rank["estimate_mb"] <= 1.1, (mode, rank)
assert peaks["full"] < peaks["selective"] < peaks["none"], peaks
PY

set +e
out=$("$LOOM" bench "$SRC/tests/e2e/tiny.yaml" --steps 2 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "model.vocab_size" <<<"$out" || fail "no vocab_size: exit $code, '$out'"
set +e
out=$("$LOOM" bench "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=512 --steps 0 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q "\-\-steps" <<<"$out" || fail "--steps 0: exit $code, '$out'"
echo PASS
