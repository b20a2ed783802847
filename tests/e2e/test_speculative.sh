#!/usr/bin/env bash
# Speculative decoding from the command line (serve/speculative.h): `loom generate --input` with --draft RUN_DIR (a
# 1-layer draft trained on the same data and tokenizer) and with --speculate ngram writes, greedy, the texts of the
# engine alone, with each request's drafted and accepted tokens (accepted <= drafted, some drafted); a draft with
# another vocabulary is refused naming both runs; `loom serve --speculate ngram` reports the counts on /metrics and
# each request's (vLLM's metrics.speculative_decoding, in the response and the stream's usage chunk): those of the
# same request through `loom generate --input`, since a sequence's proposals depend on it alone.
source "$(dirname "$0")/common.sh"
run=$WORK/run
draft=$WORK/draft
tiny_train "$run" --set train.max_steps=20 --set model.max_seq_len=64 >/dev/null 2>&1
tiny_train "$draft" --set train.max_steps=20 --set model.max_seq_len=64 --set model.n_layers=1 >/dev/null 2>&1
tiny_train "$WORK/other" --set train.max_steps=1 --set model.max_seq_len=64 --set model.vocab_size=1100 \
  >/dev/null 2>&1

cat > "$WORK/prompts.jsonl" <<'JSONL'
{"prompt": "And God said", "max_tokens": 20}
{"prompt": "In the beginning", "max_tokens": 12}
{"prompt": "And he said unto them, and he said unto them", "max_tokens": 40, "stop": " LORD"}
{"prompt": "And it came to pass, when the king heard the words of the law", "max_tokens": 30}
JSONL
gen() { "$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --temperature 0 --max-batch 3 "$@"; }
gen --output "$WORK/alone.jsonl" 2>/dev/null || fail "loom generate --input failed"
for mode in draft ngram; do
  if [ $mode = draft ]; then args=(--draft "$draft" --speculate-k 3); else args=(--speculate ngram --speculate-k 3); fi
  log=$(gen --output "$WORK/$mode.jsonl" "${args[@]}" 2>&1) || fail "$mode: $log"
  grep -qE "[0-9]+ of [0-9]+ drafted tokens accepted" <<<"$log" || fail "$mode: no acceptance line: $log"
  python3 - "$WORK/alone.jsonl" "$WORK/$mode.jsonl" <<'PY' || fail "$mode: outputs differ from the target's alone"
import json, sys
alone, spec = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [a["text"] for a in alone] == [s["text"] for s in spec], (alone, spec)
assert all(0 <= s["accepted_tokens"] <= s["drafted_tokens"] for s in spec), spec
assert sum(s["drafted_tokens"] for s in spec) > 0, spec
PY
done

refused=$(gen --output "$WORK/x.jsonl" --draft "$WORK/other" 2>&1) && fail "a draft with another vocabulary ran"
grep -q "a draft must share the target's tokenizer and vocabulary" <<<"$refused" && grep -q "$WORK/other" <<<"$refused" \
  || fail "the refusal does not say why: $refused"
refused=$(gen --output "$WORK/x.jsonl" --speculate-k 3 2>&1) && fail "--speculate-k without a drafter ran"
grep -q -- "--speculate-k needs --draft RUN_DIR or --speculate ngram" <<<"$refused" || fail "$refused"

echo '{"prompt": "And he said unto them, and he said unto them", "max_tokens": 24}' > "$WORK/one.jsonl"
"$LOOM" generate "$run" --input "$WORK/one.jsonl" --output "$WORK/one-out.jsonl" --temperature 0 --ignore-eos \
  --speculate ngram 2>/dev/null || fail "loom generate --speculate ngram failed"

log=$WORK/serve.log
timeout 120 "$LOOM" serve "$run" --port 0 --speculate ngram --block-size 4 --kv-mb 4 >"$log" 2>&1 &
pid=$!
port=$(served_port "$log" $pid) || exit 1
grep -q "speculative decoding: n-gram" "$log" || fail "no speculation line: $(cat "$log")"
timeout 60 python3 - "$port" "$WORK/one-out.jsonl" <<'PY' || fail "metrics (server log: $(tail -5 "$log"))"
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
offline = json.loads(open(sys.argv[2]).readline())
body = {"prompt": "And he said unto them, and he said unto them", "max_tokens": 24, "temperature": 0,
        "ignore_eos": True}
def post(body):
    request = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    return urllib.request.urlopen(request)
spec = json.loads(post(body).read())["metrics"]["speculative_decoding"]
assert (spec["num_draft_tokens"], spec["num_accepted_draft_tokens"], spec["num_spec_steps"]) == (
    offline["drafted_tokens"], offline["accepted_tokens"], offline["spec_steps"]), (spec, offline)
assert spec["num_draft_tokens"] > 0 and spec["num_spec_tokens"] == 4, spec
assert abs(spec["draft_acceptance_rate"] - spec["num_accepted_draft_tokens"] / spec["num_draft_tokens"]) < 1e-12, spec
assert abs(spec["mean_acceptance_length"] - 1 - spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]) < 1e-12
# streamed: the usage chunk carries the same
events = [l[6:] for l in post({**body, "stream": True, "stream_options": {"include_usage": True}}).read().decode()
          .splitlines() if l.startswith("data: {")]
usage = json.loads(events[-1])
assert usage["choices"] == [] and usage["metrics"]["speculative_decoding"] == spec, usage
metrics = dict(l.rsplit(" ", 1) for l in urllib.request.urlopen(base + "/metrics").read().decode().splitlines()
               if l and not l.startswith("#"))
drafted, accepted = float(metrics["loom_speculative_drafted_tokens_total"]), float(
    metrics["loom_speculative_accepted_tokens_total"])
assert (drafted, accepted) == (2 * spec["num_draft_tokens"], 2 * spec["num_accepted_draft_tokens"]), metrics
assert metrics["loom_request_acceptance_rate_count"] == "2", metrics
PY
kill -TERM $pid
wait $pid || fail "loom serve did not stop cleanly"
pid=
echo "test_speculative: ok"
