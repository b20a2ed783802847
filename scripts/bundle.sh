#!/usr/bin/env bash
# Packs a built loom to run on another x86-64 Linux machine that has the same torch wheel (a GPU box with
# PyTorch, say) but not loom's other libraries and no compiler or package manager to get them:
#   DIR/bin/loom   the binary
#   DIR/lib/       the shared libraries it loads from the system here (OpenMPI, yaml-cpp, spdlog, fmt,
#                  sentencepiece and what they load), but not glibc, libstdc++, LibTorch or CUDA's libraries:
#                  those come from the target, where they are as new or newer
#   DIR/loom       a launcher: finds the target's torch through its python3, refuses another torch version
#                  than the one loom was built against, and runs DIR/bin/loom with these libraries
# Single-process runs only (mpirun and OpenMPI's plugins are not packed).
#   scripts/bundle.sh [--loom build/loom] [--out bundle]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
loom=$SRC/build/loom out=$SRC/bundle
while [ $# -gt 0 ]; do
  case $1 in
    --loom) loom=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$loom" ] || { echo "bundle.sh: $loom is not built (scripts/setup.sh)" >&2; exit 2; }
torch_version=$(python3 -c 'import torch; print(torch.__version__)')

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$loom" "$out/bin/loom"
# What the dynamic loader resolves here, less what the target brings: glibc's libraries, the C++ runtime,
# and anything from the torch wheel or the CUDA toolkit.
ldd "$loom" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
    *) case $lib in
         */site-packages/*|/usr/local/cuda*) ;;
         *) cp -L "$lib" "$out/lib/" ;;
       esac ;;
  esac
done
echo "$torch_version" > "$out/TORCH_VERSION"
# Which source the binary is (a bundle made before the last build is stale): the commit, "+" for local changes.
git -C "$SRC" describe --always --dirty=+ > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"

cat > "$out/loom" <<'LAUNCHER'
#!/usr/bin/env bash
# Runs the packed loom with this machine's torch wheel (see scripts/bundle.sh). Where torch lives is asked of
# python3 once per machine (importing torch takes seconds) and kept in a file under /tmp.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
built=$(cat "$here/TORCH_VERSION")
where=${TMPDIR:-/tmp}/loom-bundle-torch.$(id -u)
known() { [ -s "$where" ] && read -r torch_version torch_lib nvidia_libs < "$where" && [ -d "$torch_lib" ]; }
if ! { known && [ "$torch_version" = "$built" ]; }; then  # anything else is asked again
  python3 -c '
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(torch.__version__, os.path.join(os.path.dirname(torch.__file__), "lib"),
      ":".join(sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))) or "-")' > "$where.$$" ||
    { rm -f "$where.$$"; echo "loom bundle: python3 cannot import torch; install torch $built" >&2; exit 2; }
  mv "$where.$$" "$where"
  read -r torch_version torch_lib nvidia_libs < "$where"
fi
[ "$torch_version" = "$built" ] ||
  { echo "loom bundle: built against torch $built, but python3 here has torch $torch_version; build loom here instead" >&2; exit 2; }
[ "$nvidia_libs" = "-" ] && nvidia_libs=
export LD_LIBRARY_PATH=$here/lib:$torch_lib${nvidia_libs:+:$nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$here/bin/loom" "$@"
LAUNCHER
chmod +x "$out/loom"
echo "bundle.sh: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | tr '\n' ' ')"
