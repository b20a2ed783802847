# Sourced by the data preparation scripts after they set their defaults (out, vocab): parses
# [--out DIR] [--vocab N] [--loom PATH], checks spm_train and loom, and gives skip_if_prepared.
loom=${loom:-build/loom}
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --loom) loom=$2; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--vocab N] [--loom PATH]" >&2; exit 2 ;;
  esac
done
command -v spm_train >/dev/null || { echo "$0: spm_train is missing: run scripts/setup.sh" >&2; exit 1; }
[ -x "$loom" ] || { echo "$0: $loom is not built: run scripts/setup.sh" >&2; exit 1; }

# skip_if_prepared DESCRIPTION: exits 0 when OUT was made with exactly this description (data, vocabulary,
# script hashes), else empties the stamp so an interrupted run is never taken for a finished one.
skip_if_prepared() {
  stamp="$out/.prepared"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$1" ]; then
    echo "$(basename "$0" .sh): $out is up to date ($1)"
    exit 0
  fi
  mkdir -p "$out"
  rm -f "$stamp"
}
