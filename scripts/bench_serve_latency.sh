#!/usr/bin/env bash
# `loom serve`'s latency and KV memory under load (issue 35), against Hugging Face transformers' batched `generate`
# on the same weights: PROMPTS prompts (the first words of the KJV's validation verses), greedy, end-of-sequence
# ignored so each generates TOKENS tokens, streamed (server-sent events) by 1, 8, 32 and 64 concurrent clients
# (Python threads, one connection each) to a server at --max-batch of that count. Per concurrency: tokens/s, time to
# first token and inter-token latency (the gap between a stream's pieces of text, each a token unless an
# incomplete character was held back) p50/p99 as the clients see them, the peak KV memory the paged cache held (GET /metrics polled every 20 ms) against a contiguous cache of
# model.max_seq_len positions per concurrent sequence (what a server without paging reserves), and transformers'
# tokens/s (and the same engine offline, `loom generate --input --max-batch` of that count: no HTTP, no clients on the
# cores, transformers' like for like): `loom export` to safetensors, AutoModelForCausalLM, left-padded batches of that many prompts (tokenized
# with the run's SentencePiece model), greedy, the same TOKENS new tokens.
#   scripts/bench_serve_latency.sh RUN_DIR    env: LOOM (build/loom), KJV (datasets/kjv), PROMPTS (64), TOKENS (64),
#                                             CONCURRENCY ("1 8 32 64"), THREADS (2: OpenMP / torch threads)
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}; KJV=${KJV:-datasets/kjv}; PROMPTS=${PROMPTS:-64}; TOKENS=${TOKENS:-64}
CONCURRENCY=${CONCURRENCY:-"1 8 32 64"}; THREADS=${THREADS:-2}
run=${1:?usage: scripts/bench_serve_latency.sh RUN_DIR}
out=$(mktemp -d)
server=
trap '[ -z "$server" ] || kill $server 2>/dev/null || true; rm -rf "$out"' EXIT
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE  # spinning OpenMP threads crawl on a shared machine
python3 - "$KJV/valid.txt" "$PROMPTS" > "$out/prompts.jsonl" <<'PY'
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
for i in range(int(sys.argv[2])):
    print(json.dumps({"prompt": " ".join(lines[i % len(lines)][: 2 + i % 11])}))
PY
dry=$("$LOOM" serve "$run" --dry-run)
per_token=$(sed -nE 's/^KV cache: ([0-9]+) bytes per token.*/\1/p' <<<"$dry")
context=$(sed -nE 's/.*positions, model.max_seq_len\).*/&/p' <<<"$dry" | sed -nE 's/.*full context \(([0-9]+) positions.*/\1/p')
"$LOOM" export "$run" --out "$out/hf" >/dev/null
tokenizer=$(sed -nE 's/^  model: (.*tokenizer.model)$/\1/p' "$run/config.yaml" | head -1)
printf '%-5s %9s %9s %9s %9s %9s %11s %11s %13s %12s\n' clients "tok/s" "TTFT p50" "TTFT p99" "ITL p50" "ITL p99" \
  "KV paged" "KV contig." "offline tok/s" "HF tok/s"
for clients in $CONCURRENCY; do
  "$LOOM" serve "$run" --port 0 --max-batch "$clients" > "$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do grep -qs "listening on" "$out/serve.log" && break; sleep 0.1; done
  port=$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$out/serve.log")
  line=$(python3 - "$port" "$out/prompts.jsonl" "$TOKENS" "$clients" <<'PY'
import http.client, json, sys, threading, time
port, prompts, tokens, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
queue = [json.loads(l)["prompt"] for l in open(prompts)]
lock, ttft, itl, generated, peak, done = threading.Lock(), [], [], [0], [0], [False]
def client():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while True:
        with lock:
            if not queue: return
            prompt = queue.pop(0)
        body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        last, n, mine_ttft, mine_itl = None, 0, None, []
        for raw in r:  # one line of the event stream at a time
            if not raw.startswith(b"data: {"): continue
            now = time.perf_counter()
            chunk = json.loads(raw[6:])
            if chunk.get("usage"): n = chunk["usage"]["completion_tokens"]; continue
            # a piece is one token unless text was held back (an incomplete character): counted as one gap
            if not chunk["choices"] or not chunk["choices"][0]["text"]: continue
            k = 1
            if last is None: mine_ttft = now - start
            else: mine_itl += [(now - last) / k] * k
            last = now
        with lock:
            ttft.append(mine_ttft); itl.extend(mine_itl); generated[0] += n
def watch():
    conn = http.client.HTTPConnection("127.0.0.1", port)
    while not done[0]:
        conn.request("GET", "/metrics")
        for l in conn.getresponse().read().decode().splitlines():
            if l.startswith("loom_kv_blocks_used "): peak[0] = max(peak[0], int(float(l.split()[1])))
        time.sleep(0.02)
watcher = threading.Thread(target=watch); watcher.start()
start = time.perf_counter()
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
seconds = time.perf_counter() - start
done[0] = True; watcher.join()
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
print(generated[0] / seconds, pct(ttft, 50), pct(ttft, 99), pct(itl, 50), pct(itl, 99), peak[0])
PY
)
  kill -TERM $server; wait $server || true; server=
  block=$(sed -nE 's/.*KV blocks of ([0-9]+) positions.*/\1/p' "$out/serve.log")
  hf=$(python3 - "$out/hf" "$tokenizer" "$out/prompts.jsonl" "$TOKENS" "$clients" "$THREADS" <<'PY'
import json, sys, time
import sentencepiece, torch, transformers
hf, sp_model, prompts, tokens, batch, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
sp = sentencepiece.SentencePieceProcessor(model_file=sp_model)
model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
ids = [sp.encode(json.loads(l)["prompt"]) or [sp.eos_id()] for l in open(prompts)]
pad = max(sp.pad_id(), 0)
generated, start = 0, time.perf_counter()
with torch.no_grad():
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch]
        width = max(map(len, chunk))
        x = torch.tensor([[pad] * (width - len(c)) + c for c in chunk])
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk])
        y = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                           do_sample=False, pad_token_id=pad)
        generated += (y.shape[1] - width) * len(chunk)
print(generated / (time.perf_counter() - start))
PY
)
  # the same engine offline (`loom generate --input`, no HTTP, no clients on the cores): transformers' like for like
  offline=$("$LOOM" generate "$run" --input "$out/prompts.jsonl" --output "$out/offline.jsonl" --temperature 0 \
              --ignore-eos --max-new-tokens "$TOKENS" --max-batch "$clients" 2>&1 >/dev/null | tail -1 \
            | sed -nE 's/.*: ([0-9.]+) tokens\/s.*/\1/p')
  read -r tps t50 t99 i50 i99 peak <<<"$line"
  python3 -c "
clients, per_token, context, block, peak = $clients, $per_token, $context, $block, $peak
mib = lambda b: f'{b / 2**20:.2f} MiB'
print(f'{clients:<5d} {$tps:9.1f} {$t50 * 1e3:7.1f}ms {$t99 * 1e3:7.1f}ms {$i50 * 1e3:7.1f}ms {$i99 * 1e3:7.1f}ms '
      f'{mib(peak * block * per_token):>11s} {mib(clients * context * per_token):>11s} {$offline:13.1f} {$hf:12.1f}')"
done
