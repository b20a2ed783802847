"""Hugging Face transformers' T5ForConditionalGeneration on the far side of loom's T5 import and export.

Usage:
  hf_t5.py write INPUT.json DIR   a T5ForConditionalGeneration with random weights (every parameter, norms and
                                  relative bias tables included), saved by save_pretrained(DIR)
  hf_t5.py read INPUT.json DIR    T5ForConditionalGeneration.from_pretrained(DIR): what `loom export` wrote
  hf_t5.py count INPUT.json -     the parameter count of T5ForConditionalGeneration(T5Config(**config)), built on
                                  the meta device (and of the untied-head shape transformers 4 built)
INPUT.json: {"config": {vocab_size, d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads,
relative_attention_num_buckets, relative_attention_max_distance, feed_forward_proj, scale (the decoder output's
d_model^-0.5)}, "source": (B, S), "source_padding": (B, S) 1 at padded positions, "target": (B, T), "seed": N}.
write and read print {"logits": (B, T, V)} in float32 with eager attention.
"""
import json
import os
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def t5_config(c):
    keys = ["vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
            "relative_attention_num_buckets", "relative_attention_max_distance", "feed_forward_proj"]
    # transformers 5 reads tie_word_embeddings=False as "do not scale the decoder output" (the head stays tied).
    return T5Config(**{k: c[k] for k in keys if k in c}, dropout_rate=0.0, layer_norm_epsilon=1e-6,
                    tie_word_embeddings=bool(c.get("scale", True)), pad_token_id=0, eos_token_id=1,
                    decoder_start_token_id=0)


def random_model(case):
    torch.manual_seed(case["seed"])
    model = T5ForConditionalGeneration(t5_config(case["config"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = "layer_norm" in name
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if gain else 0.0))
    return model


def logits(model, case):
    model.config._attn_implementation = "eager"
    model.eval()
    with torch.no_grad():
        mask = 1 - torch.tensor(case["source_padding"], dtype=torch.long)
        return model(input_ids=torch.tensor(case["source"], dtype=torch.long), attention_mask=mask,
                     decoder_input_ids=torch.tensor(case["target"], dtype=torch.long)).logits


if __name__ == "__main__":
    mode, input_path, directory = sys.argv[1:4]
    with open(input_path) as f:
        case = json.load(f)
    if mode == "count":
        with torch.device("meta"):
            model = T5ForConditionalGeneration(t5_config(case["config"]))
        tied = sum(p.numel() for p in model.parameters())
        print(json.dumps({"parameters": tied, "untied": tied + model.lm_head.weight.numel()}))
        sys.exit(0)
    if mode == "write":
        model = random_model(case)
        model.save_pretrained(directory)
    else:
        model = T5ForConditionalGeneration.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32)
    print(json.dumps({"logits": logits(model, case).tolist()}))
