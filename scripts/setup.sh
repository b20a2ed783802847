#!/usr/bin/env bash
# Installs everything loom needs on a fresh Debian 12 machine and builds it (Release, ccache, shared PCH).
# Idempotent: what is already installed or built is skipped. Needs root (or sudo) for apt-get.
#   Debian: compiler, CMake, ccache, OpenMPI, yaml-cpp, spdlog, Catch2, nlohmann-json, sentencepiece,
#           diatheke + the Bible modules (KJV, WEB, Reina-Valera 1909); for `loom prepare`: zlib and
#           libzstd (compressed corpora), simdjson (JSONL)
#   PyPI:   the pinned torch wheel (its LibTorch is what loom links; tests also use it for golden values),
#           transformers and safetensors (golden logits of Hugging Face's GPT-2 and LLaMA),
#           sacrebleu (the reference `loom bleu` is tested against), tokenizers and sentencepiece (the
#           references scripts/bench_prepare.sh measures `loom prepare` against)
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=5.24.0
SAFETENSORS_VERSION=0.8.0
SACREBLEU_VERSION=2.5.1
TOKENIZERS_VERSION=0.23.3
SENTENCEPIECE_VERSION=0.2.3
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build}
packages=(build-essential cmake ccache pkg-config python3 python3-pip git
          libopenmpi-dev openmpi-bin libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev
          libsentencepiece-dev sentencepiece diatheke sword-text-kjv sword-text-web sword-text-sparv
          python3-matplotlib zlib1g-dev libzstd-dev libsimdjson-dev zstd)

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! "$PYTHON" -c "
import sys, torch, transformers, safetensors
sys.exit((torch.__version__.split('+')[0], transformers.__version__, safetensors.__version__)
         != ('$TORCH_VERSION', '$TRANSFORMERS_VERSION', '$SAFETENSORS_VERSION'))" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION, transformers, safetensors from PyPI (several GB, once per machine)"
  # Debian's own python3 refuses system-wide pip installs unless told; other pythons ignore the flag.
  "$PYTHON" -m pip install --quiet --break-system-packages "torch==$TORCH_VERSION" numpy \
    "transformers==$TRANSFORMERS_VERSION" "safetensors==$SAFETENSORS_VERSION"
fi

if ! "$PYTHON" -c "
import sys, sacrebleu
sys.exit(sacrebleu.__version__ != '$SACREBLEU_VERSION')" 2>/dev/null; then
  echo "setup: installing sacrebleu==$SACREBLEU_VERSION from PyPI"
  "$PYTHON" -m pip install --quiet --break-system-packages "sacrebleu==$SACREBLEU_VERSION"
fi

if ! "$PYTHON" -c "
import sys, tokenizers, sentencepiece
sys.exit((tokenizers.__version__, sentencepiece.__version__) != ('$TOKENIZERS_VERSION', '$SENTENCEPIECE_VERSION'))" 2>/dev/null; then
  echo "setup: installing tokenizers==$TOKENIZERS_VERSION, sentencepiece==$SENTENCEPIECE_VERSION from PyPI"
  "$PYTHON" -m pip install --quiet --break-system-packages "tokenizers==$TOKENIZERS_VERSION" \
    "sentencepiece==$SENTENCEPIECE_VERSION"
fi

export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR=$PWD  # relative paths: clones in other directories share the cache
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON >"$BUILD_DIR/configure.log" 2>&1 \
  || { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/loom"
