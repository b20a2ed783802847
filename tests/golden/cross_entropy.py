"""Golden values for loom::cross_entropy: torch.nn.functional.cross_entropy losses and logits gradients.

Prints JSON {"cases": [{name, logits (N,V), targets (N), label_smoothing, ignore_index, loss, grad (N,V)}]}.
Inputs are float32 from a seeded generator, so the C++ test rebuilds them exactly from the JSON.
"""
import json

import torch
import torch.nn.functional as F


def case(name, logits, targets, smoothing, ignore_index=-100):
    logits = logits.clone().requires_grad_(True)
    if bool((targets == ignore_index).all()):
        # torch's mean over zero tokens is 0/0 = NaN; loom defines it as 0 (no gradient), which is
        # torch's sum reduction here.
        loss = F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=ignore_index, reduction="sum")
    else:
        loss = F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=ignore_index)
    loss.backward()
    return {
        "name": name,
        "logits": logits.detach().tolist(),
        "targets": targets.tolist(),
        "label_smoothing": smoothing,
        "ignore_index": ignore_index,
        "loss": loss.item(),
        "grad": logits.grad.tolist(),
    }


def main():
    g = torch.Generator().manual_seed(1234)
    n, v = 24, 13
    logits = torch.randn(n, v, generator=g) * 3.0
    targets = torch.randint(0, v, (n,), generator=g)
    some_ignored = targets.clone()
    some_ignored[::5] = -100
    other_ignore = targets.clone()
    other_ignore[1::3] = 7  # ignore_index 7: a real class id used as the padding id
    cases = []
    for smoothing in (0.0, 0.1, 0.3):
        cases.append(case(f"plain s={smoothing}", logits, targets, smoothing))
        cases.append(case(f"some ignored s={smoothing}", logits, some_ignored, smoothing))
    cases.append(case("ignore_index=7 s=0.1", logits, other_ignore, 0.1, ignore_index=7))
    big = torch.randn(4, v, generator=g) * 30.0  # large logits: log_softmax must stay stable
    cases.append(case("large logits s=0.1", big, torch.tensor([0, 5, 12, 3]), 0.1))
    cases.append(case("all ignored s=0", logits[:4], torch.full((4,), -100), 0.0))
    cases.append(case("all ignored s=0.1", logits[:4], torch.full((4,), -100), 0.1))
    print(json.dumps({"cases": cases}))


if __name__ == "__main__":
    main()
