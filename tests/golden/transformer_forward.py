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
"""
import json
import math
import sys
import warnings

import torch
import torch.nn.functional as F


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


if __name__ == "__main__":
    warnings.filterwarnings("ignore")  # nn.Transformer's notes on nested tensors and mask types
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    logits = []
    for case in cases:
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in case["params"].items()}
        args = [torch.tensor(case[k], dtype=torch.long) for k in ("source", "source_lengths", "target", "target_lengths")]
        logits.append(forward(case["config"], params, *args).tolist())
    print(json.dumps({"logits": logits}))
