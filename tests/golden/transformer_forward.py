"""Golden logits for loom's encoder-decoder (model.arch: transformer): torch.nn.Transformer with loom's
weights loaded into it, in float64.

Usage: transformer_forward.py INPUT.json, INPUT holding {"cases": [{"config": {loom's model.* keys},
"params": {loom name: nested list}, "source": (B, S), "source_lengths": (B), "target": (B, T),
"target_lengths": (B)}]}. Prints {"logits": [(B, T, V) per case]}.

nn.Transformer is the paper's model: post-norm layers (norm_first=False) or pre-norm (norm_first=True),
fused q/k/v input projections laid out [q | k | v] like loom's qkv, ReLU or GELU. Its final encoder and
decoder LayerNorms exist only in loom's pre-norm variant (the post-norm stacks end normalized), so they are
removed for post-norm. Embeddings, positions and the output projection are not part of nn.Transformer and
are written here: embedding * sqrt(d_model) (scale_embeddings) + Vaswani's sinusoids (sin at 2i, cos at
2i + 1) or a learned table per side, logits = decoder output @ embedding^T (tied) or lm_head. Padding:
src_key_padding_mask and memory_key_padding_mask from the source lengths, tgt_key_padding_mask from the
target lengths, a causal tgt_mask.

nn.Transformer takes no RoPE, ALiBi or sliding window: a case with one of them (position rope or alibi,
attention_window > 0) is computed by explicit_forward, the same model written out (explicit softmax
attention with an additive bias per head) with RoPE by rotate_half (HF LLaMA's convention) and ALiBi by
Press et al.'s slopes from gpt_forward.py, in both stacks' self-attention: the encoder's bidirectional
(ALiBi -slope |i - j|, a window keeping |i - j| < window), the decoder's causal; the cross-attention has
none. explicit_forward is itself checked against nn.Transformer on every other case (1e-10).
"""
import json
import math
import sys
import warnings

import torch
import torch.nn.functional as F

from gpt_forward import alibi_slopes, rotate_half


def sinusoids(T, C):
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, C, 2, dtype=torch.float64) * (-math.log(10000.0) / C))
    pe = torch.zeros(T, C, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def forward(cfg, p, source, source_lengths, target, target_lengths):
    C, H = cfg["d_model"], cfg["n_heads"]
    n_dec = cfg["n_layers"]
    n_enc = cfg["n_encoder_layers"] or n_dec
    pre = cfg["norm_position"] == "pre"
    activation = F.relu if cfg["activation"] == "relu" else (lambda x: F.gelu(x, approximate="tanh"))
    # nn.Transformer's bias=False would drop the LayerNorm biases too, which loom keeps (model.bias is about
    # the linear layers): without biases, its linear biases are zeros instead.
    model = torch.nn.Transformer(d_model=C, nhead=H, num_encoder_layers=n_enc, num_decoder_layers=n_dec,
                                 dim_feedforward=cfg["d_ff"], dropout=0.0, activation=activation, batch_first=True,
                                 norm_first=pre, layer_norm_eps=cfg["norm_eps"], dtype=torch.float64)
    state = {}

    def bias(ours, like):
        return p[ours] if cfg["bias"] else torch.zeros(like.shape[0], dtype=torch.float64)

    def attention(ours, theirs):
        state[theirs + ".in_proj_weight"] = p[ours + ".qkv.weight"]
        state[theirs + ".out_proj.weight"] = p[ours + ".out.weight"]
        state[theirs + ".in_proj_bias"] = bias(ours + ".qkv.bias", p[ours + ".qkv.weight"])
        state[theirs + ".out_proj.bias"] = bias(ours + ".out.bias", p[ours + ".out.weight"])

    def linear(ours, theirs):
        state[theirs + ".weight"] = p[ours + ".weight"]
        state[theirs + ".bias"] = bias(ours + ".bias", p[ours + ".weight"])

    def norm(ours, theirs):
        state[theirs + ".weight"] = p[ours + ".weight"]
        state[theirs + ".bias"] = p[ours + ".bias"]

    for i in range(n_enc):
        ours, theirs = f"encoder.{i}.", f"encoder.layers.{i}."
        attention(ours + "attention", theirs + "self_attn")
        linear(ours + "mlp.up", theirs + "linear1")
        linear(ours + "mlp.down", theirs + "linear2")
        norm(ours + "ln1", theirs + "norm1")
        norm(ours + "ln2", theirs + "norm2")
    for i in range(n_dec):
        ours, theirs = f"decoder.{i}.", f"decoder.layers.{i}."
        attention(ours + "attention", theirs + "self_attn")
        attention(ours + "cross_attention", theirs + "multihead_attn")
        linear(ours + "mlp.up", theirs + "linear1")
        linear(ours + "mlp.down", theirs + "linear2")
        norm(ours + "ln1", theirs + "norm1")
        norm(ours + "ln_cross", theirs + "norm2")
        norm(ours + "ln2", theirs + "norm3")
    if pre:
        norm("encoder_norm", "encoder.norm")
        norm("decoder_norm", "decoder.norm")
    else:
        model.encoder.norm = None
        model.decoder.norm = None
    model.load_state_dict(state, strict=True)
    model.eval()

    E = p["token_embedding.weight"]
    scale = math.sqrt(C) if cfg["scale_embeddings"] else 1.0
    S, T = source.shape[1], target.shape[1]
    if cfg["position"] == "sinusoidal":
        src_pos, tgt_pos = sinusoids(S, C), sinusoids(T, C)
    else:
        src_pos, tgt_pos = p["encoder_positions.weight"][:S], p["decoder_positions.weight"][:T]
    src = E[source] * scale + src_pos
    tgt = E[target] * scale + tgt_pos
    src_pad = torch.arange(S)[None, :] >= source_lengths[:, None]
    tgt_pad = torch.arange(T)[None, :] >= target_lengths[:, None]
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    with torch.no_grad():
        out = model(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                    memory_key_padding_mask=src_pad, tgt_is_causal=True)
    head = E if cfg["tie_embeddings"] else p["lm_head.weight"]
    return out @ head.T


def explicit_forward(cfg, p, source, source_lengths, target, target_lengths):
    C, H = cfg["d_model"], cfg["n_heads"]
    D = C // H
    n_dec = cfg["n_layers"]
    n_enc = cfg["n_encoder_layers"] or n_dec
    pre = cfg["norm_position"] == "pre"
    position, window = cfg["position"], cfg.get("attention_window", 0)
    activation = F.relu if cfg["activation"] == "relu" else (lambda x: F.gelu(x, approximate="tanh"))

    def norm(x, name):
        return F.layer_norm(x, (C,), p[name + ".weight"], p[name + ".bias"], eps=cfg["norm_eps"])

    def linear(x, w, b):
        return F.linear(x, w, b if cfg["bias"] else None)

    def rope(x):  # (B, H, n, D), positions 0..n-1
        n = x.shape[2]
        inv_freq = 1.0 / cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = torch.cat([torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)] * 2, dim=-1)
        return x * angles.cos() + rotate_half(x) * angles.sin()

    def self_bias(n, causal, key_padding):  # (B or 1, H, n, n): ALiBi, window, causal and padding masks
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        visible = (j <= i) if causal else torch.ones(n, n, dtype=torch.bool)
        if window > 0:
            visible &= (i - j).abs() < window
        bias = torch.zeros(H, n, n, dtype=torch.float64)
        if position == "alibi":
            bias = -torch.tensor(alibi_slopes(H), dtype=torch.float64)[:, None, None] * (i - j).abs().to(torch.float64)
        bias = bias.masked_fill(~visible, float("-inf"))[None]
        if key_padding is not None:
            bias = bias.masked_fill(key_padding[:, None, None, :], float("-inf"))
        return bias

    def attention(x, kv, name, bias, positional):
        w, b = p[name + ".qkv.weight"], p.get(name + ".qkv.bias")
        part = lambda t, k: None if t is None else t[k * C:(k + 1) * C]
        heads = lambda t: t.view(t.shape[0], t.shape[1], H, D).transpose(1, 2)
        q, k, v = (heads(linear(inp, part(w, i), part(b, i))) for i, inp in enumerate((x, kv, kv)))
        if positional and position == "rope":
            q, k = rope(q), rope(k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D) + bias
        # A query whose every key is masked (a padded encoder position whose window holds only padding)
        # attends to nothing: zeros, as SDPA gives.
        weights = scores.softmax(-1).nan_to_num(0.0)
        y = (weights @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], C)
        return linear(y, p[name + ".out.weight"], p.get(name + ".out.bias"))

    def sublayer(x, name, f):
        return x + f(norm(x, name)) if pre else norm(x + f(x), name)

    def mlp(x, name):
        up = linear(x, p[name + ".up.weight"], p.get(name + ".up.bias"))
        return linear(activation(up), p[name + ".down.weight"], p.get(name + ".down.bias"))

    E = p["token_embedding.weight"]
    scale = math.sqrt(C) if cfg["scale_embeddings"] else 1.0
    S, T = source.shape[1], target.shape[1]
    x, y = E[source] * scale, E[target] * scale
    if position == "sinusoidal":
        x, y = x + sinusoids(S, C), y + sinusoids(T, C)
    elif position == "learned":
        x, y = x + p["encoder_positions.weight"][:S], y + p["decoder_positions.weight"][:T]
    src_pad = torch.arange(S)[None, :] >= source_lengths[:, None]
    encoder_bias, decoder_bias = self_bias(S, False, src_pad), self_bias(T, True, None)
    cross_bias = torch.zeros(source.shape[0], 1, 1, S, dtype=torch.float64).masked_fill(src_pad[:, None, None, :], float("-inf"))
    for i in range(n_enc):
        e = f"encoder.{i}."
        x = sublayer(x, e + "ln1", lambda h: attention(h, h, e + "attention", encoder_bias, True))
        x = sublayer(x, e + "ln2", lambda h: mlp(h, e + "mlp"))
    memory = norm(x, "encoder_norm") if pre else x
    for i in range(n_dec):
        d = f"decoder.{i}."
        y = sublayer(y, d + "ln1", lambda h: attention(h, h, d + "attention", decoder_bias, True))
        y = sublayer(y, d + "ln_cross", lambda h: attention(h, memory, d + "cross_attention", cross_bias, False))
        y = sublayer(y, d + "ln2", lambda h: mlp(h, d + "mlp"))
    if pre:
        y = norm(y, "decoder_norm")
    head = E if cfg["tie_embeddings"] else p["lm_head.weight"]
    return y @ head.T


def golden(cfg, params, *args):
    explicit = explicit_forward(cfg, params, *args)
    if cfg["position"] in ("rope", "alibi") or cfg.get("attention_window", 0) > 0:
        return explicit
    reference = forward(cfg, params, *args)
    real = torch.arange(args[2].shape[1])[None, :] < args[3][:, None]  # the real target positions
    worst = (explicit - reference)[real].abs().max().item()
    assert worst < 1e-10, f"explicit_forward differs from nn.Transformer by {worst}"
    return reference


if __name__ == "__main__":
    warnings.filterwarnings("ignore")  # nn.Transformer's notes on nested tensors and mask types
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    logits = []
    for case in cases:
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in case["params"].items()}
        args = [torch.tensor(case[k], dtype=torch.long) for k in ("source", "source_lengths", "target", "target_lengths")]
        logits.append(golden(case["config"], params, *args).tolist())
    print(json.dumps({"logits": logits}))
