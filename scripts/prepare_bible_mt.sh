#!/usr/bin/env bash
# Prepares English -> Spanish translation pairs: the King James Version (sword-text-kjv, module
# engKJV2006eb) against the Reina-Valera 1909 (sword-text-sparv, module spaRV1909eb), verse by verse:
#   OUT/{train,valid,test}.{en,es}   line-aligned verses, markup and Strong's numbers stripped
#   OUT/tokenizer.model              joint SentencePiece BPE (byte fallback) on train.en + train.es,
#                                    default ids: 0 unk, 1 bos, 2 eos (data/pairs/seq2seq_batch.h)
#   OUT/{train,valid,test}.bin       pair files, English source -> Spanish target (loom tokenize --target)
# Verse extraction and cleaning are scripts/bible_verses.sh's, shared with prepare_kjv.sh; a verse
# that is empty or missing in either translation (the two versifications differ in a few places) is
# dropped. The split is by whole books, fixed (the same as prepare_kjv.sh's):
#   valid = Ruth, Jonah, Philippians      test = Esther, Micah, Colossians      train = the other 60 books
# which gives 30481 train, 236 valid and 367 test pairs (18 verses dropped). Re-running with the same
# arguments is a no-op.
#
# usage: scripts/prepare_bible_mt.sh [--out DIR] [--vocab N] [--loom PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

out=datasets/bible-mt
vocab=8000
source scripts/prepare_args.sh

want="bible-mt kjv-rv1909 vocab=$vocab script=$(cat "$0" scripts/bible_verses.sh | sha1sum | cut -c1-12)"
skip_if_prepared "$want"

scripts/bible_verses.sh spaRV1909eb > "$out/es.tsv"
scripts/bible_verses.sh engKJV2006eb > "$out/en.tsv"
# Pairs in canonical (KJV) order: a verse is kept when both translations have it.
awk -F '\t' -v out="$out" '
  NR == FNR { es[$2] = $3; next }
  ($2 in es) { print $3 > (out "/" $1 ".en"); print es[$2] > (out "/" $1 ".es"); n[$1]++; next }
  { dropped++ }
  END { printf "prepare_bible_mt: %d train, %d valid, %d test pairs (%d English verses without a Spanish one dropped)\n",
               n["train"], n["valid"], n["test"], dropped }
' "$out/es.tsv" "$out/en.tsv"
rm "$out/es.tsv" "$out/en.tsv"

spm_train --input="$out/train.en,$out/train.es" --model_prefix="$out/tokenizer" --model_type=bpe \
  --vocab_size="$vocab" --byte_fallback=true --character_coverage=1.0 --num_threads="$(nproc)" \
  --minloglevel=2 >/dev/null 2>&1 || { echo "$0: spm_train failed" >&2; exit 1; }
for split in train valid test; do
  "$loom" tokenize --tokenizer "$out/tokenizer.model" --out "$out/$split.bin" --target "$out/$split.es" "$out/$split.en"
done
echo "$want" > "$stamp"
