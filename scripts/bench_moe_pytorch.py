#!/usr/bin/env python3
"""PyTorch eager twin of `build/tests/loom_tests "[.moe-bench]"`: one MoE layer's experts, forward + backward of
4096 tokens at C 256 with SwiGLU experts of F 512 in fp32, routed top-k-then-softmax from random logits, timed
best of 4 on the same thread count. The experts run as Hugging Face's MixtralSparseMoeBlock runs them: a loop
over experts, each taking its tokens (torch.where on the one-hot routing), its own three nn.Linear layers, and
index_add_ of the weighted output. scripts/bench_moe.sh runs both sides in one run.

    scripts/bench_moe_pytorch.py [--threads 2]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(c, f, bias=False), nn.Linear(c, f, bias=False), nn.Linear(f, c, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def moe(experts, x, top, weights):
    out = torch.zeros_like(x)
    mask = F.one_hot(top, len(experts)).permute(2, 1, 0)  # (E, k, N)
    for e, expert in enumerate(experts):
        slot, token = torch.where(mask[e])
        if token.numel():
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(5)
    n, c, f = 4096, 256, 512
    for e, k in ((8, 2), (32, 4)):
        experts = nn.ModuleList(Expert(c, f) for _ in range(e))
        x, g = torch.randn(n, c), torch.randn(n, c)
        weights, top = torch.randn(n, e).topk(k, dim=-1)
        weights = weights.softmax(-1)
        best = float("inf")
        for _ in range(4):
            leaf = x.clone().requires_grad_()
            start = time.perf_counter()
            moe(experts, leaf, top, weights).backward(g)
            best = min(best, time.perf_counter() - start)
        print(f"E={e} k={k}, {n} tokens, C={c} F={f}: PyTorch eager (Mixtral's expert loop) {best * 1e3:.1f} ms "
              f"({n / best:.0f} tokens/s)")


if __name__ == "__main__":
    main()
