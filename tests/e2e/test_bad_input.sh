#!/usr/bin/env bash
# Bad input never crashes loom: damaged, truncated or foreign token files and tokenizer models, empty and
# unknown prompts for generate and translate, and directories that are not run dirs given to generate,
# translate, eval, status and train. Each either works (empty / unknown prompts) or exits non-zero, by an
# error (never a signal: no segfault, no abort) whose message names the file and says what to do.
source "$(dirname "$0")/common.sh"
cases=0
# expect_error CODE PATTERN COMMAND...: COMMAND exits with CODE and its output matches PATTERN (grep -E).
expect_error() {
  local want=$1 pattern=$2; shift 2
  set +e
  out=$(timeout 120 "$@" 2>&1 </dev/null)
  code=$?
  set -e
  cases=$((cases + 1))
  [ $code -lt 128 ] || fail "$*: killed by signal $((code - 128)) (crash): $out"
  [ $code -eq "$want" ] || fail "$*: exit code $code, expected $want: $out"
  grep -Eq -- "$pattern" <<<"$out" || fail "$*: the output lacks '$pattern': $out"
}
tiny() { tiny_args "$1"; }

# A trained run to point the inference commands at.
tiny_train "$WORK/run" --set train.max_steps=4 --set checkpoint.every=4 >/dev/null 2>&1 || fail "tiny run"

## Token files
cp "$KJV_DATA/train.bin" "$WORK/cut.bin"
truncate -s 1000 "$WORK/cut.bin"
# shellcheck disable=SC2046
expect_error 1 "$WORK/cut.bin: truncated or padded: .*re-create it with loom tokenize" \
  "$LOOM" train $(tiny "$WORK/t1") --set data.train="$WORK/cut.bin"
# shellcheck disable=SC2046
expect_error 1 "$KJV_DATA/tokenizer.model: not a loom token file \(bad magic\)" \
  "$LOOM" train $(tiny "$WORK/t2") --set data.train="$KJV_DATA/tokenizer.model"
python3 - "$KJV_DATA/train.bin" "$WORK/foreign.bin" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[32:36] = b"\x01\x02\x03\x04"  # the tokenizer CRC-32: made with another tokenizer
open(sys.argv[2], "wb").write(data)
PY
# shellcheck disable=SC2046
expect_error 1 "$WORK/foreign.bin was not made with tokenizer.model=.*checksum mismatch" "$LOOM" train $(tiny "$WORK/t3") --set data.train="$WORK/foreign.bin"
# shellcheck disable=SC2046
expect_error 2 "data.train: $WORK/missing.bin does not exist" \
  "$LOOM" train $(tiny "$WORK/t4") --set data.train="$WORK/missing.bin"
echo "token files: $cases cases refused"

## Tokenizer models: damaged copies either still load (a flip in a score) or are refused naming the file.
printf 'In the beginning God created the heaven and the earth.\n' > "$WORK/text.txt"
python3 - "$KJV_DATA/tokenizer.model" "$WORK/tokenizers" <<'PY'
import os, random, sys
good = open(sys.argv[1], "rb").read()
os.makedirs(sys.argv[2])
random.seed(3)
variants = {"empty": b"", "text": b"not a model\n", "token-file": open(sys.argv[1].replace("tokenizer.model", "train.bin"), "rb").read(100000)}
for n in range(12):
    variants[f"cut{n}"] = good[:random.randrange(len(good))]
for n in range(12):
    data = bytearray(good)
    for _ in range(8):
        data[random.randrange(len(data))] = random.randrange(256)
    variants[f"flip{n}"] = bytes(data)
for name, data in variants.items():
    open(f"{sys.argv[2]}/{name}.model", "wb").write(data)
PY
loaded=0
for model in "$WORK"/tokenizers/*.model; do
  set +e
  out=$("$LOOM" tokenize --tokenizer "$model" --out "$WORK/tok.bin" "$WORK/text.txt" 2>&1)
  code=$?
  set -e
  cases=$((cases + 1))
  [ $code -lt 128 ] || fail "$model: killed by signal $((code - 128)): $out"
  if [ $code -eq 0 ]; then loaded=$((loaded + 1)); continue; fi
  grep -q "$model" <<<"$out" || fail "$model: exit $code without naming the file: $out"
done
for bad in empty text token-file cut0; do
  # shellcheck disable=SC2046
  expect_error 1 "$WORK/tokenizers/$bad.model: not a SentencePiece model" \
    "$LOOM" train $(tiny "$WORK/t5") --set tokenizer.model="$WORK/tokenizers/$bad.model"
done
echo "tokenizer models: $(ls "$WORK"/tokenizers | wc -l) damaged copies, $loaded still load, none crashed"

## Prompts: empty, unknown characters, longer than the context.
"$LOOM" generate "$WORK/run" --prompt "" --max-new-tokens 8 > "$WORK/empty.txt" || fail "empty prompt"
"$LOOM" generate "$WORK/run" --prompt $'\u2603 \u65e5\u672c \x01\x7f zqxj' --max-new-tokens 8 > "$WORK/unknown.txt" \
  || fail "a prompt of unknown characters"
"$LOOM" generate "$WORK/run" --prompt "$(printf 'and the earth %.0s' $(seq 100))" --max-new-tokens 4 \
  > "$WORK/long.txt" || fail "a prompt longer than model.max_seq_len"
grep -q "and the earth" "$WORK/long.txt" || fail "the long prompt is not echoed"
cases=$((cases + 3))
expect_error 2 "--max-new-tokens -1 must be in \[0, 1048576\]" "$LOOM" generate "$WORK/run" --prompt x --max-new-tokens -1

# A translation run (synthetic: lines are token ids) for translate's input.
"$LOOM" train "$SRC/configs/reverse-synthetic.yaml" --set run.dir="$WORK/mt" --set train.max_steps=2 \
  --set checkpoint.every=2 --set train.eval_batches=0 >/dev/null 2>&1 || fail "translation run"
printf '' | "$LOOM" translate "$WORK/mt" > "$WORK/none.txt" || fail "translate of empty input"
[ ! -s "$WORK/none.txt" ] || fail "translate of empty input wrote something"
printf '\n\n' | "$LOOM" translate "$WORK/mt" > "$WORK/blank.txt" || fail "translate of empty lines"
[ "$(wc -l < "$WORK/blank.txt")" = 2 ] || fail "empty lines are not kept"
cases=$((cases + 2))
expect_error 2 "stdin line 2: 'hello' is not a token id in \[0, 24\)" \
  bash -c "printf '5 6\nhello\n' | '$LOOM' translate '$WORK/mt'"
expect_error 2 "stdin line 1: '99' is not a token id" bash -c "printf '99\n' | '$LOOM' translate '$WORK/mt'"
expect_error 2 "stdin line 1: .* 40 tokens, more than model.max_seq_len=32" \
  bash -c "(printf '5 %.0s' \$(seq 40); echo) | '$LOOM' translate '$WORK/mt'"
expect_error 1 "$WORK/run is a model.arch=gpt run" bash -c "printf '5\n' | '$LOOM' translate '$WORK/run'"
expect_error 2 "$WORK/mt is a model.arch=transformer run: loom generate translates with it through the engine with --input" \
  "$LOOM" generate "$WORK/mt" --prompt x
echo "prompts: empty, unknown and over-long input handled"

## Directories that are not run dirs.
mkdir -p "$WORK/empty-dir" "$WORK/garbage-run" "$WORK/no-checkpoint" "$WORK/file-checkpoints"
printf 'model: [unclosed\n' > "$WORK/garbage-run/config.yaml"
cp "$WORK/run/config.yaml" "$WORK/no-checkpoint/config.yaml"
cp "$WORK/run/config.yaml" "$WORK/file-checkpoints/config.yaml"
touch "$WORK/file-checkpoints/checkpoints" "$WORK/a-file"
for dir in "$WORK/empty-dir" "$WORK/does-not-exist" "$WORK/a-file"; do
  expect_error 1 "$dir is not a loom run directory \(no config.yaml\)" "$LOOM" generate "$dir" --prompt x
  expect_error 1 "$dir is not a loom run directory \(no config.yaml\)" bash -c "printf '5\n' | '$LOOM' translate '$dir'"
  expect_error 2 "$dir is not a run directory \(it has no config.yaml\)" "$LOOM" status "$dir"
done
expect_error 1 "$WORK/empty-dir is not a loom run directory" "$LOOM" eval "$WORK/empty-dir"
expect_error 1 "$WORK/garbage-run has no complete checkpoint yet" "$LOOM" generate "$WORK/garbage-run" --prompt x
expect_error 2 "$WORK/garbage-run/config.yaml:[0-9]+" "$LOOM" status "$WORK/garbage-run"
expect_error 1 "$WORK/no-checkpoint has no complete checkpoint yet" "$LOOM" generate "$WORK/no-checkpoint" --prompt x
expect_error 1 "$WORK/file-checkpoints/checkpoints is not a directory" "$LOOM" generate "$WORK/file-checkpoints" --prompt x
expect_error 1 "$WORK/file-checkpoints/checkpoints is not a directory" "$LOOM" status "$WORK/file-checkpoints"
# train: run.dir a file; a run dir whose checkpoints/ is a file; a checkpoint of another model.
# shellcheck disable=SC2046
expect_error 2 "run.dir $WORK/a-file is a file, not a directory" "$LOOM" train $(tiny "$WORK/a-file")
# shellcheck disable=SC2046
expect_error 1 "$WORK/file-checkpoints/checkpoints is not a directory" "$LOOM" train $(tiny "$WORK/file-checkpoints")
# shellcheck disable=SC2046
expect_error 1 "run/checkpoints/4/shard-dp0-tp0-pp0.pt does not fit this model: .* \(was the model config changed\?\)" \
  "$LOOM" train $(tiny "$WORK/run") --set train.max_steps=8 --set model.d_model=32
echo "PASS: $cases bad inputs, no crash"
