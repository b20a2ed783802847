#!/usr/bin/env bash
# `loom prepare` against a reference on the same JSONL corpus, tokenizer and thread count, alternating
# for several rounds (so machine noise hits both alike); prints each round's MB/s (bytes of JSONL per
# wall-clock second) and the medians. The reference is the PyPI package of the tokenizer's own kind, run on
# the same file (hence the same ids): the JSONL read and parsed by Python's json, documents in batches of
# 1,000 encoded, EOS appended, the ids written as uint16/uint32 to one file; its encode-only rate is printed too.
#   - a tokenizer.json (the default: GPT-2's, built from gpt2.tiktoken as tests/golden/tokenizer_golden.py
#     does): Hugging Face tokenizers' encode_batch(batch, add_special_tokens=False) on RAYON_NUM_THREADS=N;
#   - a SentencePiece .model: the sentencepiece package's encode(batch, num_threads=N).
# The corpus (under $TMPDIR, removed at exit): KJV and WEB verses from diatheke, 10 verses a document,
# repeated to --mb megabytes, as {"id", "text", "meta"} records.
#   scripts/bench_prepare.sh [--tokenizer FILE] [--mb 100] [--threads N] [--rounds 3] [--loom build/loom]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
tokenizer= mb=100 threads=$(nproc) rounds=3 loom=${LOOM:-$SRC/build/loom}
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) tokenizer=$2; shift 2 ;;
    --mb) mb=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --loom) loom=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$loom" ] || { echo "bench_prepare.sh: $loom is not built (cmake --build build)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-prepare.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -z "$tokenizer" ]; then
  ranks=${LOOM_CACHE:-$HOME/.cache/loom}/gpt2.tiktoken
  [ -s "$ranks" ] || { echo "bench_prepare.sh: $ranks is missing: run scripts/setup.sh" >&2; exit 1; }
  tokenizer=$work/gpt2-tokenizer.json
  PYTHONPATH="$SRC/tests/golden" python3 -c "import sys, tokenizer_golden as g; g.gpt2_tokenizer_json(g.load_ranks(sys.argv[1]), sys.argv[2])" \
    "$ranks" "$tokenizer"
fi
case $tokenizer in *.json) reference=tokenizers ;; *) reference=sentencepiece ;; esac
export RAYON_NUM_THREADS=$threads

{ "$SRC/scripts/bible_verses.sh" engKJV2006eb; "$SRC/scripts/bible_verses.sh" engWEB2015eb; } | cut -f3 > "$work/verses.txt"
python3 - "$work/verses.txt" "$work/corpus.jsonl" "$mb" <<'PY'
import json, sys
verses = open(sys.argv[1], encoding="utf-8").read().splitlines()
target, written, n = int(sys.argv[3]) << 20, 0, 0
with open(sys.argv[2], "w", encoding="utf-8") as f:
    while written < target:
        for i in range(0, len(verses), 10):
            line = json.dumps({"id": n, "text": " ".join(verses[i:i + 10]), "meta": {"source": "bible", "n": n}},
                              ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode())
            n += 1
            if written >= target:
                break
PY
cat > "$work/reference.py" <<'PY'
import json, sys, time
import numpy as np
corpus, model, threads, out, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if kind == "tokenizers":
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(model)
    vocab, eos = tok.get_vocab_size(), tok.token_to_id("<|endoftext|>") or 0
    encode = lambda batch: [e.ids for e in tok.encode_batch(batch, add_special_tokens=False)]
else:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model)
    vocab, eos = sp.vocab_size(), sp.eos_id()
    encode = lambda batch: sp.encode(batch, num_threads=threads)
dtype = np.uint16 if vocab <= 65536 else np.uint32
start, encoding, size = time.perf_counter(), 0.0, 0
with open(corpus, "rb") as f, open(out, "wb") as o:
    batch = []
    def flush():
        global encoding
        t = time.perf_counter()
        ids = encode(batch)
        encoding += time.perf_counter() - t
        o.write(np.fromiter((i for doc in ids for i in doc + [eos]), dtype=dtype).tobytes())
        batch.clear()
    for line in f:
        size += len(line)
        if line.strip():
            batch.append(json.loads(line)["text"])
        if len(batch) == 1000:
            flush()
    if batch:
        flush()
print(f"{size / 1e6 / (time.perf_counter() - start):.2f} {size / 1e6 / encoding:.2f}")
PY

size_mb=$(python3 -c "import os, sys; print(f'{os.path.getsize(sys.argv[1]) / 1e6:.1f}')" "$work/corpus.jsonl")
echo "corpus: $size_mb MB of JSONL, tokenizer $tokenizer, $threads threads, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
loom_rates=() ref_rates=()
for round in $(seq "$rounds"); do
  rm -rf "$work/out"
  start=$(date +%s.%N)
  "$loom" prepare "$work/corpus.jsonl" --tokenizer "$tokenizer" --out "$work/out" --threads "$threads" \
    --valid-fraction 0.01 > "$work/loom.log" 2>&1 || { cat "$work/loom.log" >&2; exit 1; }
  loom_rate=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])):.2f}')" \
    "$size_mb" "$start" "$(date +%s.%N)")
  read -r ref_rate ref_encode < <(python3 "$work/reference.py" "$work/corpus.jsonl" "$tokenizer" "$threads" "$work/ref.bin" "$reference")
  loom_rates+=("$loom_rate") ref_rates+=("$ref_rate")
  echo "round $round: loom prepare $loom_rate MB/s | $reference (PyPI) $ref_rate MB/s end to end, $ref_encode MB/s in encode alone"
done
python3 - "${loom_rates[*]}" "${ref_rates[*]}" "$reference" <<'PY'
import statistics, sys
loom, ref = (statistics.median(map(float, a.split())) for a in sys.argv[1:3])
print(f"median: loom prepare {loom:.2f} MB/s, {sys.argv[3]} {ref:.2f} MB/s: loom / reference = {loom / ref:.2f}")
PY
