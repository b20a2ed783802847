"""Golden values for loom's AdamW (make_adamw + set_learning_rate): torch.optim.AdamW on two groups.

A matrix (weight decay) and a bias (no decay) take `steps` steps with given gradients and a learning
rate that changes every step. Prints JSON with the initial values, the gradients, the learning rates,
the hyper-parameters and the parameters after every step.
"""
import json

import torch


def main():
    g = torch.Generator().manual_seed(7)
    lr, betas, eps, weight_decay = 1e-2, (0.9, 0.95), 1e-8, 0.1
    w = torch.randn(4, 3, generator=g)
    b = torch.randn(3, generator=g)
    steps = 5
    grads_w = [torch.randn(4, 3, generator=g) for _ in range(steps)]
    grads_b = [torch.randn(3, generator=g) for _ in range(steps)]
    lrs = [lr * (1.0 - 0.15 * i) for i in range(steps)]
    out = {
        "lr": lr, "betas": list(betas), "eps": eps, "weight_decay": weight_decay,
        "w": w.tolist(), "b": b.tolist(),
        "grads_w": [x.tolist() for x in grads_w], "grads_b": [x.tolist() for x in grads_b],
        "lrs": lrs, "w_after": [], "b_after": [],
    }
    w, b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    opt = torch.optim.AdamW(
        [{"params": [w], "weight_decay": weight_decay}, {"params": [b], "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps, foreach=False)
    for i in range(steps):
        for group in opt.param_groups:
            group["lr"] = lrs[i]
        w.grad, b.grad = grads_w[i].clone(), grads_b[i].clone()
        opt.step()
        out["w_after"].append(w.detach().tolist())
        out["b_after"].append(b.detach().tolist())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
