"""Golden logits for loom's GPT: a from-scratch PyTorch forward over the C++ model's own weights.

Usage: gpt_forward.py INPUT.json, where INPUT holds {"config": {d_model, n_heads, n_layers,
tie_embeddings}, "params": {name: nested list}, "tokens": (B, T)}. Prints {"logits": (B, T, V)}.
The reference is written the nanoGPT way (explicit causal softmax attention, pre-LN blocks, tanh GELU,
LayerNorm eps 1e-5), independently of loom's code, in float64 so that it is the exact side.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    cfg = spec["config"]
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in spec["params"].items()}
    tokens = torch.tensor(spec["tokens"], dtype=torch.long)
    B, T = tokens.shape
    C, H = cfg["d_model"], cfg["n_heads"]
    D = C // H

    def ln(x, prefix):
        return F.layer_norm(x, (C,), p[prefix + ".weight"], p[prefix + ".bias"], eps=1e-5)

    def linear(x, prefix, bias=True):
        return F.linear(x, p[prefix + ".weight"], p[prefix + ".bias"] if bias else None)

    x = p["token_embedding.weight"][tokens] + p["position_embedding.weight"][torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layers"]):
        pre = f"blocks.{i}."
        h = ln(x, pre + "ln1")
        q, k, v = linear(h, pre + "attention.qkv").split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, pre + "attention.out")
        h = ln(x, pre + "ln2")
        x = x + linear(F.gelu(linear(h, pre + "mlp.up"), approximate="tanh"), pre + "mlp.down")
    x = ln(x, "final_norm")
    head = p["token_embedding.weight"] if cfg["tie_embeddings"] else p["lm_head.weight"]
    logits = x @ head.T
    print(json.dumps({"logits": logits.tolist()}))


if __name__ == "__main__":
    main()
