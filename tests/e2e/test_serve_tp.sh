#!/usr/bin/env bash
# Tensor-parallel serving: `mpirun -np 2 loom generate --input ... --set parallel.tp=2` and `mpirun -np 2 loom serve
# ... --set parallel.tp=2` (rank 0 takes the HTTP traffic and leads every engine step, rank 1 follows with the other
# half of every layer) give the single process's completions token for token, greedy and sampled with seeds
# (a sampled token follows the exact logits, so a wrong split shows), with n-gram speculation and a draft model
# (on rank 0, its proposals broadcast) too (the same texts and acceptance counts); 12 concurrent clients share the steps; the idle
# server's follower rank uses under 10% of a core; SIGTERM
# to the ranks ends both cleanly (rank 1 waits for rank 0's stop; mpirun exits 0); --dry-run gives a rank's KV bytes. pp, cp and dp are refused with a message, as is a tp that is not the
# job's size.
source "$(dirname "$0")/common.sh"
run=$WORK/run
tiny_train "$run" --set train.max_steps=40 --set model.max_seq_len=64 >/dev/null 2>&1 || fail "training failed"

python3 - > "$WORK/prompts.jsonl" <<'PY'
import json
starts = ["And God said", "In the beginning", "And he said unto them", "And it came to pass", "The LORD is",
          "Blessed are", "And the king", "Then said Jesus"]
for i, s in enumerate(starts):
    print(json.dumps({"prompt": s, "max_tokens": 12 + 3 * i, "temperature": 0 if i % 2 == 0 else 1.0, "seed": i}))
PY
"$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/one.jsonl" --ignore-eos 2>/dev/null || fail "generate failed"
"${MPIRUN[@]}" -np 2 "$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/two.jsonl" \
  --ignore-eos --set parallel.tp=2 >"$WORK/two.log" 2>&1 || fail "generate under tp=2: $(tail -5 "$WORK/two.log")"
cmp -s "$WORK/one.jsonl" "$WORK/two.jsonl" || fail "tp=2 generate differs: $(diff "$WORK/one.jsonl" "$WORK/two.jsonl")"
echo "generate --input: tp=2 == one process ($(wc -l < "$WORK/one.jsonl") prompts)"
# Speculation by n-gram lookup under tp=2: every rank verifies rank 0's logits, so the texts and each request's
# drafted and accepted counts are the single process's.
"$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/one-ngram.jsonl" --ignore-eos \
  --speculate ngram 2>/dev/null || fail "generate --speculate ngram failed"
"${MPIRUN[@]}" -np 2 "$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/two-ngram.jsonl" \
  --ignore-eos --speculate ngram --set parallel.tp=2 >"$WORK/two-ngram.log" 2>&1 ||
  fail "generate --speculate ngram under tp=2: $(tail -5 "$WORK/two-ngram.log")"
cmp -s "$WORK/one-ngram.jsonl" "$WORK/two-ngram.jsonl" ||
  fail "tp=2 ngram differs: $(diff "$WORK/one-ngram.jsonl" "$WORK/two-ngram.jsonl")"
grep -q '"drafted_tokens":[1-9]' "$WORK/two-ngram.jsonl" || fail "nothing drafted: $(cat "$WORK/two-ngram.jsonl")"
# A draft model under tp=2: it runs whole on rank 0, which broadcasts its proposals (and the sampled rows'
# generator states) each step, so the TP-split target verifies the same tokens on every rank: the texts and counts
# are the single process's, greedy and sampled. The draft is the run at 4 steps of training (one layer), which the
# target rejects often enough that both branches of the rejection rule run.
draft=$WORK/draft
tiny_train "$draft" --set train.max_steps=4 --set model.max_seq_len=64 --set model.n_layers=1 >/dev/null 2>&1 ||
  fail "training the draft failed"
"$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/one-draft.jsonl" --ignore-eos \
  --draft "$draft" 2>/dev/null || fail "generate --draft failed"
"${MPIRUN[@]}" -np 2 "$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/two-draft.jsonl" \
  --ignore-eos --draft "$draft" --set parallel.tp=2 >"$WORK/two-draft.log" 2>&1 ||
  fail "generate --draft under tp=2: $(tail -5 "$WORK/two-draft.log")"
grep -q "on rank 0, its proposals broadcast" "$WORK/two-draft.log" || fail "no broadcast draft: $(cat "$WORK/two-draft.log")"
cmp -s "$WORK/one-draft.jsonl" "$WORK/two-draft.jsonl" ||
  fail "tp=2 --draft differs: $(diff "$WORK/one-draft.jsonl" "$WORK/two-draft.jsonl")"
python3 - "$WORK/two-draft.jsonl" <<'PY2' || fail "the draft was not both accepted and rejected: $(cat "$WORK/two-draft.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
drafted = sum(r["drafted_tokens"] for r in rows); accepted = sum(r["accepted_tokens"] for r in rows)
print(f"generate --draft: tp=2 == one process, {accepted} of {drafted} drafted tokens accepted")
assert 0 < accepted < drafted
PY2

# Other layouts are refused, naming what is served.
out=$("${MPIRUN[@]}" -np 2 "$LOOM" serve "$run" --set parallel.pp=2 2>&1) && fail "pp=2 was served"
grep -q "tensor parallelism only" <<<"$out" || fail "pp=2: $out"
out=$("$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/x" --set parallel.tp=2 2>&1) &&
  fail "tp=2 in one process was accepted"
grep -q "the job has 1 processes" <<<"$out" || fail "tp=2 in one process: $out"

# --dry-run under tp=2: a rank's KV bytes per token, half the single process's 1024 (2 layers x (K, V) x 1 of the 2
# heads x 32 dims x 4 bytes), printed once.
dry=$("${MPIRUN[@]}" -np 2 "$LOOM" serve "$run" --dry-run --kv-mb 1 --block-size 4 --set parallel.tp=2 2>&1) ||
  fail "--dry-run under tp=2: $dry"
[ "$(grep -c "512 bytes per token" <<<"$dry")" = 1 ] && grep -q "512 blocks of 4 positions" <<<"$dry" ||
  fail "--dry-run under tp=2: $dry"

log=$WORK/serve.log
"${MPIRUN[@]}" -np 2 timeout 300 "$LOOM" serve "$run" --port 0 --block-size 4 --kv-mb 4 --ignore-eos --set parallel.tp=2 \
  >"$log" 2>&1 &
pid=$!
port=$(served_port "$log" $pid 600) || exit 1
grep -q "tensor-parallel over 2 ranks" "$log" || fail "not tensor-parallel: $(cat "$log")"
timeout 120 python3 - "$port" "$WORK/prompts.jsonl" "$WORK/one.jsonl" <<'PY' || fail "the client checks: $(tail -5 "$log")"
import json, sys, threading, http.client
port, prompts, reference = int(sys.argv[1]), sys.argv[2], sys.argv[3]
requests = [json.loads(l) for l in open(prompts)]
expected = [json.loads(l)["text"] for l in open(reference)]
def complete(body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    assert r.status == 200, out
    return out["choices"][0]["text"]
got = [None] * 12
def one(i):
    got[i] = complete(requests[i % len(requests)])
threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
for t in threads: t.start()
for t in threads: t.join()
for i, text in enumerate(got):
    assert text == expected[i % len(requests)], (i, text, expected[i % len(requests)])
print("serve: 12 concurrent requests under tp=2 == one process's generate")
PY
# An idle server's follower sleeps between probes for the next step (serve/step_channel.h): under 10% of a core
# over 2 s (a blocking MPI receive spun at ~40%).
follower=$(sed -nE 's/.*rank 1 of 2 \(pid ([0-9]+)\) follows.*/\1/p' "$log")
[ -n "$follower" ] || fail "no follower line: $(cat "$log")"
python3 - "$follower" <<'PY' || fail "the idle follower is busy"
import os, sys, time
def cpu():
    fields = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
time.sleep(0.5)
before = cpu(); time.sleep(2); used = cpu() - before
print(f"idle follower: {used / 2 * 100:.1f}% of a core")
assert used < 0.2, used
PY
pkill -TERM -P $pid  # the ranks (each under its `timeout`), as a batch scheduler's stop reaches them
code=0
timeout 60 tail --pid=$pid -f /dev/null || fail "the ranks did not stop on SIGTERM: $(tail -5 "$log")"
wait $pid || code=$?
[ $code -eq 0 ] || fail "mpirun exited $code on SIGTERM: $(tail -5 "$log")"
grep -q "loom serve: stopped" "$log" || fail "no clean stop: $(tail -5 "$log")"
pid=

# The server with the draft under tp=2 (the follower's drafter takes rank 0's broadcast inside its step): the
# requests one at a time give the single process's `generate --max-batch 1 --draft` texts, greedy and sampled.
"$LOOM" generate "$run" --input "$WORK/prompts.jsonl" --output "$WORK/one-draft-1.jsonl" --ignore-eos --max-batch 1 \
  --draft "$draft" 2>/dev/null || fail "generate --draft --max-batch 1 failed"
log=$WORK/serve-draft.log
"${MPIRUN[@]}" -np 2 timeout 300 "$LOOM" serve "$run" --port 0 --ignore-eos --draft "$draft" --set parallel.tp=2 \
  >"$log" 2>&1 &
pid=$!
port=$(served_port "$log" $pid 600) || exit 1
timeout 120 python3 - "$port" "$WORK/prompts.jsonl" "$WORK/one-draft-1.jsonl" <<'PY2' || fail "the draft server: $(tail -5 "$log")"
import json, sys, http.client
port, prompts, reference = int(sys.argv[1]), sys.argv[2], sys.argv[3]
expected = [json.loads(l)["text"] for l in open(reference)]
for i, body in enumerate(json.loads(l) for l in open(prompts)):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    assert r.status == 200, out
    assert out["choices"][0]["text"] == expected[i], (i, out["choices"][0]["text"], expected[i])
print("serve --draft under tp=2: each request == one process's generate --draft")
PY2
pkill -TERM -P $pid
timeout 60 tail --pid=$pid -f /dev/null || fail "the draft server did not stop: $(tail -5 "$log")"
pid=
echo "PASS"
