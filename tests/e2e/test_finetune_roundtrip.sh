#!/usr/bin/env bash
# Fine-tuning a Hugging Face model end to end, twice: a GPT2LMHeadModel with a byte-level BPE tokenizer.json
# (trained by `tokenizers` on KJV verses) and a LlamaForCausalLM with the KJV SentencePiece model, each
# created at random and saved by transformers -> `loom prepare --sft` of prompt/response JSONL with that
# tokenizer -> `loom train` from model.init_from with packed documents (a few steps) -> `loom export` ->
# transformers loads the export, and its greedy continuation of a prompt equals `loom generate
# --temperature 0`, token for token, and so does the decoded text. fp32 throughout.
source "$(dirname "$0")/common.sh"
hf=$SRC/tests/golden/hf_safetensors.py

python3 - "$KJV_DATA/train.txt" "$WORK" <<'PY' || fail "could not make the tokenizer and the corpus"
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
verses = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")][:3000]
t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.decoder = decoders.ByteLevel()
t.train_from_iterator(verses, trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False,
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
t.save(f"{sys.argv[2]}/tokenizer.json")
with open(f"{sys.argv[2]}/sft.jsonl", "w") as f:  # a verse, then the verse after it
    for a, b in zip(verses[:400], verses[1:401]):
        f.write(json.dumps({"prompt": a + "\n", "response": b}) + "\n")
PY

# roundtrip NAME TOKENIZER VOCAB FAMILY [--set ...]: the whole chain for one model family.
roundtrip() {
  local name=$1 tokenizer=$2 vocab=$3 family=$4; shift 4
  local dir=$WORK/$name
  mkdir -p "$dir"
  cat >"$dir/case.json" <<JSON
{"family": "$family", "seed": 3, "tokens": [[0]], "config": {"vocab_size": $vocab, "d_model": 64, "n_layers": 2,
 "n_heads": 4, "n_kv_heads": 2, "d_ff": 176, "max_seq_len": 64, "norm_eps": 1e-5, "rope_theta": 10000,
 "rope_scaling": "none", "rope_scaling_factor": 1, "bias": $([ "$family" = gpt2 ] && echo true || echo false),
 "tie_embeddings": $([ "$family" = gpt2 ] && echo true || echo false)}}
JSON
  python3 "$hf" write "$dir/case.json" "$dir/hf" >/dev/null 2>&1 || fail "$name: transformers could not save a model"
  "$LOOM" prepare "$WORK/sft.jsonl" --sft --tokenizer "$tokenizer" --out "$dir/data" --valid-fraction 0.1 \
    >"$dir/prepare.log" 2>&1 || { cat "$dir/prepare.log"; fail "$name: prepare --sft failed"; }
  grep -q "counted by the loss" "$dir/prepare.log" || fail "$name: prepare did not report the loss mask"
  "$LOOM" train "$SRC/tests/e2e/tiny.yaml" --set run.dir="$dir/run" --set data.train="$dir/data" \
    --set data.valid="$dir/data" --set tokenizer.model="$tokenizer" --set data.document_mask=true \
    --set model.init_from="$dir/hf" --set model.vocab_size="$vocab" --set model.d_model=64 \
    --set model.n_layers=2 --set model.n_heads=4 --set model.d_ff=176 --set model.max_seq_len=64 \
    --set data.seq_len=48 --set model.dropout=0 --set precision.dtype=fp32 --set train.max_steps=4 \
    --set train.eval_every=2 --set checkpoint.every=4 --set optim.lr=1e-3 "$@" \
    >"$dir/train.log" 2>&1 || { cat "$dir/train.log"; fail "$name: training from the HF model failed"; }
  python3 - "$dir/run/metrics.jsonl" <<'PY' || fail "$name: metrics.jsonl does not count the loss tokens"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
assert rows and all(0 < r["loss_tokens"] < r["tokens"] / r["step"] for r in rows), rows
print("loss tokens per step:", [r["loss_tokens"] for r in rows], "of", rows[0]["tokens"], "input tokens")
PY
  "$LOOM" export "$dir/run" --format safetensors --out "$dir/export" >/dev/null || fail "$name: export failed"
  local prompt="And God said, Let there be"
  "$LOOM" generate "$dir/run" --prompt "$prompt" --temperature 0 --max-new-tokens 24 --json \
    >"$dir/loom.json" || fail "$name: loom generate failed"
  python3 - "$dir/export" "$tokenizer" "$prompt" "$dir/loom.json" <<'PY' || fail "$name: transformers' greedy continuation differs"
import json, sys
import torch
from transformers import AutoModelForCausalLM
export, tokenizer, prompt, ours = sys.argv[1:5]
if tokenizer.endswith(".json"):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    encode, decode = (lambda s: tok.encode(s, add_special_tokens=False).ids), tok.decode
else:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tokenizer)
    encode, decode = sp.encode, sp.decode
model = AutoModelForCausalLM.from_pretrained(export, attn_implementation="eager", dtype=torch.float32).eval()
ids = encode(prompt)
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, num_beams=1,
                         attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=0)
theirs = out[0, len(ids):].tolist()
eos = model.config.eos_token_id
if eos in theirs:
    theirs = theirs[:theirs.index(eos)]
loom = json.load(open(ours))
# Not two empty outputs: a continuation of 24 tokens, or fewer ending at eos where transformers' also ends.
ended = len(out[0]) - len(ids) > len(theirs)
assert theirs and (len(theirs) == 24) != ended, (theirs, ended)
assert loom["stop"] == ("eos" if ended else "length"), (loom["stop"], ended)
assert loom["tokens"] == theirs, (loom["tokens"], theirs)
text = decode(ids + theirs)
assert loom["text"] == text and len(text) > len(prompt), (loom["text"], text)
print(f"{len(theirs)} tokens equal ({loom['stop']}): {text!r}")
PY
}

roundtrip gpt2 "$WORK/tokenizer.json" 512 gpt2
sp_vocab=$(python3 -c "import sentencepiece as s, sys; print(s.SentencePieceProcessor(model_file=sys.argv[1]).vocab_size())" \
           "$KJV_DATA/tokenizer.model")
roundtrip llama "$KJV_DATA/tokenizer.model" "$sp_vocab" llama --set model.norm=rmsnorm --set model.position=rope \
  --set model.activation=swiglu --set model.bias=false --set model.tie_embeddings=false --set model.n_kv_heads=2
echo PASS
