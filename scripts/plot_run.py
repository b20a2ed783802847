#!/usr/bin/python3
"""Plots a run's metrics.jsonl: train and valid loss, learning rate, gradient norm and tokens/s against
the step, in RUN_DIR/plots.png. Several run dirs overlay in one figure (written into the first, or to
--out) for comparison. Uses Debian's python3-matplotlib (scripts/setup.sh installs it): run as
`scripts/plot_run.py` or with any `python3`, which hands over to Debian's when it lacks matplotlib.

  scripts/plot_run.py RUN_DIR [RUN_DIR ...] [--out FILE]
"""
import argparse
import json
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
try:
    import matplotlib
except ImportError:
    # `python3 scripts/plot_run.py` with a python3 on the PATH (pyenv's, a venv's) that lacks matplotlib: run
    # again under Debian's, which has python3-matplotlib.
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.access(DEBIAN_PYTHON, os.X_OK):
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    sys.exit(f"plot_run.py: {sys.executable} has no matplotlib: run scripts/plot_run.py itself (Debian's "
             f"{DEBIAN_PYTHON} with python3-matplotlib, which scripts/setup.sh installs), or install matplotlib "
             f"for {sys.executable}")

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [("loss", "loss"), ("lr", "learning rate"), ("grad_norm", "gradient norm"), ("tokens_per_s", "tokens/s")]


def read_rows(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"plot_run.py: {run_dir} has no metrics.jsonl: give the run.dir of a `loom train` run")
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a crash
    return rows


def series(rows, split, key):
    points = [(r["step"], r[key]) for r in rows if r.get("split") == split and key in r]
    return [p[0] for p in points], [p[1] for p in points]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--out", help="image file (default: FIRST_RUN_DIR/plots.png)")
    args = parser.parse_args()
    runs = [(d, read_rows(d)) for d in args.run_dirs]
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    for axis, (key, title) in zip(axes.flat, PANELS):
        for run_dir, rows in runs:
            name = os.path.basename(os.path.normpath(run_dir))
            steps, values = series(rows, "train", key)
            line = axis.plot(steps, values, label=f"{name} train" if key == "loss" else name)[0]
            if key == "loss":
                steps, values = series(rows, "valid", key)
                axis.plot(steps, values, "o--", color=line.get_color(), label=f"{name} valid")
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        if key in ("lr",):
            axis.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        axis.legend(fontsize=8)
    figure.tight_layout()
    out = args.out or os.path.join(args.run_dirs[0], "plots.png")
    figure.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
