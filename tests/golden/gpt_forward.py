"""Golden logits for loom's decoder (every variant): a from-scratch PyTorch forward over the C++ model's
own weights.

Usage: gpt_forward.py INPUT.json (see decoder_cases.py), each case's config with loom's model.* keys
(d_model, n_heads, n_kv_heads, n_layers, tie_embeddings, norm, norm_eps, position, rope_theta,
rope_scaling, rope_scaling_factor, activation, bias, attention_window).

The reference is written the nanoGPT / Hugging Face LLaMA way, independently of loom's code: explicit
softmax attention with a (T, T) mask, pre-norm blocks, LayerNorm or RMSNorm, tanh GELU / ReLU / SwiGLU /
GeGLU, learned or Vaswani sinusoidal positions, RoPE with rotate_half (HF LlamaForCausalLM's convention),
ALiBi with Press et al.'s get_slopes, grouped-query attention by repeat_interleave of the kv heads, and a
sliding window (key j visible to query i when i - window < j <= i). Float64 throughout: the exact side.
"""
import math

import torch
import torch.nn.functional as F

import decoder_cases


def alibi_slopes(n):  # Press et al.'s reference implementation
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(cfg, p, tokens):
    B, T = tokens.shape
    C, H, L = cfg["d_model"], cfg["n_heads"], cfg["n_layers"]
    K = cfg["n_kv_heads"] or H
    D = C // H
    bias = cfg["bias"]
    pos = torch.arange(T, dtype=torch.float64)

    def norm(x, prefix):
        if cfg["norm"] == "layernorm":
            return F.layer_norm(x, (C,), p[prefix + ".weight"], p[prefix + ".bias"], eps=cfg["norm_eps"])
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"]) * p[prefix + ".weight"]

    def linear(x, prefix, has_bias=bias):
        return F.linear(x, p[prefix + ".weight"], p[prefix + ".bias"] if has_bias else None)

    x = p["token_embedding.weight"][tokens]
    if cfg["position"] == "learned":
        x = x + p["position_embedding.weight"][:T]
    elif cfg["position"] == "sinusoidal":
        pe = torch.zeros(T, C, dtype=torch.float64)
        div = torch.exp(torch.arange(0, C, 2, dtype=torch.float64) * (-math.log(10000.0) / C))
        pe[:, 0::2] = torch.sin(pos[:, None] * div)
        pe[:, 1::2] = torch.cos(pos[:, None] * div)
        x = x + pe

    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    visible = j <= i
    if cfg["attention_window"] > 0:
        visible &= j > i - cfg["attention_window"]
    scores_bias = torch.zeros(H, T, T, dtype=torch.float64)
    if cfg["position"] == "alibi":
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float64)
        scores_bias = -slopes[:, None, None] * (i - j).abs().to(torch.float64)
    if cfg["position"] == "rope":
        theta, factor = cfg["rope_theta"], cfg["rope_scaling_factor"]
        if cfg["rope_scaling"] == "ntk":
            theta = theta * factor ** (D / (D - 2))
        scaled = pos / factor if cfg["rope_scaling"] == "linear" else pos
        inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = torch.cat([torch.outer(scaled, inv_freq)] * 2, dim=-1)  # (T, D)
        cos, sin = angles.cos(), angles.sin()

    for layer in range(L):
        pre = f"blocks.{layer}."
        h = norm(x, pre + "ln1")
        q, k, v = linear(h, pre + "attention.qkv").split([H * D, K * D, K * D], dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k, v = (t.view(B, T, K, D).transpose(1, 2) for t in (k, v))
        if cfg["position"] == "rope":
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)  # (B, H, T, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D) + scores_bias
        scores = scores.masked_fill(~visible, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + linear(y, pre + "attention.out")
        h = norm(x, pre + "ln2")
        act = cfg["activation"]
        if act == "gelu":
            m = F.gelu(linear(h, pre + "mlp.up"), approximate="tanh")
        elif act == "relu":
            m = F.relu(linear(h, pre + "mlp.up"))
        elif act == "swiglu":
            m = F.silu(linear(h, pre + "mlp.gate")) * linear(h, pre + "mlp.up")
        else:
            m = F.gelu(linear(h, pre + "mlp.gate"), approximate="tanh") * linear(h, pre + "mlp.up")
        x = x + linear(m, pre + "mlp.down")
    x = norm(x, "final_norm")
    head = p["token_embedding.weight"] if cfg["tie_embeddings"] else p["lm_head.weight"]
    return x @ head.T


if __name__ == "__main__":
    decoder_cases.run(lambda case, params, tokens: forward(case["config"], params, tokens))
