"""Hugging Face transformers on the far side of loom's safetensors import and export.

Usage:
  hf_safetensors.py write INPUT.json DIR   a GPT2LMHeadModel / LlamaForCausalLM with random weights (every
                                           parameter, norms and biases included), saved by save_pretrained(DIR)
  hf_safetensors.py read INPUT.json DIR    AutoModelForCausalLM.from_pretrained(DIR): what `loom export` wrote
  hf_safetensors.py loss DIR TOKENS SEQ_LEN BATCHES BATCH_SIZE
                                           from_pretrained(DIR)'s mean cross-entropy over the validation windows
                                           `loom eval` takes: windows (b * BATCH_SIZE + i) % n of SEQ_LEN + 1 tokens
INPUT.json: {"family": "gpt2" | "llama", "config": loom's model.* keys (as decoder_cases.py), "tokens": (B, T),
"seed": N}. write and read print {"logits": (B, T, V)}; loss prints {"loss": x}. All in float32, eager attention.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, GPT2LMHeadModel, LlamaForCausalLM

import hf_forward

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def from_pretrained(directory):
    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32)
    return model.eval()


def random_model(case):
    torch.manual_seed(case["seed"])
    if case["family"] == "gpt2":
        model = GPT2LMHeadModel(hf_forward.gpt2_config(case["config"]))
    else:
        model = LlamaForCausalLM(hf_forward.llama_config(case["config"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = name.endswith("norm.weight") or ".ln_" in name and name.endswith(".weight")
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if gain else 0.0))
    model.config._attn_implementation = "eager"
    return model.eval()


def logits(model, case):
    with torch.no_grad():
        return model(torch.tensor(case["tokens"], dtype=torch.long)).logits


def token_file(path):
    """The token ids of a loom token file (64-byte header; 2- or 4-byte little-endian ids)."""
    raw = open(path, "rb").read()
    width, count = int.from_bytes(raw[12:16], "little"), int.from_bytes(raw[16:24], "little")
    ids = np.frombuffer(raw, dtype={2: "<u2", 4: "<u4"}[width], count=count, offset=64)
    return torch.from_numpy(ids.astype(np.int64))


def eval_loss(directory, tokens_path, seq_len, batches, batch_size):
    model, ids = from_pretrained(directory), token_file(tokens_path)
    windows = (len(ids) - 1) // seq_len
    starts = [((b * batch_size + i) % windows) * seq_len for b in range(batches) for i in range(batch_size)]
    rows = torch.stack([ids[s:s + seq_len + 1] for s in starts])
    with torch.no_grad():
        out = model(rows[:, :-1]).logits
        return torch.nn.functional.cross_entropy(out.flatten(0, 1).double(), rows[:, 1:].flatten()).item()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "loss":
        print(json.dumps({"loss": eval_loss(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))}))
        sys.exit(0)
    with open(sys.argv[2]) as f:
        case = json.load(f)
    if mode == "write":
        model = random_model(case)
        model.save_pretrained(sys.argv[3])
    else:
        model = from_pretrained(sys.argv[3])
    print(json.dumps({"logits": logits(model, case).tolist()}))
