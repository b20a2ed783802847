#!/usr/bin/env bash
# `loom serve` under load (issue 35): PROMPTS prompts (the first words of the KJV's validation verses), greedy,
# end-of-sequence ignored so each generates TOKENS tokens, sent by 8 and 32 concurrent clients (Python threads, one
# HTTP connection each) to the server, against `loom generate --input` at the same --max-batch on the same prompts
# (and one prompt at a time, --sequential):
# requests/s, tokens/s, and the server's time to first token (mean, from its /metrics).
#   scripts/bench_serve_http.sh RUN_DIR     env: LOOM (build/loom), KJV (datasets/kjv), PROMPTS (64), TOKENS (64)
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}; KJV=${KJV:-datasets/kjv}; PROMPTS=${PROMPTS:-64}; TOKENS=${TOKENS:-64}
run=${1:?usage: scripts/bench_serve_http.sh RUN_DIR}
out=$(mktemp -d)
server=
trap '[ -z "$server" ] || kill $server 2>/dev/null || true; rm -rf "$out"' EXIT
python3 - "$KJV/valid.txt" "$PROMPTS" > "$out/prompts.jsonl" <<'PY'
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
for i in range(int(sys.argv[2])):
    print(json.dumps({"prompt": " ".join(lines[i % len(lines)][: 2 + i % 11])}))
PY
printf '%-34s %10s %10s %12s\n' "mode ($PROMPTS prompts x $TOKENS tokens)" "requests/s" "tokens/s" "mean TTFT s"
# generate LABEL ARGS...: loom generate --input on the prompts, its requests/s and tokens/s.
generate() {
  local label=$1 line seconds tokens; shift
  line=$("$LOOM" generate "$run" --input "$out/prompts.jsonl" --output "$out/generate.jsonl" --temperature 0 \
           --max-new-tokens "$TOKENS" --ignore-eos "$@" 2>&1 >/dev/null | tail -1)
  seconds=$(sed -E 's/.* tokens in ([0-9.e+-]+) s.*/\1/' <<<"$line")
  tokens=$(sed -E 's/.* prompts, ([0-9]+) tokens.*/\1/' <<<"$line")
  printf '%-34s %10.2f %10.1f\n' "$label" "$(python3 -c "print($PROMPTS / $seconds)")" \
    "$(python3 -c "print($tokens / $seconds)")"
}
generate "loom generate --sequential" --sequential
for clients in 8 32; do
  generate "loom generate --max-batch $clients" --max-batch "$clients"
  "$LOOM" serve "$run" --port 0 --max-batch "$clients" > "$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do grep -qs "listening on" "$out/serve.log" && break; sleep 0.1; done
  port=$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$out/serve.log")
  python3 - "$port" "$out/prompts.jsonl" "$TOKENS" "$clients" "$out/generate.jsonl" <<'PY'
import http.client, json, sys, threading, time
port, prompts, tokens, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
queue = list(enumerate(json.loads(l)["prompt"] for l in open(prompts)))
texts, lock, generated = {}, threading.Lock(), [0]
def client():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while True:
        with lock:
            if not queue: return
            i, prompt = queue.pop(0)
        body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = json.loads(conn.getresponse().read())
        with lock:
            texts[i] = r["choices"][0]["text"]
            generated[0] += r["usage"]["completion_tokens"]
n = len(queue)
start = time.time()
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
seconds = time.time() - start
conn = http.client.HTTPConnection("127.0.0.1", port)
conn.request("GET", "/metrics")
m = dict(l.rsplit(" ", 1) for l in conn.getresponse().read().decode().splitlines() if l and l[0] != "#")
ttft = float(m["loom_time_to_first_token_seconds_sum"]) / float(m["loom_time_to_first_token_seconds_count"])
same = sum(texts[i] == json.loads(l)["text"] for i, l in enumerate(open(sys.argv[5])))
print(f"{'loom serve, ' + str(clients) + ' clients':34s} {n / seconds:10.2f} {generated[0] / seconds:10.1f} "
      f"{ttft:12.3f}   ({same} of {n} texts equal loom generate's)")
PY
  kill -TERM $server; wait $server || true; server=
done
