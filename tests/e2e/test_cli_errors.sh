#!/usr/bin/env bash
# Bad configs stop before any work with exit code 2 and a message naming file:line and the key;
# `loom info --json` reports the closed-form parameter count.
source "$(dirname "$0")/common.sh"

expect_config_error() {  # expect_config_error PATTERN loom-args...
  local pattern=$1; shift
  set +e
  out=$("$LOOM" "$@" 2>&1); code=$?
  set -e
  [ $code -eq 2 ] || fail "'$*' exited $code (expected 2): $out"
  grep -q -- "$pattern" <<<"$out" || fail "'$*' said '$out', expected '$pattern'"
  echo "ok: $pattern"
}

cfg=$WORK/bad.yaml
printf 'run:\n  dir: %s/x\nmodel:\n  d_model: 64\n  n_heads: 3\n' "$WORK" > "$cfg"
expect_config_error "bad.yaml:5: model.n_heads: 3 does not divide model.d_model=64" train "$cfg"
printf 'model:\n  d_model: 64\n  colour: blue\n' > "$cfg"
expect_config_error "bad.yaml:3: model.colour: unknown key" train "$cfg"
printf 'train:\n  max_steps: ten\n' > "$cfg"
expect_config_error "bad.yaml:2: train.max_steps: expected an integer, got 'ten'" train "$cfg"
printf 'model: [1, 2\n' > "$cfg"
expect_config_error "bad.yaml:.*malformed YAML" train "$cfg"
expect_config_error "optim.lr: -1 must be > 0" train "$SRC/tests/e2e/tiny.yaml" --set optim.lr=-1
expect_config_error "unknown key" train "$SRC/tests/e2e/tiny.yaml" --set optim.learning_rate=1
expect_config_error "cannot open the config file" train "$WORK/missing.yaml"
expect_config_error "unknown option --sett" train "$SRC/tests/e2e/tiny.yaml" --sett x=1
expect_config_error "parallel.dp \* cp \* tp \* pp = 2 \* 1 \* 1 \* 1 = 2 but the job has 1 process" \
  train $(tiny_args "$WORK/r") --set parallel.dp=2

# A missing data file is a config error (exit 2) naming the key and the file: when the vocabulary is to come from
# it (no tokenizer.model, model.vocab_size 0), before anything is built; otherwise when the task opens it.
missing_data() {  # missing_data PATTERN [--set ...]
  local pattern=$1; shift
  set +e
  out=$("$LOOM" train "$SRC/tests/e2e/tiny.yaml" --set run.dir="$WORK/r" --set data.train="$WORK/none.bin" "$@" 2>&1)
  code=$?
  set -e
  [ $code -eq 2 ] && grep -qF -- "$pattern" <<<"$out" || fail "missing data: $code '$out'"
  echo "ok: $pattern"
}
missing_data "model.vocab_size: 0 takes the tokenizer's size, but data.train=$WORK/none.bin does not exist yet"
missing_data "data.train: $WORK/none.bin does not exist" --set model.vocab_size=100

# Token files made by another tokenizer are refused.
spm_train --input="$KJV_DATA/valid.txt" --model_prefix="$WORK/other" --model_type=bpe --vocab_size=300 \
  --minloglevel=2 >/dev/null 2>&1
set +e
out=$("$LOOM" train $(tiny_args "$WORK/r") --set tokenizer.model="$WORK/other.model" 2>&1); code=$?
set -e
[ $code -eq 1 ] && grep -q "was not made with tokenizer.model=$WORK/other.model" <<<"$out" || fail "tokenizer mismatch: $code '$out'"

# A truncated token file is refused with its name.
head -c 1000 "$KJV_DATA/valid.bin" > "$WORK/cut.bin"
set +e
out=$("$LOOM" train $(tiny_args "$WORK/r") --set data.valid="$WORK/cut.bin" 2>&1); code=$?
set -e
[ $code -eq 1 ] && grep -q "$WORK/cut.bin: truncated" <<<"$out" || fail "truncated token file: $code '$out'"

# loom info: the closed form 12*L*C^2 + 13*L*C + (V + T)*C + 2*C for a tied GPT with d_ff = 4C.
json=$("$LOOM" info "$SRC/configs/gpt-kjv.yaml" --set model.vocab_size=4096 --json)
python3 - "$json" <<'PY' || fail "loom info: $json"
import json, sys
info = json.loads(sys.argv[1])
L, C, V, T = 4, 256, 4096, 128
assert info["parameters"] == 12 * L * C * C + 13 * L * C + (V + T) * C + 2 * C, info
assert abs(info["flops_per_token"] - (6 * (12 * L * C * C + V * C) + 12 * L * C * 128)) < 1, info
PY
echo PASS
