#!/usr/bin/env bash
# loom generate --input/--output: every prompt of a JSON Lines file through the inference engine (continuous
# batching over a paged KV cache) gives the completions of decoding each prompt alone (--sequential), one
# output line per prompt in file order, stop strings cut the text, and a bad line names its file, line and field.
source "$(dirname "$0")/common.sh"
run=$WORK/run
tiny_train "$run" --set train.max_steps=30 --set model.max_seq_len=64 >/dev/null 2>&1

prompts=$WORK/prompts.jsonl
cat > "$prompts" <<'JSONL'
{"prompt": "And God said", "max_tokens": 40, "temperature": 0}
{"prompt": "In the beginning", "max_tokens": 12, "temperature": 0}

{"prompt": "And the LORD spake unto Moses, saying", "max_tokens": 25, "temperature": 1, "seed": 3}
{"prompt": "Blessed", "max_tokens": 30, "temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 11}
{"prompt": "And he said", "max_tokens": 50, "temperature": 1, "seed": 2, "stop": ["and", "LORD"]}
{"prompt": "", "max_tokens": 5}
{"prompt": "Thou shalt", "temperature": 0, "seed": 1}
{"prompt": "And it came to pass", "max_tokens": 0}
{"prompt": "And he said", "max_tokens": 50, "temperature": 1, "seed": 2}
JSONL
"$LOOM" generate "$run" --input "$prompts" --output "$WORK/engine.jsonl" --max-new-tokens 20 --max-batch 4 \
  --block-size 4 2>"$WORK/engine.log" || fail "the engine failed: $(cat "$WORK/engine.log")"
"$LOOM" generate "$run" --input "$prompts" --output "$WORK/alone.jsonl" --max-new-tokens 20 --sequential \
  2>/dev/null || fail "--sequential failed"
# Prefix caching changes no output (the repeated "And he said" prompts share their blocks).
"$LOOM" generate "$run" --input "$prompts" --output "$WORK/prefix.jsonl" --max-new-tokens 20 --max-batch 4 \
  --block-size 2 --prefix-caching 2>"$WORK/prefix.log" || fail "--prefix-caching failed: $(cat "$WORK/prefix.log")"
grep -qE " [1-9][0-9]* prompt tokens from the prefix cache" "$WORK/prefix.log" \
  || fail "nothing came from the prefix cache: $(cat "$WORK/prefix.log")"
cmp -s "$WORK/prefix.jsonl" "$WORK/alone.jsonl" || fail "--prefix-caching changed the completions"
grep -q "tokens/s" "$WORK/engine.log" || fail "no throughput on stderr: $(cat "$WORK/engine.log")"
cmp -s "$WORK/engine.jsonl" "$WORK/alone.jsonl" \
  || fail "the engine's completions differ from decoding alone: $(diff "$WORK/engine.jsonl" "$WORK/alone.jsonl")"
python3 - "$WORK/engine.jsonl" <<'PY' || fail "the output lines"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["index"] for r in rows] == list(range(9)), rows
assert all(set(r) == {"index", "text", "tokens", "finish_reason"} for r in rows), rows[0]
assert rows[1]["tokens"] <= 12 and rows[6]["tokens"] <= 20 and rows[7]["tokens"] == 0, rows
# The same sample without stop strings goes on past them; with them it ends before the first.
stopped, unstopped = rows[4], rows[8]
assert stopped["finish_reason"] == "stop" and "and" not in stopped["text"] and "LORD" not in stopped["text"], stopped
assert 0 < stopped["tokens"] < unstopped["tokens"] and unstopped["text"].startswith(stopped["text"]), (stopped, unstopped)
print("engine == alone;", sum(r["tokens"] for r in rows), "tokens;", stopped)
PY

# A bad line: its file, line and field.
bad() {
  printf '{"prompt": "a"}\n%s\n' "$1" > "$WORK/bad.jsonl"
  set +e
  out=$("$LOOM" generate "$run" --input "$WORK/bad.jsonl" --output "$WORK/bad-out.jsonl" 2>&1); code=$?
  set -e
  [ $code -eq 2 ] && grep -qF -- "$2" <<<"$out" || fail "bad line '$1': exit $code, '$out'"
}
bad '{"prompt": "a", "max_tokens": "many"}' 'bad.jsonl:2: "max_tokens" must be an integer >= 0'
bad '{"prompt": "a", "temprature": 1}' 'bad.jsonl:2: "temprature" is not a field'
bad '{"max_tokens": 3}' 'bad.jsonl:2: "prompt" is missing'
bad '{"prompt": "a", "top_p": 0}' 'bad.jsonl:2: "top_p" must be in (0, 1]'
bad '{"prompt": "a", "stop": [1]}' 'bad.jsonl:2: "stop" must be a string or a list of strings'
bad 'not json' 'bad.jsonl:2: not JSON'
echo "PASS"
