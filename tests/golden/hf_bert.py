"""Hugging Face transformers' BertForMaskedLM (or, with "num_labels" in the config, BertForSequenceClassification) on
the far side of loom's BERT import and export.

Usage:
  hf_bert.py write INPUT.json DIR   a BertForMaskedLM with random weights (every parameter, norms and biases
                                    included), saved by save_pretrained(DIR)
  hf_bert.py read INPUT.json DIR    BertForMaskedLM.from_pretrained(DIR): what `loom export` wrote
INPUT.json: {"config": {vocab_size, d_model, n_layers, n_heads, d_ff, max_seq_len, norm_eps, tie_embeddings},
"tokens": (B, T), "padding": (B, T) 1 at padded positions, "token_types": (B, T), "seed": N}. Both print
{"logits": (B, T, V)}, or a classifier's (B, num_labels), in float32 with eager attention.
"""
import json
import os
import sys

import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def random_model(case):
    c = case["config"]
    torch.manual_seed(case["seed"])
    config = BertConfig(vocab_size=c["vocab_size"], hidden_size=c["d_model"], num_hidden_layers=c["n_layers"],
                        num_attention_heads=c["n_heads"], intermediate_size=c["d_ff"],
                        max_position_embeddings=c["max_seq_len"], layer_norm_eps=c["norm_eps"],
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu",
                        tie_word_embeddings=c["tie_embeddings"], pad_token_id=0, num_labels=c.get("num_labels", 2))
    model = model_class(case)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = "LayerNorm.weight" in name
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if gain else 0.0))
    return model


def model_class(case):
    return BertForSequenceClassification if "num_labels" in case["config"] else BertForMaskedLM


def logits(model, case):
    model.config._attn_implementation = "eager"
    model.eval()
    with torch.no_grad():
        mask = 1 - torch.tensor(case["padding"], dtype=torch.long)
        return model(input_ids=torch.tensor(case["tokens"], dtype=torch.long), attention_mask=mask,
                     token_type_ids=torch.tensor(case["token_types"], dtype=torch.long)).logits


if __name__ == "__main__":
    mode, input_path, directory = sys.argv[1:4]
    with open(input_path) as f:
        case = json.load(f)
    if mode == "write":
        model = random_model(case)
        model.save_pretrained(directory)
    else:
        model = model_class(case).from_pretrained(directory, attn_implementation="eager", dtype=torch.float32)
    print(json.dumps({"logits": logits(model, case).tolist()}))
