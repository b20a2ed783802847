#!/usr/bin/env bash
# A tiny GPT trains 50 steps on KJV: training and validation loss fall clearly; the run dir holds the
# resolved config, metrics with the documented keys, and the final checkpoint.
source "$(dirname "$0")/common.sh"
run=$WORK/run
tiny_train "$run" --set train.max_steps=50 --set checkpoint.every=25

get() { python3 "$SRC/tests/e2e/metrics.py" get "$run" "$@"; }
first=$(get train 1 loss); last=$(get train 50 loss)
valid10=$(get valid 10 loss); valid50=$(get valid 50 loss)
echo "train loss $first -> $last, valid loss $valid10 -> $valid50"
python3 -c "import sys; sys.exit(not ($last < $first - 1.0))" || fail "train loss did not fall by 1 nat"
python3 -c "import sys; sys.exit(not ($valid50 < $valid10 - 0.3))" || fail "valid loss did not fall"
python3 - "$run/metrics.jsonl" <<'PY' || fail "metrics.jsonl lacks keys"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["split"] == "train"]
assert [r["step"] for r in train] == list(range(1, 51)), "one train row per step"
for key in ["step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "elapsed_s"]:
    assert all(key in r for r in train), key
assert train[-1]["tokens"] == 50 * 16 * 32
PY
[ -f "$run/config.yaml" ] || fail "no resolved config"
grep -q "vocab_size: 1024" "$run/config.yaml" || fail "vocab_size not resolved from the tokenizer"
[ -f "$run/checkpoints/50/manifest.json" ] && [ -f "$run/checkpoints/25/manifest.json" ] || fail "checkpoints missing"
echo PASS
