#!/usr/bin/env bash
# On a terminal `loom train` draws a live progress bar with ETA on stderr (train/progress.h), redrawn in
# place after every step, with the usual log lines still above it; when stderr is a file the output is the
# plain log lines alone: no carriage returns, no escape sequences, one progress line per logged step.
source "$(dirname "$0")/common.sh"
tiny_train "$WORK/plain" > "$WORK/plain.out" 2> "$WORK/plain.err" || fail "training to a file"
python3 - "$WORK/plain.err" <<'PY' || fail "plain output"
import re, sys
text = open(sys.argv[1], "rb").read()
assert b"\r" not in text and b"\x1b" not in text, "control characters in a log file"
steps = [int(m) for m in re.findall(rb"\] step (\d+)/20 \| loss [0-9.]+ \| lr \S+ \| grad [0-9.]+ \| \d+ tok/s \| \S+ elapsed \| ETA \S+\n", text)]
assert steps == list(range(1, 21)), steps
print("not a terminal: 20 plain progress lines, no control characters")
PY

# A pseudo-terminal 100 columns wide.
python3 - "$WORK/tty.out" "$LOOM" $(tiny_args "$WORK/tty") <<'PY' || fail "terminal output"
import fcntl, os, pty, re, struct, sys, termios
out, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(sys.stderr.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    os.execv(argv[0], [argv[0], "train"] + argv[1:])
data = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
open(out, "wb").write(data)
assert os.WEXITSTATUS(status) == 0, data[-2000:]
bars = re.findall(rb"\r\x1b\[K(step (\d+)/20 \[([#.]+)\] +(\d+)% \| loss [0-9.]+ \| [0-9.]+k? tok/s \| \S+ elapsed \| ETA \S+)", data)
drawn = sorted({int(b[1]) for b in bars})
assert drawn == list(range(1, 21)), drawn  # after every step
for line, step, bar, percent in bars:
    assert len(line) <= 100, line
    assert int(percent) == int(step) * 100 // 20
    assert bar.count(b"#") == int(step) * len(bar) // 20, (step, bar)
assert bars[-1][1] == b"20" and bars[-1][3] == b"100"
# The log lines are still there, each starting on a line of its own (the bar is erased first).
# (spdlog colours the level tag on a terminal: "\x1b[32m[12:00:00 I]\x1b[m step 1/20 | loss ...")
assert len(re.findall(rb"\r\x1b\[K\x1b\[\d+m\[[^\]]*\]\x1b\[m step \d+/20 \| loss", data)) == 20
assert re.search(rb"step 20/20 \[#+\] 100% [^\n]*\n", data), "the last bar is not left on its own line"
print(f"terminal: bar drawn after each of 20 steps, width {len(bars[-1][2])}, log lines kept")
PY
echo PASS
