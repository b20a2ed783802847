#!/usr/bin/env bash
# Prepares the King James Bible for language modelling, from Debian's sword-text-kjv module:
#   OUT/{train,valid,test}.txt   one verse per line, Strong's numbers and markup stripped
#   OUT/tokenizer.model          SentencePiece BPE (byte fallback) trained on train.txt
#   OUT/{train,valid,test}.bin   token files (loom tokenize), EOS after every verse
# The split is by whole books, fixed (scripts/bible_verses.sh, shared with prepare_bible_mt.sh):
#   valid = Ruth, Jonah, Philippians      test = Esther, Micah, Colossians      train = the other 60 books
# (psalm titles and paragraph marks are dropped). Re-running with the same arguments is a no-op.
#
# usage: scripts/prepare_kjv.sh [--out DIR] [--vocab N] [--loom PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

out=datasets/kjv
vocab=4096
source scripts/prepare_args.sh

want="kjv vocab=$vocab script=$(cat "$0" scripts/bible_verses.sh | sha1sum | cut -c1-12)"
skip_if_prepared "$want"

# Verse extraction, cleaning and the book split are shared with prepare_bible_mt.sh.
scripts/bible_verses.sh engKJV2006eb | awk -F '\t' -v out="$out" '
  { print $3 > (out "/" $1 ".txt"); n[$1]++ }
  END { printf "prepare_kjv: %d train, %d valid, %d test verses\n", n["train"], n["valid"], n["test"] }'
spm_train --input="$out/train.txt" --model_prefix="$out/tokenizer" --model_type=bpe --vocab_size="$vocab" \
  --byte_fallback=true --character_coverage=1.0 --num_threads="$(nproc)" --minloglevel=2 >/dev/null 2>&1 \
  || { echo "$0: spm_train failed" >&2; exit 1; }
for split in train valid test; do
  "$loom" tokenize --tokenizer "$out/tokenizer.model" --out "$out/$split.bin" "$out/$split.txt"
done
echo "$want" > "$stamp"
