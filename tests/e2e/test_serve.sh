#!/usr/bin/env bash
# loom serve, the OpenAI-compatible server, driven by the official `openai` Python client and raw sockets: greedy
# completions equal `loom generate`'s (the server with prefix caching, generate without), a stream's text equals
# the non-streamed text (with a stop string too), the model is listed; each bad request gets its 4xx JSON error
# naming the field and the server answers after it; 500 concurrent connections are all answered; a client gone
# mid-stream or while its non-streamed request runs has its request cancelled (0 KV blocks in use and 0 running
# after); SIGTERM stops the server cleanly
# (exit 0); --dry-run's KV arithmetic; chat on a run trained on chat records, with its data's chat template.
source "$(dirname "$0")/common.sh"
python3 -c "import openai" 2>/dev/null || fail "the openai package is missing: scripts/setup.sh --tests installs it"
run=$WORK/run
tiny_train "$run" --set train.max_steps=30 --set model.max_seq_len=64 >/dev/null 2>&1

# The reference: loom generate's engine on the same prompts, greedy.
cat > "$WORK/prompts.jsonl" <<'JSONL'
{"prompt": "And God said", "max_tokens": 20, "temperature": 0}
{"prompt": "In the beginning", "max_tokens": 12, "temperature": 0}
{"prompt": "And he said", "max_tokens": 40, "temperature": 0, "stop": " the"}
{"prompt": "And it came to pass, when the king heard the words of the law", "max_tokens": 16, "temperature": 0}
JSONL
"$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/generate.jsonl" 2>/dev/null \
  || fail "loom generate --input failed"

# --dry-run: the tiny model's KV bytes per token, 2 layers x (K, V) x 2 heads x 32 dims x 4 bytes = 1024, and
# what 1 MiB holds: 256 blocks of 4 positions = 1024 tokens = 16 sequences of the 64-token context.
dry=$("$LOOM" serve "$run" --dry-run --kv-mb 1 --block-size 4) || fail "--dry-run failed: $dry"
grep -q "1024 bytes per token" <<<"$dry" &&
  grep -q "256 blocks of 4 positions (4096 bytes each) = 1024 tokens of context, 16 sequences" <<<"$dry" \
  || fail "--dry-run: $dry"

log=$WORK/serve.log
timeout 300 "$LOOM" serve "$run" --port 0 --max-batch 32 --block-size 4 --kv-mb 4 --threads 64 --prefix-caching \
  >"$log" 2>&1 &
pid=$!  # common.sh's trap kills it whatever happens
port=$(served_port "$log" $pid) || exit 1

timeout 120 python3 - "$port" "$WORK/prompts.jsonl" "$WORK/generate.jsonl" "$(basename "$run")" <<'PY' \
  || fail "the client checks (server log: $(tail -5 "$log"))"
import json, socket, struct, sys, threading, time, http.client
import openai

port, prompts, generated, model = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
base = f"http://127.0.0.1:{port}"
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)

# Listed; greedy completions equal loom generate's; the stream's text equals the non-streamed text.
assert [m.id for m in client.models.list().data] == [model], client.models.list()
for request, reference in zip(map(json.loads, open(prompts)), map(json.loads, open(generated))):
    args = dict(model=model, prompt=request["prompt"], max_tokens=request["max_tokens"], temperature=0,
                stop=request.get("stop"))
    done = client.completions.create(**args)
    text = done.choices[0].text
    assert text == reference["text"], (request, text, reference)
    assert done.choices[0].finish_reason == reference["finish_reason"], (done, reference)
    assert done.usage.completion_tokens == reference["tokens"], (done.usage, reference)
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args))
    assert streamed == text, (request, streamed, text)
    if "stop" in request:
        assert reference["finish_reason"] == "stop" and request["stop"] not in streamed, (streamed, reference)
print("greedy == loom generate, stream == non-stream (with a stop string too)")

# Sampled with a seed: the same text streamed or not, and again; logprobs one per token, each <= 0.
args = dict(model=model, prompt="And the LORD", max_tokens=24, temperature=1.0, seed=5)
first = client.completions.create(**args).choices[0].text
assert first == client.completions.create(**args).choices[0].text
assert first == "".join(c.choices[0].text for c in client.completions.create(stream=True, **args))
lp = client.completions.create(logprobs=1, **args).choices[0].logprobs
assert len(lp.token_logprobs) == len(lp.tokens) > 0 and all(x <= 0 for x in lp.token_logprobs), lp
usage = [c.usage for c in client.completions.create(stream=True, stream_options={"include_usage": True}, **args)
         if c.usage]
assert len(usage) == 1 and usage[0].completion_tokens == len(lp.tokens), usage

def call(method, path, body=None, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.status, r.read().decode()
    conn.close()
    return out

def metrics():
    values = {}
    for line in call("GET", "/metrics")[1].splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values

# Bad requests: each its status and the field named; the server still answers after each.
long_prompt = "And God said " * 200
bad = [
    (("POST", "/v1/completions", None, "{not json"), 400, None),
    (("POST", "/v1/completions", {"prompt": "a", "max_tokens": "many"}), 400, "max_tokens"),
    (("POST", "/v1/completions", {"prompt": "a", "temperature": "hot"}), 400, "temperature"),
    (("POST", "/v1/completions", {"prompt": "a", "temprature": 1}), 400, "temprature"),
    (("POST", "/v1/completions", {"prompt": 7}), 400, "prompt"),
    (("POST", "/v1/completions", {"max_tokens": 3}), 400, "prompt"),
    (("POST", "/v1/completions", {"prompt": long_prompt}), 400, "prompt"),
    (("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1000}), 400, "max_tokens"),
    (("POST", "/v1/completions", {"prompt": "a", "n": 2}), 400, "n"),
    (("POST", "/v1/completions", {"prompt": "a", "stop": [1]}), 400, "stop"),
    (("POST", "/v1/completions", {"prompt": "a", "top_p": 0}), 400, "top_p"),
    (("GET", "/v1/completions"), 405, None),
    (("POST", "/v1/nothing", {}), 404, None),
    (("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 404, None),
    (("POST", "/v1/completions", None, '{"prompt": "' + "a" * (17 << 20) + '"}'), 413, None),
]
for args, status, param in bad:
    got, body = call(*args)
    error = json.loads(body)["error"]
    assert got == status and error["param"] == param and error["message"], (args[:2], got, body)
    assert call("GET", "/health") == (200, '{"status":"ok"}'), "the server stopped answering"
print("bad requests: 4xx with the field named; the server answers after each;",
      json.loads(call("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1000})[1])["error"]["message"])
try:
    client.completions.create(model=model, prompt="a", n=2)
    raise AssertionError("n=2 was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400

# 500 concurrent connections, all open with their requests sent before any client reads, all answered.
N = 500
body = json.dumps({"prompt": "And", "max_tokens": 3, "temperature": 0}).encode()
request = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
answers, errors = [None] * N, []
connected = threading.Barrier(N)
def one(i):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(request)
        connected.wait(timeout=60)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        answers[i] = data
    except Exception as e:
        errors.append(repr(e))
        connected.abort()
start = time.time()
threads = [threading.Thread(target=one, args=(i,)) for i in range(N)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors[:3]
texts = {json.loads(a.split(b"\r\n\r\n", 1)[1])["choices"][0]["text"] for a in answers if a.startswith(b"HTTP/1.1 200")}
assert sum(a.startswith(b"HTTP/1.1 200") for a in answers) == N and len(texts) == 1, [a[:80] for a in answers[:3]]
print(f"{N} concurrent connections answered in {time.time() - start:.1f} s")

def settled_after_one_cancel(cancelled_before):
    """/metrics once nothing runs, waits or holds a KV block (30 s at most): one more request cancelled."""
    for _ in range(300):
        m = metrics()
        if m["loom_requests_running"] == 0 and m["loom_kv_blocks_used"] == 0 and m["loom_requests_waiting"] == 0:
            break
        time.sleep(0.1)
    assert m["loom_kv_blocks_used"] == 0 and m["loom_requests_running"] == 0, m
    assert m['loom_requests_finished_total{reason="cancelled"}'] == cancelled_before + 1, m
    return m
# A client gone mid-stream: its request is cancelled and its blocks freed. Other long requests keep the batch busy
# (steps slower), so the stream is far from its end when the client goes, however the machine schedules it.
cancelled_before = metrics()['loom_requests_finished_total{reason="cancelled"}']
busy = [threading.Thread(target=call, args=("POST", "/v1/completions",
                                            {"prompt": "And", "max_tokens": 60, "ignore_eos": True}))
        for _ in range(16)]
for t in busy: t.start()
body = json.dumps({"prompt": "And", "max_tokens": 60, "temperature": 0, "ignore_eos": True, "stream": True}).encode()
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset: the next write fails
s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
received = b""
while b"data: " not in received:  # the headers, then the first piece of text
    chunk = s.recv(4096)
    assert chunk, received
    received += chunk
s.close()
for t in busy: t.join()
m = settled_after_one_cancel(cancelled_before)
assert m["loom_generated_tokens_total"] > 0 and m["loom_time_to_first_token_seconds_count"] >= N, m
assert m["loom_kv_blocks_total"] > 0, m
# The long prompt asked again (streamed) found its first blocks filed by its first asking, same text.
assert m["loom_prefix_cache_hit_tokens_total"] >= 8 and m["loom_kv_blocks_cached"] > 0, m
print("client gone mid-stream: cancelled, 0 of", int(m["loom_kv_blocks_total"]), "KV blocks in use, 0 running")

# A client gone while its non-streamed request runs (it closes right after sending): cancelled too, blocks freed.
cancelled_before = m['loom_requests_finished_total{reason="cancelled"}']
busy = [threading.Thread(target=call, args=("POST", "/v1/completions",
                                            {"prompt": "And", "max_tokens": 60, "ignore_eos": True}))
        for _ in range(16)]
for t in busy: t.start()
body = json.dumps({"prompt": "And", "max_tokens": 60, "temperature": 0, "ignore_eos": True}).encode()
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
s.close()
for t in busy: t.join()
m = settled_after_one_cancel(cancelled_before)
print("client gone before its non-streamed answer: cancelled, 0 KV blocks in use")
PY

kill -TERM $pid
code=0
timeout 30 tail --pid=$pid -f /dev/null || fail "loom serve did not stop on SIGTERM"
wait $pid || code=$?
[ $code -eq 0 ] || fail "loom serve exited $code on SIGTERM: $(tail -5 "$log")"
grep -q "loom serve: stopped" "$log" || fail "no clean stop: $(tail -5 "$log")"
pid=

# Chat on a run fine-tuned on chat records (loom prepare --sft --chat-template): the server finds the template in
# the data's manifest.json; the conversation is tokenized piece by piece (its prompt tokens are the pieces' own),
# the reply cut at the assistant's suffix, streamed or not the same.
cat > "$WORK/chat.yaml" <<'YAML'
roles:
  user: {prefix: "Question: ", suffix: "\n"}
  assistant: {prefix: "Answer:", suffix: " And"}
YAML
python3 - "$KJV_DATA/valid.txt" > "$WORK/chats.jsonl" <<'PY'
import json, sys
for words in [l.split() for l in open(sys.argv[1]) if len(l.split()) > 6][:300]:
    half = len(words) // 2
    print(json.dumps({"messages": [{"role": "user", "content": " ".join(words[:half])},
                                   {"role": "assistant", "content": " ".join(words[half:])}]}))
PY
"$LOOM" prepare "$WORK/chats.jsonl" --sft --chat-template "$WORK/chat.yaml" --tokenizer "$KJV_DATA/tokenizer.model" \
  --out "$WORK/sft" >/dev/null 2>&1 || fail "loom prepare --sft failed"
# shellcheck disable=SC2046
"$LOOM" train $(tiny_args "$WORK/chat-run") --set data.train="$WORK/sft" --set data.valid="$WORK/sft" \
  --set train.max_steps=3 >/dev/null 2>&1 || fail "training on the chat data failed"
timeout 120 "$LOOM" serve "$WORK/chat-run" --port 0 >"$log" 2>&1 &
pid=$!
port=$(served_port "$log" $pid) || exit 1
grep -q "chat template from $WORK/sft/manifest.json" "$log" \
  || fail "the data's chat template is not used: $(cat "$log")"
timeout 60 python3 - "$port" "$KJV_DATA/tokenizer.model" <<'PY' || fail "the chat checks"
import sys, openai, sentencepiece
port, sp = int(sys.argv[1]), sentencepiece.SentencePieceProcessor(model_file=sys.argv[2])
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
args = dict(model="chat-run", messages=[{"role": "user", "content": "Who made the heaven?"}], temperature=0,
            max_tokens=12)
reply = client.chat.completions.create(**args)
text = reply.choices[0].message.content
pieces = ["Question: ", "Who made the heaven?", "\n", "Answer:"]
assert reply.usage.prompt_tokens == sum(len(sp.encode(p)) for p in pieces), (reply.usage, pieces)
assert "And" not in text and reply.choices[0].finish_reason in ("stop", "length"), reply
streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **args))
assert streamed == text, (streamed, text)
try:
    client.chat.completions.create(model="chat-run", messages=[{"role": "system", "content": "x"}])
    raise AssertionError("a role the template lacks was accepted")
except openai.BadRequestError as e:
    assert "system" in str(e), e
print("chat:", repr(text), reply.choices[0].finish_reason)
PY
kill -TERM $pid; wait $pid || fail "loom serve of the chat run did not stop cleanly"
pid=
echo "PASS"
