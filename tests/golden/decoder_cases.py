"""The input and output of the decoder golden scripts (gpt_forward.py, hf_forward.py).

INPUT.json (argv[1]) holds {"cases": [{"config": {loom's model.* keys}, "params": {loom name: nested list},
"tokens": (B, T), ...}]}; each case's logits (B, T, V) are printed as {"logits": [...]}, in case order.
"""
import json
import sys

import torch


def run(forward):
    """forward(case, params as float64 tensors, tokens as int64) -> logits, for every case of argv[1]."""
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    logits = []
    for case in cases:
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in case["params"].items()}
        logits.append(forward(case, params, torch.tensor(case["tokens"], dtype=torch.long)).tolist())
    print(json.dumps({"logits": logits}))
