#!/usr/bin/env python3
"""PyTorch eager twin of `loom bench`: the same decoder-only GPT (pre-LayerNorm, learned positions,
tanh-GELU MLP, biases, tied head), the same init, AdamW groups, clipping, micro-batches, device
(runtime.device: cpu or cuda), thread count and dtype (bf16 autocast or fp32; precision.param_dtype=bf16:
the model in bf16 with an fp32 master copy that AdamW steps, gradients and clipping in fp32, the weights
copied back from the master after each step, as loom does), trained on random tokens and timed the same
way (warm-up excluded, each phase waiting for the GPU's kernels). The model is read from a loom config
through `loom config` (the resolved values, defaults included), so both sides see exactly the same values.

    scripts/bench_pytorch.py configs/bench-gpt.yaml [--set precision.dtype=fp32] [--set precision.param_dtype=bf16]
                             [--steps 20] [--json]

Only what bench-gpt-style configs use is supported (layernorm, learned positions, gelu/relu, causal
attention without a window); anything else is refused rather than benchmarked as something different.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

KEYS = ["model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads", "model.n_kv_heads", "model.d_ff",
        "model.max_seq_len", "model.norm", "model.norm_eps", "model.position", "model.activation", "model.bias",
        "model.attention_window", "model.dropout", "model.tie_embeddings", "model.init_std", "data.seq_len",
        "optim.lr", "optim.betas", "optim.eps", "optim.weight_decay", "optim.grad_clip", "train.batch_size",
        "train.micro_batch_size", "precision.dtype", "precision.param_dtype", "runtime.threads", "runtime.device",
        "run.seed"]


def read_config(loom, config, sets):
    # `loom config` prints the resolved config as two-level YAML ("section:" / "  key: value"); reading
    # it here needs no YAML package and sees loom's defaults.
    cmd = [loom, "config", config] + [a for s in sets for a in ("--set", s)]
    values, section = {}, ""
    for line in subprocess.check_output(cmd, text=True).splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        else:
            key, _, value = line.strip().partition(": ")
            values[f"{section}.{key}"] = value.strip('"')
    missing = [k for k in KEYS if k not in values]
    if missing:
        sys.exit(f"bench_pytorch.py: `loom config` did not print {missing}")
    def num(key):
        return float(values[key])
    c = {
        "vocab": int(num("model.vocab_size")), "d": int(num("model.d_model")), "layers": int(num("model.n_layers")),
        "heads": int(num("model.n_heads")), "kv_heads": int(num("model.n_kv_heads")), "d_ff": int(num("model.d_ff")),
        "max_seq": int(num("model.max_seq_len")), "norm": values["model.norm"], "eps": num("model.norm_eps"),
        "position": values["model.position"], "activation": values["model.activation"],
        "bias": values["model.bias"] == "true", "window": int(num("model.attention_window")),
        "dropout": num("model.dropout"), "tied": values["model.tie_embeddings"] == "true",
        "init_std": num("model.init_std"), "seq": int(num("data.seq_len")), "lr": num("optim.lr"),
        "betas": tuple(float(b) for b in values["optim.betas"].strip("[]").split(",")), "adam_eps": num("optim.eps"),
        "weight_decay": num("optim.weight_decay"), "grad_clip": num("optim.grad_clip"),
        "batch": int(num("train.batch_size")), "micro_batch": int(num("train.micro_batch_size")),
        "dtype": values["precision.dtype"], "param_dtype": values["precision.param_dtype"],
        "threads": int(num("runtime.threads")), "device": values["runtime.device"], "seed": int(num("run.seed")),
    }
    unsupported = [(c["norm"] != "layernorm", "model.norm"), (c["position"] != "learned", "model.position"),
                   (c["activation"] not in ("gelu", "relu"), "model.activation"), (c["window"] != 0, "model.attention_window"),
                   (c["kv_heads"] not in (0, c["heads"]), "model.n_kv_heads"), (c["vocab"] <= 0, "model.vocab_size"),
                   (c["dtype"] not in ("fp32", "bf16"), "precision.dtype"),
                   (c["param_dtype"] not in ("fp32", "bf16"), "precision.param_dtype")]
    bad = [key for is_bad, key in unsupported if is_bad]
    if bad:
        sys.exit(f"bench_pytorch.py: {', '.join(bad)} not supported by the PyTorch twin")
    return c


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, ff = c["d"], c["d_ff"] or 4 * c["d"]
        self.heads, self.dropout, self.activation = c["heads"], c["dropout"], c["activation"]
        self.ln1 = nn.LayerNorm(d, eps=c["eps"])
        self.qkv = nn.Linear(d, 3 * d, bias=c["bias"])
        self.out = nn.Linear(d, d, bias=c["bias"])
        self.ln2 = nn.LayerNorm(d, eps=c["eps"])
        self.up = nn.Linear(d, ff, bias=c["bias"])
        self.down = nn.Linear(ff, d, bias=c["bias"])
        self.drop = nn.Dropout(c["dropout"])

    def attention(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.drop(self.attention(self.ln1(x)))
        h = self.up(self.ln2(x))
        h = F.gelu(h, approximate="tanh") if self.activation == "gelu" else F.relu(h)
        return x + self.drop(self.down(h))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tokens = nn.Embedding(c["vocab"], c["d"])
        self.positions = nn.Embedding(c["max_seq"], c["d"])
        self.drop = nn.Dropout(c["dropout"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.final_norm = nn.LayerNorm(c["d"], eps=c["eps"])
        self.head = None if c["tied"] else nn.Linear(c["d"], c["vocab"], bias=False)
        # loom's init: N(0, init_std) for every matrix, init_std / sqrt(2 n_layers) for residual projections.
        std, out_std = c["init_std"], c["init_std"] / math.sqrt(2 * c["layers"])
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, out_std if name.endswith(("out.weight", "down.weight")) else std)
            elif name.endswith("bias") and "norm" not in name and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, tokens):  # (B, T) -> (B, T, V)
        T = tokens.size(1)
        x = self.drop(self.tokens(tokens) + self.positions(torch.arange(T, device=tokens.device)))
        for block in self.blocks:
            x = block(x)
        x = self.final_norm(x)
        return self.head(x) if self.head is not None else F.linear(x, self.tokens.weight)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--loom", default=os.environ.get("LOOM", "build/loom"))
    args = parser.parse_args()
    c = read_config(args.loom, args.config, args.sets)

    threads = c["threads"] or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(c["seed"])
    device = torch.device(c["device"])
    # CUDA runs asynchronously: a phase ends when its kernels have, as loom bench's phase timer waits for them.
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = Gpt(c).to(device)
    model.train()
    # bf16 parameters: the model's weights become bf16 after the fp32 init, and AdamW steps an fp32 master
    # copy of them (Megatron's --bf16); otherwise the master is the model's own fp32 parameters.
    bf16_params = c["param_dtype"] == "bf16"
    params = list(model.parameters())
    masters = [p.detach().clone() for p in params] if bf16_params else params
    if bf16_params:
        model.to(torch.bfloat16)
    decay = [m for m in masters if m.dim() >= 2]
    no_decay = [m for m in masters if m.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=c["lr"], betas=c["betas"], eps=c["adam_eps"])
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=c["dtype"] == "bf16")
    generator = torch.Generator().manual_seed(c["seed"])
    # Gradient accumulation as loom does it: batch_size / micro_batch_size forward/backward passes per step,
    # each loss scaled by its share of the batch.
    micro = c["micro_batch"] or c["batch"]
    micro_batches = c["batch"] // micro

    phases = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def step():
        value = 0.0
        for _ in range(micro_batches):
            t0 = time.perf_counter()
            batch = torch.randint(0, c["vocab"], (micro, c["seq"] + 1), generator=generator).to(device)
            inputs, targets = batch[:, :-1], batch[:, 1:]
            sync()
            t1 = time.perf_counter()
            with autocast:
                logits = model(inputs)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()) / micro_batches
            sync()
            t2 = time.perf_counter()
            loss.backward()
            sync()
            t3 = time.perf_counter()
            value += loss.item()
            for key, seconds in zip(("data", "forward", "backward"), (t1 - t0, t2 - t1, t3 - t2)):
                phases[key] += seconds
        t3 = time.perf_counter()
        if bf16_params:  # the bf16 gradients in fp32 on the master: clipping and AdamW act on those
            for p, m in zip(params, masters):
                m.grad = p.grad.float()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(masters, c["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if bf16_params:
            with torch.no_grad():
                torch._foreach_copy_(params, masters)  # the updated master rounded to bf16
            model.zero_grad(set_to_none=True)
        sync()
        phases["optimizer"] += time.perf_counter() - t3
        return value

    for _ in range(args.warmup):
        step()
    times = []
    phases.update({k: 0.0 for k in phases})
    cpu_start = time.process_time()  # all threads of this process, as loom bench's cpu_ms_per_step
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    tokens_per_step = c["batch"] * c["seq"]
    result = {"framework": f"pytorch {torch.__version__} eager", "dtype": c["dtype"],
              "param_dtype": c["param_dtype"], "device": c["device"], "threads": threads,
              "steps": args.steps, "warmup": args.warmup, "tokens_per_step": tokens_per_step,
              "tokens_per_s": tokens_per_step * args.steps / sum(times),
              "step_ms_median": statistics.median(times) * 1e3,
              "cpu_ms_per_step": (time.process_time() - cpu_start) / args.steps * 1e3, "final_loss": loss,
              "phases_ms": {k: v / args.steps * 1e3 for k, v in phases.items()}}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"pytorch eager {c['dtype']} (params {c['param_dtype']}) on {c['device']}, {threads} threads: {result['tokens_per_s']:.0f} tokens/s, "
              f"step {result['step_ms_median']:.1f} ms median, phases (ms) "
              + ", ".join(f"{k} {v:.1f}" for k, v in result["phases_ms"].items()))


if __name__ == "__main__":
    main()
