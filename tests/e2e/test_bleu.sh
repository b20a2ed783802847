#!/usr/bin/env bash
# `loom bleu REF < HYP` agrees with the `sacrebleu` command (pinned in scripts/setup.sh) within 0.01 BLEU
# and prints the same precisions, brevity penalty and lengths: on real verse translations (the World
# English Bible scored against the KJV, a perturbed Reina-Valera against the original, English against
# Spanish) and on edge cases; missing files and line-count mismatches are clear errors.
source "$(dirname "$0")/common.sh"

# same_as_sacrebleu NAME REF HYP
same_as_sacrebleu() {
  local name=$1 ref=$2 hyp=$3
  "$LOOM" bleu "$ref" < "$hyp" > "$WORK/$name.loom.txt"
  "$LOOM" bleu "$ref" --json < "$hyp" > "$WORK/$name.loom.json"
  python3 -m sacrebleu "$ref" -i "$hyp" -f json -w 6 > "$WORK/$name.sacrebleu.json" 2>/dev/null
  python3 - "$name" "$WORK/$name.loom.txt" "$WORK/$name.loom.json" "$WORK/$name.sacrebleu.json" <<'PY' || fail "$name"
import json, sys
name, text, loom, ref = sys.argv[1], open(sys.argv[2]).read().strip(), json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
verbose = text.split(" ", 3)[3]  # "BLEU = 12.34 <verbose>"
print(f"{name}: loom {loom['score']:.6f}, sacrebleu {ref['score']:.6f}; {text}")
assert abs(loom["score"] - ref["score"]) <= 0.01, "scores differ"
assert verbose == ref["verbose_score"], f"loom says '{verbose}', sacrebleu '{ref['verbose_score']}'"
PY
}

# Verses of the valid and test books of two translations, paired by reference.
pair_verses() {  # pair_verses MODULE_A MODULE_B OUT_A OUT_B
  "$SRC/scripts/bible_verses.sh" "$1" | grep -v '^train' > "$WORK/a.tsv"
  "$SRC/scripts/bible_verses.sh" "$2" | grep -v '^train' > "$WORK/b.tsv"
  awk -F '\t' -v a="$3" -v b="$4" 'NR == FNR { t[$2] = $3; next } ($2 in t) { print t[$2] > a; print $3 > b }' \
    "$WORK/a.tsv" "$WORK/b.tsv"
}
pair_verses engKJV2006eb engWEB2015eb "$WORK/kjv.txt" "$WORK/web.txt"
[ "$(wc -l < "$WORK/kjv.txt")" -gt 500 ] || fail "too few KJV/WEB verse pairs"
same_as_sacrebleu web-vs-kjv "$WORK/kjv.txt" "$WORK/web.txt"
pair_verses engKJV2006eb spaRV1909eb "$WORK/en.txt" "$WORK/es.txt"
same_as_sacrebleu english-vs-spanish "$WORK/es.txt" "$WORK/en.txt"
# A "translation" of the Spanish: every 5th word dropped, every 7th line cut to its first 3 words,
# some accents stripped.
awk '{ out = ""; for (i = 1; i <= NF; ++i) if (i % 5 != 0) out = out (out == "" ? "" : " ") $i
       if (NR % 7 == 0) { split(out, w, " "); out = w[1] " " w[2] " " w[3] }
       if (NR % 3 == 0) gsub(/á/, "a", out); print out }' "$WORK/es.txt" > "$WORK/es-perturbed.txt"
same_as_sacrebleu perturbed-spanish "$WORK/es.txt" "$WORK/es-perturbed.txt"

# Edge cases, line by line: both empty, empty hypothesis, no match, short hypothesis, numbers and
# punctuation 13a splits, HTML entities, unicode spaces and accents, CRLF, trailing blanks.
printf '%s\n' "" "" "zzz qqq" "God" "In 1,000.50 years (Gen. 1:1-3) it cost \$5." "&quot;Hi&quot; &amp; bye" \
  "¿Dónde está? ¡Aquí!" $'tab\there\r' "trailing   " "x-y 10-20 -5 well-known" > "$WORK/edge-hyp.txt"
printf '%s\n' "" "The LORD is my shepherd" "a b c" "God said, Let there be light." \
  "In 1,000.50 years (Gen. 1:1-3) it cost \$5 today." "\"Hi\" & bye" "¿Dónde está él? ¡Aquí!" "tab here" \
  "trailing" "x-y 10 - 20 -5 well known" > "$WORK/edge-ref.txt"
same_as_sacrebleu edge-cases "$WORK/edge-ref.txt" "$WORK/edge-hyp.txt"
printf '%s\n' "" "" > "$WORK/empty2.txt"
same_as_sacrebleu all-empty "$WORK/empty2.txt" "$WORK/empty2.txt"
printf '%s\n' "x y" "z" > "$WORK/nomatch.txt"
head -2 "$WORK/edge-ref.txt" > "$WORK/two-ref.txt"
same_as_sacrebleu no-match "$WORK/two-ref.txt" "$WORK/nomatch.txt"

# Errors: a missing reference file, a line-count mismatch, a missing argument.
set +e
out=$("$LOOM" bleu "$WORK/missing.txt" < "$WORK/kjv.txt" 2>&1); code=$?
[ $code -eq 1 ] && grep -q "missing.txt: cannot open the reference file" <<<"$out" || fail "missing file: $code '$out'"
out=$("$LOOM" bleu "$WORK/kjv.txt" < "$WORK/edge-hyp.txt" 2>&1); code=$?
[ $code -eq 1 ] && grep -q "the hypotheses on stdin have 10 lines but .*kjv.txt has" <<<"$out" \
  || fail "line mismatch: $code '$out'"
out=$("$LOOM" bleu 2>&1); code=$?
[ $code -eq 2 ] && grep -q "usage: loom bleu REF_FILE" <<<"$out" || fail "no argument: $code '$out'"
set -e
echo "errors: ok"
