#!/usr/bin/env bash
# The main job: install and build, prepare the KJV data, train configs/gpt-kjv.yaml (resuming if it
# was interrupted), then print a sample from the trained model.
#   scripts/run_default.sh [--set key.path=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/prepare_kjv.sh
build/loom train configs/gpt-kjv.yaml "$@"
run_dir=$(build/loom config configs/gpt-kjv.yaml "$@" --get run.dir)
echo "--- sample (loom generate $run_dir --prompt \"And God said\") ---"
build/loom generate "$run_dir" --prompt "And God said" --max-new-tokens 80 --temperature 0.8 --top-k 50 --seed 1
