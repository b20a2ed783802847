#!/usr/bin/env bash
# A BERT sequence classifier (model.num_labels; train/classify_task.h) fine-tuned on which testament a KJV verse
# is from: verses of the training books (every third) and all verses of the validation books (Ruth, Jonah:
# Old; Philippians: New), labelled Old / New, as JSON Lines. A tiny BERT is pretrained by MLM (whole words of
# the KJV's SentencePiece tokenizer masked; its validation MLM loss must end below the unigram baseline), exported
# (BertForMaskedLM) and fine-tuned from that file (model.init_from: encoder taken, pooler and classifier fresh);
# its validation accuracy must beat the majority label's by 15 points (measured: 0.857 against 0.561 after 150
# steps; 0.835 pretrained with token masking, 0.793 without the pretraining). `loom eval` repeats the last validation
# accuracy and adds macro F1 and the majority baseline; `loom classify` predicts what eval's predictions say;
# DP=2 and TP=2 equal the single process (losses within 1e-5, clipped gradient norms within 1e-4 relative), a
# resumed run repeats the uninterrupted one bit for bit; bad
# labelled files are refused naming the file, line and field.
source "$(dirname "$0")/common.sh"
"$SRC/scripts/bible_verses.sh" engKJV2006eb > "$WORK/verses.tsv" || fail "bible_verses.sh"
python3 - "$WORK/verses.tsv" "$WORK" <<'PY' || fail "the labelled verses"
import json, sys
testament, out, counts = "Old", {"train": [], "valid": []}, {}
for i, line in enumerate(open(sys.argv[1])):
    split, reference, text = line.rstrip("\n").split("\t")
    testament = "New" if reference.startswith("Matthew 1:1") else testament
    if split == "valid" or (split == "train" and i % 3 == 0):
        out[split].append(json.dumps({"text": text, "label": testament}))
for split, rows in out.items():
    open(f"{sys.argv[2]}/{split}.jsonl", "w").write("\n".join(rows) + "\n")
    print(split, len(rows), "verses,", sum('"New"' in r for r in rows), "New")
PY
model=(--set model.d_model=64 --set model.n_layers=2 --set model.n_heads=2 --set model.max_seq_len=64
       --set data.seq_len=64 --set model.dropout=0 --set precision.dtype=fp32 --set schedule.warmup_steps=5
       --set checkpoint.every=0 --set runtime.threads=1 --set tokenizer.model=$KJV_DATA/tokenizer.model)
"$LOOM" train "$SRC/configs/bert-kjv.yaml" --set run.dir="$WORK/mlm" --set data.train="$KJV_DATA/train.bin" \
  --set data.valid="$KJV_DATA/valid.bin" "${model[@]}" --set train.max_steps=200 --set train.batch_size=16 \
  --set train.log_every=50 --set train.eval_every=200 --set train.eval_batches=8 --set data.whole_word_masking=true \
  >"$WORK/mlm.log" 2>&1 || { tail -5 "$WORK/mlm.log"; fail "MLM pretraining"; }
# The pretraining's validation MLM loss must fall below what token frequencies alone give: the cross-entropy of
# the validation tokens under the training tokens' unigram distribution (5.72 nats; measured: 5.53 at step 200).
python3 - "$WORK/mlm" "$KJV_DATA" <<'PY' || fail "the MLM pretraining's validation loss is not below the unigram baseline"
import json, sys
import numpy as np
run, data = sys.argv[1], sys.argv[2]
tokens = lambda name: np.frombuffer(open(f"{data}/{name}.bin", "rb").read()[64:], dtype=np.uint16)  # 64-byte header
counts = np.bincount(tokens("train"), minlength=1024) + 1.0
unigram = float(-np.log(counts[tokens("valid")] / counts.sum()).mean())
valid = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"valid"' in l]
assert valid and valid[-1]["step"] == 200, valid
print(f"MLM pretraining: validation loss {valid[-1]['loss']:.3f} (accuracy {valid[-1]['accuracy']:.3f}), unigram baseline {unigram:.3f}")
assert valid[-1]["loss"] < unigram - 0.1, (valid[-1], unigram)
PY
"$LOOM" export "$WORK/mlm" --format safetensors --out "$WORK/mlm-hf" >/dev/null 2>&1 || fail "export of the MLM run"
train_args() {
  echo "$SRC/configs/bert-kjv.yaml --set run.dir=$1 --set model.num_labels=2 --set data.train=$WORK/train.jsonl" \
       "--set data.valid=$WORK/valid.jsonl --set model.init_from=$WORK/mlm-hf ${model[*]}" \
       "--set train.max_steps=150 --set train.batch_size=32 --set train.log_every=1 --set train.eval_every=75" \
       "--set train.eval_batches=8 --set optim.lr=1e-3 --set runtime.device=$E2E_DEVICE"
}
tiny_train "$WORK/classify" >"$WORK/classify.log" 2>&1 || { tail -5 "$WORK/classify.log"; fail "fine-tuning"; }
"$LOOM" eval "$WORK/classify" --json --translations "$WORK/predicted.txt" >"$WORK/eval.json" || fail "loom eval"
python3 - "$WORK/classify" "$WORK/eval.json" "$WORK/valid.jsonl" <<'PY' || fail "accuracy against the majority label"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
valid = [r for r in rows if r["split"] == "valid"]
out = json.load(open(sys.argv[2]))
labels = [json.loads(l)["label"] for l in open(sys.argv[3])]
majority = max(labels.count("Old"), labels.count("New")) / len(labels)
assert [r["step"] for r in valid] == [75, 150], valid
assert abs(out["accuracy"] - valid[-1]["accuracy"]) < 1e-9 and abs(out["loss"] - valid[-1]["loss"]) < 1e-6, (out, valid)
assert out["majority_label"] == "Old" and abs(out["majority_accuracy"] - majority) < 1e-9, out
assert out["accuracy"] >= majority + 0.15, f"accuracy {out['accuracy']:.3f}, majority label {majority:.3f}"
assert 0 < out["macro_f1"] <= 1, out
print(f"valid accuracy {out['accuracy']:.3f} (step 75: {valid[0]['accuracy']:.3f}), macro F1 {out['macro_f1']:.3f}, "
      f"majority label {majority:.3f} over {len(labels)} verses")
PY
python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$WORK/valid.jsonl" \
  | "$LOOM" classify "$WORK/classify" >"$WORK/classified.txt" 2>/dev/null || fail "loom classify"
cmp -s "$WORK/classified.txt" "$WORK/predicted.txt" || fail "loom classify differs from loom eval's predictions"

train_args_short() { echo "--set train.max_steps=10 --set train.eval_every=5 --set train.eval_batches=2"; }
# shellcheck disable=SC2046
tiny_train "$WORK/single" $(train_args_short) >/dev/null 2>&1 || fail "10-step single run"
# shellcheck disable=SC2046
mpi_train 2 "$WORK/dp2" --set parallel.dp=2 $(train_args_short) || fail "DP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/dp2" "BERT classifier DP=2"
# shellcheck disable=SC2046
mpi_train 2 "$WORK/tp2" --set parallel.tp=2 --set parallel.dp=1 $(train_args_short) || fail "TP=2 failed"
same_losses_and_grad_norms "$WORK/single" "$WORK/tp2" "BERT classifier TP=2"
# Stopped at its step-5 checkpoint and resumed, a run repeats the uninterrupted losses bit for bit (the epoch's
# order is a function of the seed).
# shellcheck disable=SC2046
tiny_train "$WORK/resumed" $(train_args_short) --set checkpoint.every=5 --set train.max_steps=5 \
  --set schedule.total_steps=10 >/dev/null 2>&1 || fail "first half"
# shellcheck disable=SC2046
tiny_train "$WORK/resumed" $(train_args_short) --set checkpoint.every=5 --set schedule.total_steps=10 \
  >"$WORK/resumed.log" 2>&1 || fail "resumed half"
grep -q "resum" "$WORK/resumed.log" || fail "the second half did not resume"
# shellcheck disable=SC2046
tiny_train "$WORK/whole" $(train_args_short) --set schedule.total_steps=10 >/dev/null 2>&1 || fail "whole run"
same_losses "$WORK/whole" "$WORK/resumed" "BERT classifier resumed at step 5"

head -3 "$WORK/valid.jsonl" > "$WORK/bad.jsonl"; echo '{"text": "And it came to pass"}' >> "$WORK/bad.jsonl"
expect() {  # expect PATTERN -- ARGS...: loom train fails (exit 2) naming PATTERN
  local pattern=$1; shift 2
  set +e; out=$(tiny_train "$WORK/bad" "$@" 2>&1); got=$?; set -e
  [ $got -eq 2 ] && grep -qE "$pattern" <<<"$out" || fail "expected exit 2 and /$pattern/, got $got: $out"
}
expect 'bad.jsonl:4: no "label" field' -- --set data.valid="$WORK/bad.jsonl"
echo '{"text": "Selah", "label": "Apocrypha"}' > "$WORK/unknown.jsonl"
expect "unknown.jsonl:1: label 'Apocrypha' is not one of the training file's labels \(New, Old\)" -- \
  --set data.valid="$WORK/unknown.jsonl"
expect "model.num_labels: 3, but .*train.jsonl has 2 labels \(New, Old\): set it to 2" -- --set model.num_labels=3
echo "PASS"
