#!/usr/bin/env bash
# loom info on the encoder-decoder presets with the paper's 37000-token joint vocabulary: parameter
# counts within 5% of Vaswani et al.'s 65M (base) and 213M (big), FLOPs per token above 6 x parameters
# less the embedding, and memory parts that add up.
source "$(dirname "$0")/common.sh"
"$LOOM" info "$SRC/configs/transformer-base.yaml" --set model.vocab_size=37000 | tee "$WORK/base.txt"
grep -q "^model          transformer, 6 encoder + 6 decoder layers, d_model 512" "$WORK/base.txt" || fail "base: model line"
python3 - "$LOOM" "$SRC/configs" <<'PY' || fail "loom info on the transformer presets"
import json, subprocess, sys
loom, configs = sys.argv[1], sys.argv[2]
for name, paper in (("transformer-base", 65e6), ("transformer-big", 213e6)):
    out = json.loads(subprocess.check_output([loom, "info", f"{configs}/{name}.yaml", "--json",
                                              "--set", "model.vocab_size=37000"]))
    n, m = out["parameters"], out["memory"]
    print(f"{name}: {n:,} parameters ({n / paper - 1:+.1%} of the paper's {paper / 1e6:.0f}M), "
          f"{out['flops_per_token']:.4g} FLOPs/token")
    assert abs(n / paper - 1) < 0.05, (name, n)
    assert out["flops_per_token"] > 6 * (n - 37000 * (512 if name.endswith("base") else 1024)), name
    parts = ("weights", "gradients", "optimizer", "gathered", "activations", "pipeline_sends")
    assert m["total"] == sum(m[k] for k in parts), name
    assert all(v > 0 for k, v in m.items() if k not in ("gathered", "pipeline_sends")), name  # ZeRO-3, pp > 1 only
PY
echo PASS
