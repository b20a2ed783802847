# Sourced by the data preparation scripts after they set their defaults (out, vocab): parses
# [--out DIR] [--vocab N] [--loom PATH] and checks that spm_train is there.
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
