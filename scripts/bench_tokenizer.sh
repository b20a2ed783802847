#!/usr/bin/env bash
# Tokenizer throughput on the KJV text (or --text FILE, one document per line), one thread each: `loom encode`
# (time inside encode(), from its --stats line) against Hugging Face tokenizers' encode_batch and tiktoken's
# encode_ordinary_batch on the same lines, the same tokenizer files and the same ids (checked). MB/s by the
# wall clock and by CPU time (the CPU rate varies less when the machine is shared). Runs alternate (loom,
# tokenizers, loom, tiktoken) ROUNDS times and every round is printed: single numbers are noisy.
#   tokenizers: GPT-2's ranks as tiktoken (gpt2.tiktoken, GPT-2's pattern) and as a tokenizer.json built
#   from them (tests/golden/tokenizer_golden.py builds it the same way).
# usage: scripts/bench_tokenizer.sh [--text FILE] [--rounds N] [--loom PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
text= rounds=3 loom=build/loom
while [ $# -gt 0 ]; do
  case $1 in
    --text) text=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --loom) loom=$2; shift 2 ;;
    *) echo "usage: $0 [--text FILE] [--rounds N] [--loom PATH]" >&2; exit 2 ;;
  esac
done
ranks=${LOOM_CACHE:-$HOME/.cache/loom}/gpt2.tiktoken
[ -s "$ranks" ] || { echo "$0: $ranks is missing: run scripts/setup.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$text" ]; then
  text=$work/kjv.txt
  scripts/bible_verses.sh engKJV2006eb | cut -f3 > "$text"
fi
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
python3 - "$ranks" "$work/gpt2.json" <<'PY'
import sys
sys.path.insert(0, "tests/golden")
import tokenizer_golden as g
g.gpt2_tokenizer_json(g.load_ranks(sys.argv[1]), sys.argv[2])
PY
echo "text: $text ($(wc -c < "$text") bytes, $(wc -l < "$text") lines); one thread each"
loom_rate() {  # loom_rate ARGS...: "WALL CPU" MB/s of its --stats line; the ids go to $work/loom.ids
  "$loom" encode "$@" --stats < "$text" 2> "$work/stats" > "$work/loom.ids"
  sed -n 's/.*: \([0-9.]*\) MB\/s, \([0-9.]*\) MB\/s CPU$/\1 \2/p' "$work/stats"
}
reference_rate() {  # reference_rate tokenizers|tiktoken: "WALL CPU" MB/s of the reference's batch encode; checks the ids
  python3 - "$1" "$ranks" "$work/gpt2.json" "$text" "$work/loom.ids" <<'PY'
import sys, time
kind, ranks_path, json_path, text_path, loom_ids = sys.argv[1:]
lines = open(text_path, encoding="utf-8").read().split("\n")[:-1]
size = sum(len(l.encode()) + 1 for l in lines)
if kind == "tokenizers":
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(json_path)
    start, cpu_start = time.perf_counter(), time.process_time()
    encodings = tok.encode_batch(lines, add_special_tokens=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start  # not the .ids below
    ids = [e.ids for e in encodings]
else:
    import tiktoken
    sys.path.insert(0, "tests/golden")
    import tokenizer_golden as g
    from tiktoken_ext import openai_public
    enc = tiktoken.Encoding("gpt2", pat_str=openai_public.r50k_pat_str, mergeable_ranks=g.load_ranks(ranks_path),
                            special_tokens={"<|endoftext|>": 50256})
    start, cpu_start = time.perf_counter(), time.process_time()
    ids = enc.encode_ordinary_batch(lines, num_threads=1)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
expected = [[int(x) for x in l.split()] for l in open(loom_ids).read().split("\n")[:-1]]
assert ids == expected, f"{kind}: ids differ from loom's"
print(f"{size / seconds / 1e6:.2f} {size / cpu_seconds / 1e6:.2f}")
PY
}
echo "MB/s as wall-clock / CPU (process CPU time of the encode call; the CPU rate varies less on a shared machine)"
rate() { echo "${1% *} / ${1#* }"; }
for round in $(seq "$rounds"); do
  hf_loom=$(loom_rate --tokenizer "$work/gpt2.json")
  hf_ref=$(reference_rate tokenizers)
  tt_loom=$(loom_rate --tokenizer "$ranks" --pattern gpt2 --no-special-in-text)
  tt_ref=$(reference_rate tiktoken)
  echo "round $round: tokenizer.json: loom $(rate "$hf_loom"), tokenizers encode_batch $(rate "$hf_ref") |" \
    "gpt2.tiktoken: loom $(rate "$tt_loom"), tiktoken encode_ordinary_batch $(rate "$tt_ref")"
done
