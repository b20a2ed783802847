"""Reads a run's metrics.jsonl for the end-to-end tests.

  metrics.py rows RUN_DIR          one line per row: split step loss (loss exactly as stored)
  metrics.py get RUN_DIR SPLIT STEP KEY
  metrics.py compare BEFORE AFTER  two LOOM_E2E_KEEP directories (tests/e2e/common.sh) hold the same
                                   metrics files with the same rows, every value equal but timings'
"""
import json
import os
import sys


def rows(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def is_timing(key):
    # elapsed_s, tokens_per_s and the like: wall-clock measurements, different on every run.
    return key.endswith("_s")


def metrics_files(root):
    found = set()
    for directory, _, files in os.walk(root):
        if "metrics.jsonl" in files:
            found.add(os.path.relpath(directory, root))
    return found


def compare(before, after):
    """Prints one line per difference and a summary; returns the number of differences."""
    a_runs, b_runs = metrics_files(before), metrics_files(after)
    problems = [f"only in {before}: {r}" for r in sorted(a_runs - b_runs)]
    problems += [f"only in {after}: {r}" for r in sorted(b_runs - a_runs)]
    row_count = value_count = 0
    for run in sorted(a_runs & b_runs):
        a, b = rows(os.path.join(before, run)), rows(os.path.join(after, run))
        if len(a) != len(b):
            problems.append(f"{run}: {len(a)} rows before, {len(b)} after")
            continue
        for x, y in zip(a, b):
            keys = sorted(k for k in set(x) | set(y) if not is_timing(k))
            different = [k for k in keys if x.get(k, "<absent>") != y.get(k, "<absent>")]
            if different:
                where = f"{run}: {x.get('split')} step {x.get('step')}"
                problems += [f"{where}: {k} {x.get(k, '<absent>')!r} -> {y.get(k, '<absent>')!r}" for k in different]
            row_count += 1
            value_count += len(keys)
    for p in problems:
        print(p)
    tests = {r.split(os.sep)[0] for r in a_runs & b_runs}
    print(f"{len(a_runs & b_runs)} runs of {len(tests)} tests, {row_count} rows, {value_count} values compared "
          f"(timings excepted): {len(problems)} differences")
    return len(problems)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    run_dir = sys.argv[2]
    if command == "rows":
        for r in rows(run_dir):
            print(r["split"], r["step"], repr(r["loss"]))
    elif command == "get":
        split, step, key = sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print(next(r[key] for r in rows(run_dir) if r["split"] == split and r["step"] == step))
    else:
        sys.exit(f"unknown command {command}")
