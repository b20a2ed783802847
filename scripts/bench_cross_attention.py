#!/usr/bin/env python3
# The serving engine's choice for an encoder-decoder's cross-attention in a ragged decode batch (serve/served_model.h):
# docs/performance.md "Translation runs through the engine". Usage: OMP_NUM_THREADS=2 python3 scripts/bench_cross_attention.py
# Cross-attention of one decode step over a ragged batch: padded to the longest source with a key mask (one SDPA)
# against a loop of one SDPA per row over its own source.
import time, torch, random
torch.set_num_threads(2)
random.seed(0)
def bench(B, H, D, lengths):
    S = max(lengths)
    q = torch.randn(B, H, 1, D)
    rows = [(torch.randn(1, H, n, D), torch.randn(1, H, n, D)) for n in lengths]
    k = torch.zeros(B, H, S, D); v = torch.zeros(B, H, S, D)
    for b, (kb, vb) in enumerate(rows): k[b, :, :lengths[b]] = kb; v[b, :, :lengths[b]] = vb
    pad = torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]
    mask = (~pad)[:, None, None, :]
    def padded(): return torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)
    def ragged(): return torch.cat([torch.nn.functional.scaled_dot_product_attention(q[b:b+1], kb, vb) for b, (kb, vb) in enumerate(rows)])
    assert torch.allclose(padded(), ragged(), atol=1e-5)
    out = {}
    for name, f in (("padded", padded), ("ragged", ragged)):
        for _ in range(20): f()
        t = time.perf_counter(); n = 300
        for _ in range(n): f()
        out[name] = (time.perf_counter() - t) / n * 1e6
    return out
for B, H, D, lo, hi in ((32, 2, 16, 20, 60), (32, 4, 64, 20, 60), (32, 8, 64, 5, 120), (8, 8, 64, 5, 120)):
    lengths = [random.randint(lo, hi) for _ in range(B)]
    r = bench(B, H, D, lengths)
    print(f"B={B} H={H} D={D} sources {lo}-{hi}: padded {r['padded']:.0f} us, ragged loop {r['ragged']:.0f} us per layer-step")
