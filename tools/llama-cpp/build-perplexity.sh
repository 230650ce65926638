#!/usr/bin/env bash
# Builds llama.cpp's own llama-perplexity (plus llama-completion, llama-quantize, llama-bench,
# llama-gguf-split and llama-server, for comparisons)
# from the llama.cpp sources vendored in the llama-cpp-python sdist on PyPI, into a cache directory
# OUTSIDE the repository. Nothing of llama.cpp is committed; this is a peer for comparisons only.
#   bash tools/llama-cpp/build-perplexity.sh        -> prints the path of llama-perplexity
# Env: REFERENCE_CACHE_DIR (default ~/.cache/mla), JOBS (default 2). The sdist comes from
# fetch-sdist.sh (sha256-checked, unpacked once). CPU only (GGML_NATIVE), no network features,
# static libraries.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SDIST_DIR="$(bash "$HERE/fetch-sdist.sh")"
VERSION="${SDIST_DIR##*-}"
CACHE_DIR="$(dirname "$SDIST_DIR")"
SRC="$SDIST_DIR/vendor/llama.cpp"
BUILD="$CACHE_DIR/llama.cpp-$VERSION-build"
JOBS="${JOBS:-2}"

if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TOOLS=ON >&2
fi
cmake --build "$BUILD" -j "$JOBS" --target llama-perplexity llama-completion llama-quantize llama-bench llama-gguf-split \
    llama-server >&2
echo "$BUILD/bin/llama-perplexity"
