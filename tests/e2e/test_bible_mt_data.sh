#!/usr/bin/env bash
# scripts/prepare_bible_mt.sh (run by the bible_mt_data fixture): the verse counts of the fixed book
# split, aligned and clean text, pair files whose pair counts match, a re-run that is a no-op, and
# `loom tokenize --target` refusing misaligned or empty input.
source "$(dirname "$0")/common.sh"
: "${BIBLE_MT_DATA:?set BIBLE_MT_DATA to prepared English-Spanish data}"
D=$BIBLE_MT_DATA

for split_count in train:30481 valid:236 test:367; do
  split=${split_count%%:*} want=${split_count##*:}
  for lang in en es; do
    got=$(wc -l < "$D/$split.$lang")
    [ "$got" -eq "$want" ] || fail "$split.$lang has $got lines, expected $want"
  done
done
echo "verses: 30481 train, 236 valid, 367 test"
! grep -q '<\|>\|¶\|^$\|^ \| $' "$D"/*.en "$D"/*.es || fail "markup, Strong's numbers or blank lines left in the text"
[ "$(head -1 "$D/valid.en")" = "Now it came to pass in the days when the judges ruled, that there was a famine in the land. And a certain man of Beth-lehem-judah went to sojourn in the country of Moab, he, and his wife, and his two sons." ] \
  || fail "valid.en does not start with Ruth 1:1: $(head -1 "$D/valid.en")"
[ "$(head -1 "$D/valid.es")" = "Y ACONTECIÓ en los días que gobernaban los jueces, que hubo hambre en la tierra. Y un varón de Beth-lehem de Judá, fué á peregrinar en los campos de Moab, él y su mujer, y dos hijos suyos." ] \
  || fail "valid.es does not start with Ruth 1:1: $(head -1 "$D/valid.es")"

# Pair files: a header marking the pair layout and two EOS (id 2) per pair.
python3 - "$D" <<'PY' || fail "pair files"
import struct, sys
for split, pairs in (("train", 30481), ("valid", 236), ("test", 367)):
    data = open(f"{sys.argv[1]}/{split}.bin", "rb").read()
    magic, version, width, count, vocab, _, _, layout = struct.unpack("<8sIIQQIII", data[:44])
    assert magic == b"LOOMTOK\0" and layout == 1 and vocab == 2000, (magic, layout, vocab)
    fmt = {2: "H", 4: "I"}[width]
    tokens = struct.unpack(f"<{count}{fmt}", data[64:])
    assert tokens.count(2) == 2 * pairs and tokens[-1] == 2, (split, tokens.count(2))
    print(f"{split}.bin: {pairs} pairs, {count} tokens")
PY

out=$("$SRC/scripts/prepare_bible_mt.sh" --out "$D" --vocab 2000 --loom "$LOOM")
grep -q "is up to date" <<<"$out" || fail "a second run was not a no-op: $out"

# Re-tokenizing gives the same file; misaligned or empty input is refused.
"$LOOM" tokenize --tokenizer "$D/tokenizer.model" --out "$WORK/valid.bin" --target "$D/valid.es" "$D/valid.en"
cmp "$WORK/valid.bin" "$D/valid.bin" || fail "tokenizing valid again gave another file"
head -5 "$D/valid.es" > "$WORK/short.es"
set +e
out=$("$LOOM" tokenize --tokenizer "$D/tokenizer.model" --out "$WORK/x.bin" --target "$WORK/short.es" "$D/valid.en" 2>&1)
code=$?
[ $code -eq 1 ] && grep -q "valid.en has 236 lines but .*short.es has 5" <<<"$out" || fail "misaligned: $code '$out'"
printf 'a\n\nc\n' > "$WORK/gap.en"; printf 'x\ny\nz\n' > "$WORK/gap.es"
out=$("$LOOM" tokenize --tokenizer "$D/tokenizer.model" --out "$WORK/x.bin" --target "$WORK/gap.es" "$WORK/gap.en" 2>&1)
code=$?
[ $code -eq 1 ] && grep -q "line 2 of .*gap.en is empty" <<<"$out" || fail "empty line: $code '$out'"
set -e
echo "tokenize --target: ok"
