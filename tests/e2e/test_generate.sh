#!/usr/bin/env bash
# loom generate on a trained run: greedy output is the same with and without the KV cache, sampling
# is reproducible by seed, top-k 1 equals greedy, sampling ends at the end-of-sequence token unless
# --ignore-eos, tokens stream out as they are sampled (the printed text equals --json's), a GPU run samples
# on a CPU-only machine, and bad input gives a clear error, not a crash.
source "$(dirname "$0")/common.sh"
run=$WORK/run
tiny_train "$run" --set train.max_steps=30 --set model.max_seq_len=64 >/dev/null 2>&1

gen() { "$LOOM" generate "$run" --prompt "And God said" --max-new-tokens 40 "$@" 2>/dev/null; }
cached=$(gen --temperature 0); uncached=$(gen --temperature 0 --no-cache)
echo "greedy: $cached"
[ -n "$cached" ] && [ "$cached" = "$uncached" ] || fail "cached and uncached greedy output differ: '$cached' vs '$uncached'"
[[ "$cached" == "And God said"* ]] || fail "output does not start with the prompt"
[ "$(gen --temperature 1 --seed 3)" = "$(gen --temperature 1 --seed 3)" ] || fail "sampling with one seed differs"
[ "$(gen --temperature 1 --top-k 1 --seed 9)" = "$cached" ] || fail "top-k 1 differs from greedy"
[ "$(gen --temperature 1 --seed 3)" != "$(gen --temperature 1 --seed 4)" ] || fail "different seeds gave the same sample"
# Past the context (64): generation slides its window instead of failing.
long=$("$LOOM" generate "$run" --prompt "In the beginning" --max-new-tokens 100 --temperature 0 --ignore-eos --json \
       2>/dev/null) || fail "generation past the context failed"
python3 -c "import json, sys; assert len(json.loads(sys.argv[1])['tokens']) == 100" "$long" || fail "not 100 tokens: $long"

# The end-of-sequence token (a verse's end here) ends a sample unless --ignore-eos; both print, token by
# token, the text --json reports.
eos_id=2  # spm_train's default, which scripts/prepare_kjv.sh keeps
stopped=$(gen --temperature 1 --seed 5 --max-new-tokens 1000 --json)
endless=$(gen --temperature 1 --seed 5 --max-new-tokens 1000 --json --ignore-eos)
python3 - "$stopped" "$endless" "$eos_id" <<'PY' || fail "the end-of-sequence stop"
import json, sys
stopped, endless, eos = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
assert stopped["stop"] == "eos" and eos not in stopped["tokens"], stopped
assert endless["stop"] == "length" and len(endless["tokens"]) == 1000, endless["stop"]
n = len(stopped["tokens"])
assert endless["tokens"][:n] == stopped["tokens"] and endless["tokens"][n] == eos, "--ignore-eos sampled another way"
print(f"sampling stopped at eos after {n} tokens; --ignore-eos went on to 1000")
PY
printed=$(gen --temperature 1 --seed 5 --max-new-tokens 1000 --ignore-eos)
[ "$printed" = "$(python3 -c "import json, sys; print(json.loads(sys.argv[1])['text'])" "$endless")" ] \
  || fail "the streamed text differs from --json's"
# Streaming: a long generation shows its first tokens long before it ends.
"$LOOM" generate "$run" --prompt "And God said" --max-new-tokens 1000000 --ignore-eos > "$WORK/stream.txt" 2>/dev/null &
streamer=$!
for _ in $(seq 300); do [ "$(wc -c < "$WORK/stream.txt")" -gt 200 ] && break; sleep 0.1; done
kill $streamer 2>/dev/null || fail "the 1000000-token generation ended already"
wait $streamer 2>/dev/null || true
[ "$(wc -c < "$WORK/stream.txt")" -gt 200 ] || fail "nothing streamed within 30 s: '$(cat "$WORK/stream.txt")'"
set +e
out=$("$LOOM" generate "$run" --prompt x --max-new-tokens 99999999999999 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q -- "--max-new-tokens 99999999999999 must be in \[0, 1048576\]" <<<"$out" \
  || fail "an absurd --max-new-tokens: exit $code, '$out'"
# An empty prompt starts from a line break.
"$LOOM" generate "$run" --prompt "" --max-new-tokens 5 >/dev/null 2>&1 || fail "empty prompt failed"

# A run trained on a GPU samples and evaluates on a machine without one: its model loads on the CPU (here
# the run's configs are made to say it trained on cuda).
if [ "$E2E_DEVICE" = cpu ] && python3 -c 'import sys, torch; sys.exit(torch.cuda.is_available())'; then
  gpu_run=$WORK/gpu-run
  cp -r "$run" "$gpu_run"
  sed -i 's/^  device: cpu$/  device: cuda/' "$gpu_run"/config.yaml "$gpu_run"/checkpoints/*/config.yaml
  grep -q "^  device: cuda$" "$gpu_run"/checkpoints/30/config.yaml || fail "the checkpoint's config names no device"
  python3 - "$gpu_run"/checkpoints/* <<'PY'  # the manifests' sizes and checksums of the edited configs
import json, os, sys, zlib
for checkpoint in sys.argv[1:]:
    path = os.path.join(checkpoint, "manifest.json")
    manifest = json.load(open(path))
    data = open(os.path.join(checkpoint, "config.yaml"), "rb").read()
    manifest["files"]["config.yaml"].update(bytes=len(data), crc32=zlib.crc32(data))
    json.dump(manifest, open(path, "w"))
PY
  on_cpu=$("$LOOM" generate "$gpu_run" --prompt "And God said" --max-new-tokens 40 --temperature 0 2>"$WORK/gpu.err") ||
    fail "a GPU run's generate on the CPU: $(cat "$WORK/gpu.err")"
  grep -q "none is visible here" "$WORK/gpu.err" || fail "no note that the GPU run's model runs on the CPU"
  [ "$on_cpu" = "$cached" ] || fail "a GPU run's greedy output on the CPU differs: '$on_cpu'"
  [ "$("$LOOM" eval "$gpu_run" --json 2>/dev/null)" = "$("$LOOM" eval "$run" --json 2>/dev/null)" ] ||
    fail "a GPU run's evaluation on the CPU differs"
fi

set +e
out=$("$LOOM" generate "$WORK" --prompt x 2>&1); code=$?
set -e
[ $code -eq 1 ] && grep -q "not a loom run directory" <<<"$out" || fail "a non-run dir: exit $code, '$out'"
set +e
out=$("$LOOM" generate "$run" --prompt x --top-p 0 2>&1); code=$?
set -e
[ $code -eq 2 ] && grep -q -- "--top-p" <<<"$out" || fail "bad --top-p: exit $code, '$out'"
echo PASS
