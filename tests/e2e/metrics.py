"""Reads a run's metrics.jsonl for the end-to-end tests.

  metrics.py rows RUN_DIR          one line per row: split step loss (loss exactly as stored)
  metrics.py get RUN_DIR SPLIT STEP KEY
"""
import json
import sys


def rows(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


if __name__ == "__main__":
    command, run_dir = sys.argv[1], sys.argv[2]
    if command == "rows":
        for r in rows(run_dir):
            print(r["split"], r["step"], repr(r["loss"]))
    elif command == "get":
        split, step, key = sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print(next(r[key] for r in rows(run_dir) if r["split"] == split and r["step"] == step))
    else:
        sys.exit(f"unknown command {command}")
