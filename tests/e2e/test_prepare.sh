#!/usr/bin/env bash
# loom prepare end to end, on KJV verses: JSONL (plain, .gz, .zst) and a directory of text -> a prepared
# directory whose documents are the ids of the sentencepiece PyPI package + EOS (the reference), the same
# bytes with 1, 2 or 3 threads, a re-run that does nothing -> a tiny GPT trained on it (data.train: DIR,
# data.valid: DIR) resumes exactly; a mixture of two directories draws at its weights (tokens_by_source),
# resumes exactly and continues under DP=2 on the single-process curve; bad inputs fail naming file:line
# and leave no manifest, or are skipped and counted with --on-error skip; a tokenizer.json and a .tiktoken
# (--pattern) prepare loom encode's ids, and another pattern redoes the directory.
source "$(dirname "$0")/common.sh"
TOK=$KJV_DATA/tokenizer.model
C=$WORK/corpus
mkdir -p "$C/books/deep" "$C/other"
python3 - "$KJV_DATA/train.txt" "$C" <<'PY'
import gzip, json, sys
verses = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")][:10000]
c = sys.argv[2]
with open(f"{c}/a.jsonl", "w") as f:
    for i, v in enumerate(verses[0:2000]):
        f.write(json.dumps({"id": i, "text": v}) + "\n")
with gzip.open(f"{c}/b.jsonl.gz", "wt") as f:
    for v in verses[2000:4000]:
        f.write(json.dumps({"text": v, "meta": {"lang": "en"}}, ensure_ascii=False) + "\n")
with open(f"{c}/c.jsonl", "w") as f:  # compressed to c.jsonl.zst by the zstd tool below
    for v in verses[4000:6000]:
        f.write(json.dumps({"text": v}) + "\n")
open(f"{c}/books/deep/d.txt", "w").write("".join(v + "\n" for v in verses[6000:7000]))
open(f"{c}/books/e.txt", "w").write("".join(v + "\n" for v in verses[7000:8000]))
# The second source: paragraphs of 4 verses separated by blank lines.
open(f"{c}/other/f.txt", "w").write("".join(
    "\n".join(verses[i:i + 4]) + "\n\n" for i in range(8000, 10000, 4)))
PY
zstd -q --rm "$C/c.jsonl" -o "$C/c.jsonl.zst"
inputs=("$C/a.jsonl" "$C/b.jsonl.gz" "$C/c.jsonl.zst" "$C/books")

## Prepare: threads change nothing; the ids are the reference's.
for t in 1 2 3; do
  "$LOOM" prepare "${inputs[@]}" --tokenizer "$TOK" --out "$WORK/A$t" --threads "$t" --valid-fraction 0.05 \
    --shard-tokens 40000 > "$WORK/A$t.log" 2>&1 || fail "prepare --threads $t: $(tail -3 "$WORK/A$t.log")"
done
for f in "$WORK"/A1/*; do
  cmp "$f" "$WORK/A2/$(basename "$f")" && cmp "$f" "$WORK/A3/$(basename "$f")" || fail "$(basename "$f") differs by threads"
done
echo "prepare: $(ls "$WORK/A1" | wc -l) files, identical with 1, 2 and 3 threads"
A=$WORK/A1
python3 - "$A" "$TOK" "$C" <<'PY' || fail "the prepared documents are not the reference's"
import glob, gzip, json, struct, subprocess, sys, zlib
import sentencepiece as spm
out, model, c = sys.argv[1:4]
sp = spm.SentencePieceProcessor(model_file=model)
m = json.load(open(f"{out}/manifest.json"))
texts = [json.loads(l)["text"] for l in open(f"{c}/a.jsonl")]
texts += [json.loads(l)["text"] for l in gzip.open(f"{c}/b.jsonl.gz", "rt")]
texts += [json.loads(l)["text"] for l in subprocess.run(["zstd", "-dcq", f"{c}/c.jsonl.zst"], capture_output=True,
                                                        text=True, check=True).stdout.splitlines()]
for name in ["books/deep/d.txt", "books/e.txt"]:  # the directory, recursively, in sorted order
    texts += open(f"{c}/{name}").read().splitlines()
assert [i["path"].split("/corpus/")[1] for i in m["inputs"]] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst",
                                                                  "books/deep/d.txt", "books/e.txt"], m["inputs"]
def documents(split):
    docs = []
    for shard in m["splits"][split]["shards"]:
        data = open(f"{out}/{shard['tokens_file']}", "rb").read()[64:]
        ids = list(struct.unpack(f"<{len(data) // 2}H", data))
        index = open(f"{out}/{shard['index_file']}", "rb").read()[64:]
        starts = list(struct.unpack(f"<{len(index) // 8}Q", index)) + [len(ids)]
        assert zlib.crc32(data) == shard["data_crc32"]
        docs += [ids[a:b] for a, b in zip(starts, starts[1:])]
    return docs
train, valid = documents("train"), documents("valid")
assert len(train) + len(valid) == len(texts) == 8000 and m["skipped"]["empty"] == 0
# Which split each text went to is loom's hash; the reference says what its tokens are: every document,
# in input order, is the reference's ids + EOS.
expected = {tuple(sp.encode(t)) + (sp.eos_id(),) for t in texts}
ordered = [tuple(sp.encode(t)) + (sp.eos_id(),) for t in texts]
got = [tuple(d) for d in train + valid]
assert all(d in expected for d in got)
valid_set, train_set = set(map(tuple, valid)), set(map(tuple, train))
assert [d for d in ordered if d in valid_set] == [tuple(d) for d in valid]
assert [d for d in ordered if d in train_set] == [tuple(d) for d in train]
assert 0.03 < len(valid) / 8000 < 0.07, len(valid)
assert m["splits"]["train"]["tokens"] == sum(map(len, train)) and len(m["splits"]["train"]["shards"]) >= 2
print(f"prepared: {len(train)} train + {len(valid)} valid documents, {m['splits']['train']['tokens']} train tokens, "
      f"all equal to sentencepiece's ids + EOS")
PY
before=$(stat -c %Y "$A/manifest.json")
"$LOOM" prepare "${inputs[@]}" --tokenizer "$TOK" --out "$A" --threads 2 --valid-fraction 0.05 --shard-tokens 40000 \
  > "$WORK/rerun.log" 2>&1 || fail "re-run"
grep -q "is up to date" "$WORK/rerun.log" && [ "$(stat -c %Y "$A/manifest.json")" = "$before" ] || fail "a re-run did work"
echo "prepare again on unchanged inputs: nothing to do"

## Train on it; resume exactly.
on_A=(--set data.train="$A" --set data.valid="$A" --set tokenizer.model="$TOK" --set schedule.total_steps=20)
tiny_train "$WORK/ref" "${on_A[@]}" > "$WORK/ref.log" 2>&1 || fail "training on $A: $(tail -3 "$WORK/ref.log")"
tiny_train "$WORK/halves" "${on_A[@]}" --set train.max_steps=10 > /dev/null 2>&1 || fail "first half"
tiny_train "$WORK/halves" "${on_A[@]}" > /dev/null 2>&1 || fail "second half"
same_losses "$WORK/ref" "$WORK/halves" "data.train: DIR resumed at step 10"

## A mixture of two prepared directories.
"$LOOM" prepare "$C/other" --blank-line-docs --tokenizer "$TOK" --out "$WORK/B" --valid-fraction 0 \
  > "$WORK/B.log" 2>&1 || fail "prepare B: $(tail -3 "$WORK/B.log")"
grep -q "train: 500 documents" "$WORK/B.log" || fail "B: expected 500 paragraphs: $(cat "$WORK/B.log")"
mix=(--set "data.train=[{path: $A, weight: 3}, {path: $WORK/B, weight: 1}]" --set data.valid="$A"
     --set tokenizer.model="$TOK" --set model.dropout=0 --set schedule.total_steps=20 --set train.micro_batch_size=0)
tiny_train "$WORK/mix" "${mix[@]}" > "$WORK/mix.log" 2>&1 || fail "mixture: $(tail -3 "$WORK/mix.log")"
python3 - "$WORK/mix" "$A" "$WORK/B" <<'PY' || fail "tokens_by_source"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"train"' in l]
last = rows[-1]["tokens_by_source"]
a, b = last[sys.argv[2]], last[sys.argv[3]]
assert a + b == rows[-1]["tokens"] == 20 * 16 * 32, (a, b, rows[-1]["tokens"])
assert abs(a / (a + b) - 0.75) < 0.01, a / (a + b)
print(f"mixture 3:1 over 320 sequences: {a / (a + b):.4f} of the tokens from A")
PY
tiny_train "$WORK/mix-halves" "${mix[@]}" --set train.max_steps=10 > /dev/null 2>&1 || fail "mixture first half"
tiny_train "$WORK/mix-halves" "${mix[@]}" > /dev/null 2>&1 || fail "mixture second half"
same_losses "$WORK/mix" "$WORK/mix-halves" "mixture resumed at step 10"
# shellcheck disable=SC2046
"${MPIRUN[@]}" -np 2 "$LOOM" train $(tiny_args "$WORK/mix-dp") "${mix[@]}" --set parallel.dp=-1 --set train.max_steps=10 \
  > "$WORK/mix-dp.log" 2>&1 || fail "mixture under DP=2: $(tail -3 "$WORK/mix-dp.log")"
tiny_train "$WORK/mix-dp" "${mix[@]}" > /dev/null 2>&1 || fail "mixture resumed in one process"
same_losses_within "$WORK/mix" "$WORK/mix-dp" "mixture: steps 1-10 under DP=2, 11-20 in one process" 1e-5
grep -q '"tokens_by_source"' "$WORK/mix-dp/metrics.jsonl" || fail "no tokens_by_source under DP"

## Bad inputs.
expect_error() {  # expect_error CODE PATTERN COMMAND...
  local want=$1 pattern=$2; shift 2
  set +e
  out=$("$@" 2>&1 </dev/null)
  code=$?
  set -e
  [ $code -eq "$want" ] || fail "$*: exit code $code, expected $want: $out"
  grep -Eq -- "$pattern" <<<"$out" || fail "$*: the output lacks '$pattern': $out"
}
printf '{"text": "one"}\n{"text": "two"}\n{"text": "three", }\n{"body": "four"}\n\n' > "$C/bad.jsonl"
expect_error 1 "$C/bad.jsonl:3: malformed JSON.*--on-error skip" \
  "$LOOM" prepare "$C/bad.jsonl" --tokenizer "$TOK" --out "$WORK/bad"
[ ! -e "$WORK/bad/manifest.json" ] && [ -z "$(ls "$WORK/bad")" ] || fail "a failed prepare left files: $(ls "$WORK/bad")"
expect_error 0 "skipped: 1 empty, 1 malformed_json, 1 missing_field" \
  "$LOOM" prepare "$C/bad.jsonl" --tokenizer "$TOK" --out "$WORK/bad" --on-error skip --valid-fraction 0
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['skipped']['malformed_json'] == 1 and \
m['splits']['train']['documents'] == 2, m" "$WORK/bad/manifest.json" || fail "skipped counts in the manifest"
head -c 300 "$C/b.jsonl.gz" > "$C/cut.jsonl.gz"
expect_error 1 "$C/cut.jsonl.gz: truncated gzip" "$LOOM" prepare "$C/cut.jsonl.gz" --tokenizer "$TOK" --out "$WORK/cut"
touch "$C/notes.md"
expect_error 1 "notes.md is not a corpus file .*extensions" "$LOOM" prepare "$C/notes.md" --tokenizer "$TOK" --out "$WORK/x"
expect_error 2 "--tokenizer FILE .* is missing" "$LOOM" prepare "$C/a.jsonl" --out "$WORK/x"
expect_error 2 "--threads 0 must be in" "$LOOM" prepare "$C/a.jsonl" --tokenizer "$TOK" --out "$WORK/x" --threads 0
# shellcheck disable=SC2046
expect_error 1 "data.valid: $WORK/B has no valid documents" "$LOOM" train $(tiny_args "$WORK/t1") \
  --set data.train="$A" --set data.valid="$WORK/B" --set tokenizer.model="$TOK"
# --train-tokenizer: a SentencePiece model of its own in the directory, which the other data was not made with.
"$LOOM" prepare "$C/other" --blank-line-docs --train-tokenizer sentencepiece --vocab 500 --out "$WORK/T" \
  > "$WORK/T.log" 2>&1 || fail "--train-tokenizer: $(tail -3 "$WORK/T.log")"
python3 -c "import sentencepiece as s, sys; assert s.SentencePieceProcessor(model_file=sys.argv[1]).vocab_size() == 500" \
  "$WORK/T/tokenizer.model" || fail "--train-tokenizer: not a 500-piece model"
# shellcheck disable=SC2046
expect_error 1 "$A \(train split\) was not made with tokenizer.model=$WORK/T/tokenizer.model \(checksum mismatch\)" \
  "$LOOM" train $(tiny_args "$WORK/t2") --set data.train="$A" --set data.valid="$WORK/T" \
  --set tokenizer.model="$WORK/T/tokenizer.model"
## Any tokenizer: a byte-level BPE tokenizer.json (trained here by Hugging Face tokenizers) and GPT-2's
## .tiktoken ranks with --pattern. Every document is `loom encode --no-special-in-text`'s ids + the
## tokenizer's <|endoftext|> (a special token written in a document stays text), and training takes the
## directory with that tokenizer.model. A .tiktoken's pattern is part of its checksum: another one redoes DIR.
ranks=${LOOM_CACHE:-$HOME/.cache/loom}/gpt2.tiktoken
[ -s "$ranks" ] || fail "$ranks is missing: scripts/setup.sh fetches it (from the openai-whisper source package)"
python3 - "$KJV_DATA/train.txt" "$C" <<'PY'
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
verses = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")][:3000]
t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.decoder = decoders.ByteLevel()
t.train_from_iterator(verses, trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False,
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
t.save(f"{sys.argv[2]}/tokenizer.json")
with open(f"{sys.argv[2]}/any.jsonl", "w") as f:
    for v in verses[:300] + ["a literal <|endoftext|> stays text", "caf\u00e9 \u65e5\u672c\u8a9e \U0001F642 \u05e9\u05dc\u05d5\u05dd"]:
        f.write(json.dumps({"text": v}, ensure_ascii=False) + "\n")
PY
python3 -c 'import json, sys; print("\n".join(json.loads(l)["text"] for l in open(sys.argv[1])))' "$C/any.jsonl" \
  > "$C/any.txt"
prepare_with() {  # prepare_with NAME EOS_ID TOKENIZER_OPTION...: prepares any.jsonl into $WORK/NAME, checks its ids
  local name=$1 eos=$2; shift 2
  "$LOOM" prepare "$C/any.jsonl" "$@" --out "$WORK/$name" --valid-fraction 0 > "$WORK/$name.log" 2>&1 ||
    fail "prepare with $*: $(tail -3 "$WORK/$name.log")"
  "$LOOM" encode "$@" --no-special-in-text < "$C/any.txt" > "$WORK/$name.plain" || fail "loom encode $*"
  "$LOOM" encode "$@" < "$C/any.txt" > "$WORK/$name.special" || fail "loom encode $*"
  python3 - "$WORK/$name" "$eos" <<'PY' || fail "$name: the prepared documents are not loom encode's ids + EOS"
import json, struct, sys
out, eos = sys.argv[1], int(sys.argv[2])
m = json.load(open(f"{out}/manifest.json"))
assert m["tokenizer"]["eos_id"] == eos, m["tokenizer"]
docs = []
for shard in m["splits"]["train"]["shards"]:
    data = open(f"{out}/{shard['tokens_file']}", "rb").read()[64:]
    ids = list(struct.unpack(f"<{len(data) // 2}H", data))
    starts = list(struct.unpack(f"<{shard['documents']}Q", open(f"{out}/{shard['index_file']}", "rb").read()[64:]))
    docs += [ids[a:b] for a, b in zip(starts, starts[1:] + [len(ids)])]
plain = [[int(i) for i in l.split()] + [eos] for l in open(f"{out}.plain")]
special = [[int(i) for i in l.split()] + [eos] for l in open(f"{out}.special")]
assert len(docs) == len(plain) == 302 and docs == plain, (len(docs), len(plain))
assert eos in special[300][:-1] and eos not in plain[300][:-1]  # <|endoftext|> in the text: text, not EOS
print(f"{out.rsplit('/', 1)[1]}: {len(docs)} documents, {sum(map(len, docs))} tokens, loom encode's ids + EOS {eos}")
PY
}
prepare_with hf 0 --tokenizer "$C/tokenizer.json"
prepare_with tiktoken 50256 --tokenizer "$ranks" --pattern gpt2
grep -v endoftext "$C/any.txt" > "$C/valid.txt"  # loom tokenize encodes as loom encode does (<|endoftext|>: EOS)
"$LOOM" tokenize --tokenizer "$C/tokenizer.json" --out "$WORK/hf-valid.bin" "$C/valid.txt" > /dev/null 2>&1 ||
  fail "loom tokenize with the tokenizer.json"
python3 - "$WORK/hf-valid.bin" "$WORK/hf.plain" <<'PY' || fail "loom tokenize's ids are not prepare's"
import struct, sys
data = open(sys.argv[1], "rb").read()[64:]
lines = [l for i, l in enumerate(open(sys.argv[2])) if i != 300]  # all but the line with <|endoftext|>
assert list(struct.unpack(f"<{len(data) // 2}H", data)) == [int(i) for l in lines for i in l.split() + ["0"]]
PY
tiny_train "$WORK/hf-run" --set data.train="$WORK/hf" --set data.valid="$WORK/hf-valid.bin" \
  --set tokenizer.model="$C/tokenizer.json" --set train.max_steps=2 > "$WORK/hf-run.log" 2>&1 ||
  fail "training on the tokenizer.json directory: $(tail -3 "$WORK/hf-run.log")"
"$LOOM" prepare "$C/any.jsonl" --tokenizer "$ranks" --pattern llama3 --out "$WORK/tiktoken" --valid-fraction 0 \
  > "$WORK/tiktoken-again.log" 2>&1 || fail "prepare with --pattern llama3: $(tail -3 "$WORK/tiktoken-again.log")"
grep -q "again: the tokenizer changed" "$WORK/tiktoken-again.log" || fail "another pattern: $(cat "$WORK/tiktoken-again.log")"
expect_error 2 "carries no split pattern" "$LOOM" prepare "$C/any.jsonl" --tokenizer "$ranks" --out "$WORK/x"
expect_error 2 "--pattern goes with --tokenizer FILE" "$LOOM" prepare "$C/any.jsonl" --train-tokenizer sentencepiece \
  --vocab 300 --pattern gpt2 --out "$WORK/x"
echo "prepare with a tokenizer.json and a .tiktoken: loom encode's ids; trains; another pattern redoes DIR"
echo PASS
