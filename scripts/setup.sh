#!/usr/bin/env bash
# Installs what loom needs on a fresh Debian 12 machine and builds it (Release, ccache, shared PCH).
# Idempotent: what is already installed or built is skipped. Needs root (or sudo) for apt-get.
#   scripts/setup.sh            what the main job needs: the packages below, the torch wheel, build/loom
#   scripts/setup.sh --tests    also the Python references the tests take golden values from, GPT-2's rank
#                               file, and the tests (build/tests/loom_tests)
#   Debian: compiler, CMake, ccache, OpenMPI, yaml-cpp, spdlog, Catch2, nlohmann-json, sentencepiece,
#           PCRE2 and ICU (the byte-level BPE tokenizers), diatheke + the Bible modules (KJV, WEB,
#           Reina-Valera 1909); for `loom prepare`: zlib and libzstd (compressed corpora), simdjson (JSONL);
#           for `loom serve`: cpp-httplib (the HTTP server)
#   PyPI:   the pinned torch wheel (its LibTorch is what loom links; tests also use it for golden values);
#           with --tests: transformers and safetensors (golden logits of Hugging Face's GPT-2 and LLaMA),
#           sacrebleu (the reference `loom bleu` is tested against), tokenizers and tiktoken (the references
#           of loom's tokenizers), sentencepiece (with tokenizers, the references scripts/bench_prepare.sh
#           measures `loom prepare` against), the official `openai` client (tests/e2e/test_serve.sh talks
#           to `loom serve` through it), and GPT-2's rank file gpt2.tiktoken, taken once from the
#           openai-whisper source package into $LOOM_CACHE (default ~/.cache/loom; never into the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=5.24.0
SAFETENSORS_VERSION=0.8.0
SACREBLEU_VERSION=2.5.1
TOKENIZERS_VERSION=0.23.3
SENTENCEPIECE_VERSION=0.2.3
TIKTOKEN_VERSION=0.14.0
WHISPER_VERSION=20250625
OPENAI_VERSION=3.51.0
GPT2_TIKTOKEN_SHA256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
LOOM_CACHE=${LOOM_CACHE:-$HOME/.cache/loom}
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build}
tests=false
case "${1:-}" in
  --tests) tests=true ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
packages=(build-essential cmake ccache pkg-config python3 python3-pip git
          libopenmpi-dev openmpi-bin libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev
          libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev diatheke sword-text-kjv sword-text-web
          sword-text-sparv python3-matplotlib zlib1g-dev libzstd-dev libsimdjson-dev zstd
          libcpp-httplib-dev)

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
import sys, torch
sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION from PyPI (several GB, once per machine)"
  # Debian's own python3 refuses system-wide pip installs unless told; other pythons ignore the flag.
  "$PYTHON" -m pip install --quiet --break-system-packages "torch==$TORCH_VERSION" numpy
fi

# What the tests take golden values from (not the main job's).
install_test_references() {
  if ! "$PYTHON" -c "
import sys, transformers, safetensors
sys.exit((transformers.__version__, safetensors.__version__) != ('$TRANSFORMERS_VERSION', '$SAFETENSORS_VERSION'))" \
      2>/dev/null; then
    echo "setup: installing transformers==$TRANSFORMERS_VERSION, safetensors==$SAFETENSORS_VERSION from PyPI"
    "$PYTHON" -m pip install --quiet --break-system-packages "transformers==$TRANSFORMERS_VERSION" \
      "safetensors==$SAFETENSORS_VERSION"
  fi

  if ! "$PYTHON" -c "
import sys, sacrebleu
sys.exit(sacrebleu.__version__ != '$SACREBLEU_VERSION')" 2>/dev/null; then
    echo "setup: installing sacrebleu==$SACREBLEU_VERSION from PyPI"
    "$PYTHON" -m pip install --quiet --break-system-packages "sacrebleu==$SACREBLEU_VERSION"
  fi

  if ! "$PYTHON" -c "
import sys, tokenizers, tiktoken, sentencepiece
sys.exit((tokenizers.__version__, tiktoken.__version__, sentencepiece.__version__)
         != ('$TOKENIZERS_VERSION', '$TIKTOKEN_VERSION', '$SENTENCEPIECE_VERSION'))" 2>/dev/null; then
    echo "setup: installing tokenizers==$TOKENIZERS_VERSION, tiktoken==$TIKTOKEN_VERSION," \
      "sentencepiece==$SENTENCEPIECE_VERSION from PyPI"
    "$PYTHON" -m pip install --quiet --break-system-packages "tokenizers==$TOKENIZERS_VERSION" \
      "tiktoken==$TIKTOKEN_VERSION" "sentencepiece==$SENTENCEPIECE_VERSION"
  fi

  if ! "$PYTHON" -c "
import sys, openai
sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
    echo "setup: installing openai==$OPENAI_VERSION from PyPI"
    "$PYTHON" -m pip install --quiet --break-system-packages "openai==$OPENAI_VERSION"
  fi

  # GPT-2's ranks: the file only, from the source package that ships it (tiktoken cannot download here).
  gpt2_ranks="$LOOM_CACHE/gpt2.tiktoken"
  if ! echo "$GPT2_TIKTOKEN_SHA256  $gpt2_ranks" | sha256sum --check --status 2>/dev/null; then
    echo "setup: fetching gpt2.tiktoken from openai-whisper==$WHISPER_VERSION (source package, PyPI) into $LOOM_CACHE"
    mkdir -p "$LOOM_CACHE"
    download=$(mktemp -d)
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "openai-whisper==$WHISPER_VERSION" -d "$download"
    tar -xzf "$download"/openai_whisper-*.tar.gz -C "$download" --wildcards '*/whisper/assets/gpt2.tiktoken'
    mv "$download"/openai_whisper-*/whisper/assets/gpt2.tiktoken "$gpt2_ranks.tmp"
    rm -rf "$download"
    echo "$GPT2_TIKTOKEN_SHA256  $gpt2_ranks.tmp" | sha256sum --check --status \
      || { echo "setup: gpt2.tiktoken has the wrong checksum" >&2; exit 1; }
    mv "$gpt2_ranks.tmp" "$gpt2_ranks"
  fi
}
$tests && install_test_references

export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR=$PWD  # relative paths: clones in other directories share the cache
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON >"$BUILD_DIR/configure.log" 2>&1 \
  || { cat "$BUILD_DIR/configure.log"; exit 1; }
# The main job needs the loom binary only; the unit tests are most of the build.
if $tests; then
  cmake --build "$BUILD_DIR" -j"$(nproc)"
  echo "setup: built $BUILD_DIR/loom and the tests"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target loom
  echo "setup: built $BUILD_DIR/loom"
fi
