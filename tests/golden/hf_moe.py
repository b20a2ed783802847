"""Hugging Face's Mixture-of-Experts models on the far side of loom's model.init_from and `loom export`.

Usage:
  hf_moe.py write INPUT.json DIR   a MixtralForCausalLM / Qwen3MoeForCausalLM with random weights (every
                                   parameter), saved by save_pretrained(DIR)
  hf_moe.py read INPUT.json DIR    AutoModelForCausalLM.from_pretrained(DIR): what `loom export` wrote
  hf_moe.py generate DIR TOKENS N  from_pretrained(DIR)'s greedy continuation of the comma-separated TOKENS by N
                                   tokens (prints {"tokens": [...]}, the new ones)
INPUT.json: {"family": "mixtral" | "qwen3_moe", "config": loom's model.* keys (see tests/unit/test_moe_hf.cpp),
"tokens": (B, T), "seed": N}. write and read print {"logits": (B, T, V)}. All in float32, eager attention.
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def hf_config(family, c):
    common = dict(vocab_size=c["vocab_size"], hidden_size=c["d_model"], num_hidden_layers=c["n_layers"],
                  num_attention_heads=c["n_heads"], num_key_value_heads=c["n_kv_heads"] or c["n_heads"],
                  head_dim=c["head_dim"], max_position_embeddings=c["max_seq_len"], rms_norm_eps=c["norm_eps"],
                  rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
                  tie_word_embeddings=c["tie_embeddings"], num_experts_per_tok=c["top_k"], hidden_act="silu")
    if family == "mixtral":
        return MixtralConfig(intermediate_size=c["expert_d_ff"], num_local_experts=c["num_experts"], **common)
    return Qwen3MoeConfig(intermediate_size=c["d_ff"], moe_intermediate_size=c["expert_d_ff"],
                          num_experts=c["num_experts"], norm_topk_prob=c["normalize"], decoder_sparse_step=1,
                          mlp_only_layers=c["dense_layers"], attention_bias=False, **common)


def random_model(case):
    torch.manual_seed(case["seed"])
    config = hf_config(case["family"], case["config"])
    model = (MixtralForCausalLM if case["family"] == "mixtral" else Qwen3MoeForCausalLM)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = name.endswith("norm.weight")
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if gain else 0.0))
    model.config._attn_implementation = "eager"
    return model.eval()


def from_pretrained(directory):
    return AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32).eval()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "generate":
        model = from_pretrained(sys.argv[2])
        prompt = torch.tensor([[int(t) for t in sys.argv[3].split(",")]])
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=int(sys.argv[4]), do_sample=False, pad_token_id=0)
        print(json.dumps({"tokens": out[0, prompt.shape[1]:].tolist()}))
        sys.exit(0)
    with open(sys.argv[2]) as f:
        case = json.load(f)
    if mode == "write":
        model = random_model(case)
        model.save_pretrained(sys.argv[3])
    else:
        model = from_pretrained(sys.argv[3])
    with torch.no_grad():
        logits = model(torch.tensor(case["tokens"], dtype=torch.long)).logits
    print(json.dumps({"logits": logits.tolist()}))
