#!/usr/bin/env bash
# Unpacks the llama-cpp-python sdist from PyPI (it carries llama.cpp's sources, gguf-py and
# convert_hf_to_gguf.py) into a cache directory OUTSIDE the repository, once, sha256-checked, and
# prints the unpacked directory. Shared by tools/reference/setup.sh, tools/train-tiny/setup.sh and
# tools/llama-cpp/build-perplexity.sh. Nothing of llama.cpp is committed.
#   bash tools/llama-cpp/fetch-sdist.sh [PYTHON]     (PYTHON runs `pip download`; default python3)
# Env: REFERENCE_CACHE_DIR (default ~/.cache/mla).
set -euo pipefail

VERSION="0.3.36"
SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # llama_cpp_python-0.3.36.tar.gz
PYTHON="${1:-python3}"
CACHE_DIR="${REFERENCE_CACHE_DIR:-$HOME/.cache/mla}"
SDIST_DIR="$CACHE_DIR/llama-cpp-python-$VERSION"

if [ ! -f "$SDIST_DIR/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
    mkdir -p "$CACHE_DIR"
    tmp="$(mktemp -d "$CACHE_DIR/download.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    "$PYTHON" -m pip download --quiet --disable-pip-version-check \
        --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$tmp" >&2
    tarball="$tmp/llama_cpp_python-$VERSION.tar.gz"
    echo "$SHA256  $tarball" | sha256sum --check --quiet
    tar -xzf "$tarball" -C "$tmp"
    rm -rf "$SDIST_DIR"
    mv "$tmp/llama_cpp_python-$VERSION" "$SDIST_DIR"
fi
echo "$SDIST_DIR"
