# Sourced by the end-to-end tests: paths, a scratch dir, and `tiny_train RUN_DIR [--set ...]`.
set -euo pipefail
: "${LOOM:?set LOOM to the loom binary}" "${KJV_DATA:?set KJV_DATA to prepared KJV data}"
SRC=${LOOM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-e2e.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

tiny_args() {
  echo "$SRC/tests/e2e/tiny.yaml --set run.dir=$1 --set data.train=$KJV_DATA/train.bin" \
       "--set data.valid=$KJV_DATA/valid.bin --set tokenizer.model=$KJV_DATA/tokenizer.model"
}
tiny_train() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  "$LOOM" train $(tiny_args "$dir") "$@"
}
# Starts training in the background with PID in $pid (the loom process itself, so signals reach it).
tiny_train_bg() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  "$LOOM" train $(tiny_args "$dir") "$@" &
  pid=$!
}
fail() { echo "FAIL: $*" >&2; exit 1; }
# Rows of metrics.jsonl as "split step loss" with the loss exactly as written.
losses() { python3 "$SRC/tests/e2e/metrics.py" rows "$1"; }
