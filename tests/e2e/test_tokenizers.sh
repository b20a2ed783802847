#!/usr/bin/env bash
# loom's Hugging Face and tiktoken tokenizers give the references' ids (tokenizers and tiktoken, pinned in
# scripts/setup.sh), byte-level BPE and BERT's WordPiece, on the whole KJV, 8,000 verses each of WEB and Reina-Valera
# 1909, a Unicode torture text and every assigned code point,
# decode as they do, and round-trip where they do (tests/golden/tokenizer_golden.py). Then a tiktoken tokenizer
# (GPT-2's ranks, Llama 3's pattern, a special token at id 128255: 4-byte token files) trains, evaluates
# and generates through tokenizer.model, `loom info` takes its vocabulary, and unsupported files are refused
# naming what loom does not implement.
source "$(dirname "$0")/common.sh"
ranks=${LOOM_CACHE:-$HOME/.cache/loom}/gpt2.tiktoken
[ -s "$ranks" ] || fail "$ranks is missing: scripts/setup.sh fetches it (from the openai-whisper source package)"

cat "$KJV_DATA"/{train,valid,test}.txt > "$WORK/kjv.txt"
# The whole KJV (the kjv-* tokenizers' training text), and a quarter of each other Bible: modern English and Spanish.
"$SRC/scripts/bible_verses.sh" engWEB2015eb | cut -f3 | sed -n '1,8000p' > "$WORK/web.txt"
"$SRC/scripts/bible_verses.sh" spaRV1909eb | cut -f3 | sed -n '1,8000p' > "$WORK/rv1909.txt"
python3 "$SRC/tests/golden/tokenizer_golden.py" --loom "$LOOM" --work "$WORK/tok" --gpt2-ranks "$ranks" \
  --corpus kjv="$WORK/kjv.txt" --corpus web="$WORK/web.txt" --corpus rv1909="$WORK/rv1909.txt" || fail "golden ids"

# tokenizer.model = a .tiktoken file: Llama 3's pattern, a special token at Llama 3's last id (128255) that
# the text uses, so token files take 4-byte ids; training, eval, generate and info through tokenizer.model.
special='{"<|endoftext|>": 50256, "<|big|>": 128255}'
tk=(--set tokenizer.model="$ranks" --set tokenizer.pattern=llama3 --set "tokenizer.special_tokens=$special")
{ echo "<|big|> In the beginning"; cat "$KJV_DATA/train.txt"; } > "$WORK/train.txt"
cp "$KJV_DATA/valid.txt" "$WORK/valid.txt"
for split in train valid; do
  "$LOOM" tokenize --tokenizer "$ranks" --pattern llama3 --special-tokens "$special" --out "$WORK/$split.bin" \
    "$WORK/$split.txt" 2>/dev/null
done
python3 - "$WORK/train.bin" "$(wc -l < "$WORK/train.txt")" <<'PY' || fail "token file header"
import struct, sys
data = open(sys.argv[1], "rb").read()
token_bytes, count, vocab = struct.unpack("<IQQ", data[12:32])
assert (token_bytes, vocab) == (4, 128256), (token_bytes, vocab)
ids = struct.unpack(f"<{count}I", data[64:])
assert ids[0] == 128255 and ids.count(128255) == 1 and max(ids) == 128255, ids[:8]
assert ids.count(50256) == int(sys.argv[2]), "EOS (<|endoftext|>) ends every line"
PY
run=$WORK/run
"$LOOM" train "$SRC/tests/e2e/tiny.yaml" --set run.dir="$run" --set data.train="$WORK/train.bin" \
  --set data.valid="$WORK/valid.bin" "${tk[@]}" --set train.max_steps=4 --set train.eval_every=0 >/dev/null 2>&1 ||
  fail "training on tiktoken token files"
"$LOOM" eval "$run" >/dev/null 2>&1 || fail "eval of the tiktoken run"
out=$("$LOOM" generate "$run" --prompt "And God said" --max-new-tokens 8 --temperature 0 2>&1) || fail "generate: $out"
[[ "$out" == "And God said"* ]] || fail "generate does not start with the prompt: '$out'"
params=$("$LOOM" info "$SRC/tests/e2e/tiny.yaml" "${tk[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["parameters"])')
fixed=$("$LOOM" info "$SRC/tests/e2e/tiny.yaml" --set model.vocab_size=128256 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["parameters"])')
[ "$params" = "$fixed" ] || fail "loom info with a tiktoken tokenizer: $params parameters, $fixed at vocab 128256"

# Refusals name what is missing or not implemented.
expect_refusal() {  # expect_refusal CODE PATTERN -- COMMAND...
  local code=$1 pattern=$2; shift 3
  set +e; out=$("$@" 2>&1 </dev/null); got=$?; set -e
  [ $got -eq "$code" ] && grep -qE "$pattern" <<<"$out" || fail "expected exit $code and /$pattern/, got $got: $out"
}
expect_refusal 2 "carries no split pattern.*gpt2, cl100k_base, o200k_base, llama3" -- "$LOOM" encode --tokenizer "$ranks"
expect_refusal 2 "tokenizer.type: 'bpe' is not one of" -- "$LOOM" encode --tokenizer "$ranks" --type bpe
python3 - "$WORK" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, normalizers
work = sys.argv[1]
Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(f"{work}/wordlevel.json")
Tokenizer(models.WordPiece({"a": 0, "##b": 1}, unk_token="[UNK]")).save(f"{work}/wordpiece-no-unk.json")
Tokenizer(models.Unigram([("a", -1.0), ("<unk>", -2.0)], unk_id=1)).save(f"{work}/unigram.json")
t = Tokenizer(models.BPE({"a": 0}, []))
t.pre_tokenizer = pre_tokenizers.Metaspace()
t.save(f"{work}/metaspace.json")
t = Tokenizer(models.BPE({"a": 0}, []))
t.normalizer = normalizers.Nmt()
t.save(f"{work}/nmt-normalizer.json")
PY
expect_refusal 1 "model type 'WordLevel' is not implemented" -- "$LOOM" encode --tokenizer "$WORK/wordlevel.json"
expect_refusal 1 "wordpiece-no-unk.json: model.unk_token '\[UNK\]' is not in model.vocab" -- \
  "$LOOM" encode --tokenizer "$WORK/wordpiece-no-unk.json"
expect_refusal 1 "model type 'Unigram' is not implemented" -- "$LOOM" encode --tokenizer "$WORK/unigram.json"
expect_refusal 1 "pre-tokenizer 'Metaspace' is not implemented" -- "$LOOM" encode --tokenizer "$WORK/metaspace.json"
expect_refusal 1 "normalizer 'Nmt' is not implemented" -- "$LOOM" encode --tokenizer "$WORK/nmt-normalizer.json"
# Damaged copies of a tokenizer.json and of a rank file load or are refused naming the file; never a crash.
python3 - "$WORK/tok/kjv-bpe.json" "$ranks" "$WORK/damaged" <<'PY'
import os, random, sys
os.makedirs(sys.argv[3])
random.seed(5)
for source, suffix in ((sys.argv[1], "json"), (sys.argv[2], "tiktoken")):
    good = open(source, "rb").read()
    for n in range(6):
        open(f"{sys.argv[3]}/cut{n}.{suffix}", "wb").write(good[:random.randrange(len(good))])
    for n in range(6):
        data = bytearray(good)
        for _ in range(6):
            data[random.randrange(len(data))] = random.choice(b'0123456789{}[]",: \n\x00\xff')
        open(f"{sys.argv[3]}/flip{n}.{suffix}", "wb").write(bytes(data))
PY
loaded=0
for file in "$WORK"/damaged/*; do
  kind=(--type huggingface)
  [[ $file == *.json ]] || kind=(--type tiktoken --pattern gpt2)
  set +e; out=$(echo "In the beginning" | "$LOOM" encode --tokenizer "$file" "${kind[@]}" 2>&1); code=$?; set -e
  [ $code -lt 128 ] || fail "$file: killed by signal $((code - 128)): $out"
  if [ $code -eq 0 ]; then loaded=$((loaded + 1)); else grep -q "$file" <<<"$out" || fail "$file: exit $code without naming it: $out"; fi
done
echo "damaged tokenizer files: $(ls "$WORK"/damaged | wc -l), $loaded still load, none crashed"
echo '{"model": ' > "$WORK/broken.json"
expect_refusal 1 "broken.json: not valid JSON" -- "$LOOM" encode --tokenizer "$WORK/broken.json"
echo "PASS"
