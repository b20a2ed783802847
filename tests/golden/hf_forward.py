"""Logits of Hugging Face transformers' own GPT2LMHeadModel and LlamaForCausalLM over loom's weights.

Usage: hf_forward.py INPUT.json (see decoder_cases.py), each case with "family": "gpt2" or "llama".
Logits are computed in float64 with eager attention.

The name mapping here is the one loom's safetensors export and import will use:
  GPT-2: Conv1D layers hold (in, out) matrices, so every linear weight is transposed; qkv is c_attn as is.
  LLaMA: qkv's rows [q: H*D | k: K*D | v: K*D] are q_proj, k_proj and v_proj. loom's RoPE already rotates
  halves (rotate_half), so no q/k row permutation is needed (that permutation maps Meta's interleaved
  checkpoints to this convention).
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import decoder_cases


def gpt2_config(cfg):
    return GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["max_seq_len"], n_embd=cfg["d_model"],
                      n_layer=cfg["n_layers"], n_head=cfg["n_heads"], n_inner=cfg["d_ff"],
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      layer_norm_epsilon=cfg["norm_eps"], tie_word_embeddings=True, bos_token_id=None,
                      eos_token_id=None)


def gpt2(cfg, p):
    config = gpt2_config(cfg)
    sd = {"transformer.wte.weight": p["token_embedding.weight"], "transformer.wpe.weight": p["position_embedding.weight"],
          "transformer.ln_f.weight": p["final_norm.weight"], "transformer.ln_f.bias": p["final_norm.bias"],
          "lm_head.weight": p["token_embedding.weight"]}
    names = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_attn": "attention.qkv", "attn.c_proj": "attention.out",
             "mlp.c_fc": "mlp.up", "mlp.c_proj": "mlp.down"}
    for i in range(cfg["n_layers"]):
        for hf, loom in names.items():
            w = p[f"blocks.{i}.{loom}.weight"]
            sd[f"transformer.h.{i}.{hf}.weight"] = w if hf.startswith("ln") else w.T.contiguous()
            sd[f"transformer.h.{i}.{hf}.bias"] = p[f"blocks.{i}.{loom}.bias"]
    return GPT2LMHeadModel(config), sd


def llama_config(cfg):
    H, C = cfg["n_heads"], cfg["d_model"]
    K, D = cfg["n_kv_heads"] or H, C // H
    rope = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    if cfg["rope_scaling"] == "linear":
        rope.update(rope_type="linear", factor=cfg["rope_scaling_factor"])
    return LlamaConfig(vocab_size=cfg["vocab_size"], hidden_size=C, intermediate_size=cfg["d_ff"],
                       num_hidden_layers=cfg["n_layers"], num_attention_heads=H, num_key_value_heads=K,
                       head_dim=D, max_position_embeddings=cfg["max_seq_len"], rms_norm_eps=cfg["norm_eps"],
                       rope_parameters=rope, attention_bias=cfg["bias"], mlp_bias=cfg["bias"],
                       tie_word_embeddings=cfg["tie_embeddings"], hidden_act="silu")


def llama(cfg, p):
    H, C = cfg["n_heads"], cfg["d_model"]
    K, D = cfg["n_kv_heads"] or H, C // H
    config = llama_config(cfg)
    sd = {"model.embed_tokens.weight": p["token_embedding.weight"], "model.norm.weight": p["final_norm.weight"],
          "lm_head.weight": p["token_embedding.weight" if cfg["tie_embeddings"] else "lm_head.weight"]}
    kinds = ["weight", "bias"] if cfg["bias"] else ["weight"]
    for i in range(cfg["n_layers"]):
        pre, hf = f"blocks.{i}.", f"model.layers.{i}."
        sd[hf + "input_layernorm.weight"] = p[pre + "ln1.weight"]
        sd[hf + "post_attention_layernorm.weight"] = p[pre + "ln2.weight"]
        for kind in kinds:
            q, k, v = p[pre + "attention.qkv." + kind].split([H * D, K * D, K * D], dim=0)
            sd.update({hf + "self_attn.q_proj." + kind: q, hf + "self_attn.k_proj." + kind: k,
                       hf + "self_attn.v_proj." + kind: v, hf + "self_attn.o_proj." + kind: p[pre + "attention.out." + kind],
                       hf + "mlp.gate_proj." + kind: p[pre + "mlp.gate." + kind],
                       hf + "mlp.up_proj." + kind: p[pre + "mlp.up." + kind],
                       hf + "mlp.down_proj." + kind: p[pre + "mlp.down." + kind]})
    return LlamaForCausalLM(config), sd


def forward(case, params, tokens):
    model, sd = {"gpt2": gpt2, "llama": llama}[case["family"]](case["config"], params)
    model.config._attn_implementation = "eager"
    model = model.to(torch.float64).eval()
    expected = set(model.state_dict())
    assert set(sd) == expected, f"names: missing {expected - set(sd)}, unexpected {set(sd) - expected}"
    model.load_state_dict(sd, strict=True)
    with torch.no_grad():
        return model(tokens).logits


if __name__ == "__main__":
    decoder_cases.run(forward)
