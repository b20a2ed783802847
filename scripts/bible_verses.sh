#!/usr/bin/env bash
# Every verse of one SWORD Bible module (diatheke), cleaned, one per line as
#   SPLIT <TAB> REFERENCE <TAB> TEXT        e.g.  train	Genesis 1:1	In the beginning God created ...
# Cleaning: markup and Strong's numbers (<G5547>, <H3967>) and paragraph marks removed, whitespace
# collapsed; psalm titles (not verses) dropped; verses left empty are dropped. REFERENCE uses the KJV
# versification every module is keyed by, so two modules' lines pair up by it.
# SPLIT is by whole books, fixed for every loom Bible dataset (prepare_kjv.sh, prepare_bible_mt.sh):
#   valid = Ruth, Jonah, Philippians      test = Esther, Micah, Colossians      train = the other 60 books
#
# usage: scripts/bible_verses.sh MODULE        (modules: `diatheke -b system -k modulelist`)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 MODULE" >&2; exit 2; }
command -v diatheke >/dev/null || { echo "$0: diatheke is missing: run scripts/setup.sh" >&2; exit 1; }
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
diatheke -b "$1" -f plain -k "Genesis 1:1-Revelation of John 22:21" > "$raw"
awk '
  BEGIN { OFS = "\t"
          split("Ruth Jonah Philippians", v, " "); for (i in v) valid[v[i]] = 1
          split("Esther Micah Colossians", t, " "); for (i in t) test[t[i]] = 1 }
  match($0, /^[ \t]*([1-3I]* ?[A-Za-z][A-Za-z ]*) [0-9]+:[0-9]+: /) {
    head = substr($0, RSTART, RLENGTH); text = substr($0, RSTART + RLENGTH)
    sub(/^[ \t]+/, "", head); sub(/: $/, "", head); book = head; sub(/ [0-9]+:[0-9]+$/, "", book)
    gsub(/ *<[^>]*>/, "", text); gsub(/¶/, "", text)  # a tag and the space before it
    gsub(/[ \t]+/, " ", text); sub(/^ /, "", text); sub(/ $/, "", text)
    if (text == "") next
    print (book in valid) ? "valid" : (book in test) ? "test" : "train", head, text; n++
  }
  END { if (n < 20000) { print "bible_verses.sh: only " n " verses: the export looks incomplete" > "/dev/stderr"; exit 1 } }
' "$raw"
