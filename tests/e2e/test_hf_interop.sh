#!/usr/bin/env bash
# Weights in and out of Hugging Face's ecosystem on a tiny LLaMA (GQA, untied) trained on the KJV:
# `loom export` writes model.safetensors + config.json that transformers' from_pretrained loads with the same
# validation loss as `loom eval` of the run; `loom eval CONFIG --set model.init_from=...` gives the run's loss
# again from the exported file; transformers' own random LLaMA evaluates in loom to transformers' loss;
# `loom train` starts from init_from (a lower first loss than the random init) and a resumed run uses its
# checkpoint even once the file is gone. Evaluation in fp32 throughout.
source "$(dirname "$0")/common.sh"
llama=(--set model.norm=rmsnorm --set model.position=rope --set model.activation=swiglu --set model.bias=false
       --set model.tie_embeddings=false --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=176
       --set model.dropout=0)
fp32=(--set precision.dtype=fp32)
golden() { python3 "$SRC/tests/golden/hf_safetensors.py" "$@" 2>/dev/null; }
json_get() { python3 -c "import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
close() {  # close A B TOLERANCE LABEL
  python3 -c "import sys; a, b = $1, $2; sys.exit(not abs(a - b) <= $3 * max(1.0, abs(a)))" || fail "$4: $1 vs $2"
  echo "$4: $1 vs $2"
}
# loom eval's windows: train.eval_batches=2 batches of train.batch_size=16 sequences of 32 tokens (tiny.yaml).
windows=(32 2 16)

run=$WORK/run
tiny_train "$run" "${llama[@]}" >"$run.log" 2>&1 || { cat "$run.log"; fail "training failed"; }

# Export: files, names and the HF config.
"$LOOM" export "$run" --format safetensors --out "$WORK/hf" || fail "export failed"
[ -s "$WORK/hf/model.safetensors" ] && [ -s "$WORK/hf/config.json" ] || fail "export wrote no files"
python3 - "$WORK/hf" <<'PY' || fail "exported files are not what transformers expects"
import json, sys
from safetensors import safe_open
config = json.load(open(f"{sys.argv[1]}/config.json"))
assert config["model_type"] == "llama" and config["num_key_value_heads"] == 2, config
with safe_open(f"{sys.argv[1]}/model.safetensors", "pt") as f:
    assert f.metadata()["format"] == "pt"
    assert "model.layers.1.self_attn.k_proj.weight" in f.keys() and "lm_head.weight" in f.keys()
PY

# config.json's special tokens are the run's SentencePiece ids (spm_train's defaults: bos 1, eos 2, no pad),
# for LLaMA and for GPT-2 names, whose GPT2Config would otherwise assume GPT-2's 50256.
tiny_train "$WORK/gpt2" --set train.max_steps=2 >"$WORK/gpt2.log" 2>&1 || { cat "$WORK/gpt2.log"; fail "training failed"; }
"$LOOM" export "$WORK/gpt2" --format safetensors --out "$WORK/hf-gpt2" || fail "GPT-2 export failed"
python3 - "$WORK/hf" "$WORK/hf-gpt2" <<'PY' || fail "config.json's special token ids are not the tokenizer's"
import json, sys
from transformers import AutoConfig
for path in sys.argv[1:]:
    config = AutoConfig.from_pretrained(path)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, None), (path, config)
    assert config.eos_token_id < config.vocab_size, (path, config.vocab_size)
    print(f"{config.model_type}: bos {config.bos_token_id}, eos {config.eos_token_id}, pad {config.pad_token_id}")
PY

# The run's validation loss in loom, in transformers from the export, and in loom from the export.
ours=$("$LOOM" eval "$run" "${fp32[@]}" --json | json_get loss)
theirs=$(golden loss "$WORK/hf" "$KJV_DATA/valid.bin" "${windows[@]}" | json_get loss)
close "$ours" "$theirs" 1e-5 "valid loss: loom eval of the run vs transformers from the export"
trained=$(python3 "$SRC/tests/e2e/metrics.py" get "$run" valid 20 loss)
close "$trained" "$ours" 1e-7 "valid loss: the trainer's at step 20 vs loom eval of the run"
# shellcheck disable=SC2046
again=$("$LOOM" eval $(tiny_args "$WORK/unused") "${llama[@]}" "${fp32[@]}" \
        --set model.init_from="$WORK/hf/model.safetensors" --set data.valid="$KJV_DATA/valid.bin" --json | json_get loss)
close "$ours" "$again" 1e-7 "valid loss: the run vs loom eval CONFIG --set model.init_from=export"
"$LOOM" eval "$run" --split test >/dev/null 2>&1 && fail "--split test without data.test should fail"
test_loss=$("$LOOM" eval "$run" "${fp32[@]}" --split test --set data.test="$KJV_DATA/test.bin" --json | json_get loss)
echo "test loss $test_loss"

# transformers' own random LLaMA (vocab of the KJV data) evaluated by loom equals transformers' loss.
vocab=$(python3 -c "import sys; print(int.from_bytes(open(sys.argv[1], 'rb').read()[24:32], 'little'))" "$KJV_DATA/train.bin")
cat >"$WORK/case.json" <<JSON
{"family": "llama", "seed": 5, "tokens": [[0]], "config": {"vocab_size": $vocab, "d_model": 64, "n_layers": 2,
 "n_heads": 4, "n_kv_heads": 2, "d_ff": 176, "max_seq_len": 32, "norm_eps": 1e-5, "rope_theta": 10000,
 "rope_scaling": "none", "rope_scaling_factor": 1, "bias": false, "tie_embeddings": false}}
JSON
golden write "$WORK/case.json" "$WORK/hf-random" >/dev/null || fail "transformers could not write a model"
theirs=$(golden loss "$WORK/hf-random" "$KJV_DATA/valid.bin" "${windows[@]}" | json_get loss)
# shellcheck disable=SC2046
ours=$("$LOOM" eval $(tiny_args "$WORK/unused") "${llama[@]}" "${fp32[@]}" \
       --set model.init_from="$WORK/hf-random/model.safetensors" --json | json_get loss)
close "$ours" "$theirs" 1e-5 "valid loss of transformers' random LLaMA: loom vs transformers"

# Training from the export starts where the run ended; a resumed run no longer needs the file.
cp "$WORK/hf/model.safetensors" "$WORK/init.safetensors"
fresh_first=$(python3 "$SRC/tests/e2e/metrics.py" get "$run" train 1 loss)
tiny_train "$WORK/warm" "${llama[@]}" --set model.init_from="$WORK/init.safetensors" --set train.max_steps=10 \
  >"$WORK/warm.log" 2>&1 || { cat "$WORK/warm.log"; fail "training from init_from failed"; }
warm_first=$(python3 "$SRC/tests/e2e/metrics.py" get "$WORK/warm" train 1 loss)
echo "first train loss: random init $fresh_first, from the export $warm_first"
python3 -c "import sys; sys.exit(not ($warm_first < $fresh_first - 1.0))" || fail "init_from did not start from the weights"
if tiny_train "$WORK/bad" "${llama[@]}" --set model.d_ff=128 --set model.init_from="$WORK/init.safetensors" \
  >"$WORK/bad.log" 2>&1; then fail "init_from with other shapes should fail"; fi
grep -q "init.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape \[176, 64\]" "$WORK/bad.log" \
  || { cat "$WORK/bad.log"; fail "the shape error does not name the tensor"; }
rm "$WORK/init.safetensors"
tiny_train "$WORK/warm" "${llama[@]}" --set model.init_from="$WORK/init.safetensors" --set train.max_steps=20 \
  >>"$WORK/warm.log" 2>&1 || { cat "$WORK/warm.log"; fail "the resumed run needed the init_from file"; }
grep -q "resumed from .*/checkpoints/10" "$WORK/warm.log" || fail "did not resume"
# Usage errors exit 2 before any work.
usage_error() {  # usage_error PATTERN loom-args...
  local pattern=$1; shift
  set +e; out=$("$LOOM" "$@" 2>&1); code=$?; set -e
  [ $code -eq 2 ] && grep -q -- "$pattern" <<<"$out" || fail "'$*' exited $code: $out"
}
usage_error "model.init_from: 'w.bin' is not a .safetensors file" eval "$SRC/tests/e2e/tiny.yaml" --set model.init_from=w.bin
usage_error "is not a format loom writes" export "$run" --format onnx --out "$WORK/x"
usage_error "--out DIR is required" export "$run"
usage_error "--split: 'train' is not valid or test" eval "$run" --split train
usage_error "a run dir's checkpoint fixes the model" eval "$run" --set model.d_ff=8
echo PASS
