"""Golden value for the SFT loss: torch.nn.functional.cross_entropy with ignore_index=-100 over the targets
a loss mask keeps, on logits loom computed.

Usage: sft_loss.py CASE.json, where CASE.json holds {logits (B,T,V), next_tokens (B,T), mask (B,T) of 0/1,
label_smoothing}: the window's next tokens and, for each, whether the loss counts it. Prints JSON {loss,
counted}: the mean over the counted targets only, and how many there are.
"""
import json
import sys

import torch
import torch.nn.functional as F


def main():
    with open(sys.argv[1]) as f:
        case = json.load(f)
    logits = torch.tensor(case["logits"], dtype=torch.float64)
    targets = torch.tensor(case["next_tokens"], dtype=torch.long)
    mask = torch.tensor(case["mask"], dtype=torch.bool)
    targets = torch.where(mask, targets, torch.full_like(targets, -100))
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                           label_smoothing=case["label_smoothing"])
    print(json.dumps({"loss": loss.item(), "counted": int(mask.sum())}))


if __name__ == "__main__":
    main()
