#!/usr/bin/env bash
# Builds llama.cpp's own llama-perplexity (plus llama-completion, llama-quantize and llama-bench, for comparisons)
# from the llama.cpp sources vendored in the llama-cpp-python sdist on PyPI, into a cache directory
# OUTSIDE the repository. Nothing of llama.cpp is committed; this is a peer for comparisons only.
#   bash tools/llama-cpp/build-perplexity.sh        -> prints the path of llama-perplexity
# Env: REFERENCE_CACHE_DIR (default ~/.cache/mla), JOBS (default 2), LLAMA_CPP_PYTHON_VERSION.
# Downloads the sdist (sha256-checked) when tools/train-tiny/setup.sh or tools/reference/setup.sh
# has not already unpacked it. CPU only (GGML_NATIVE), no network features, static libraries.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # of llama_cpp_python-0.3.36.tar.gz
CACHE_DIR="${REFERENCE_CACHE_DIR:-$HOME/.cache/mla}"
SDIST_DIR="$CACHE_DIR/llama-cpp-python-$VERSION"
SRC="$SDIST_DIR/vendor/llama.cpp"
BUILD="$CACHE_DIR/llama.cpp-$VERSION-build"
JOBS="${JOBS:-2}"

if [ ! -f "$SRC/CMakeLists.txt" ]; then
    mkdir -p "$CACHE_DIR"
    tmp="$(mktemp -d "$CACHE_DIR/download.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
        "llama-cpp-python==$VERSION" -d "$tmp" >&2
    tarball="$tmp/llama_cpp_python-$VERSION.tar.gz"
    if [ "$VERSION" = 0.3.36 ]; then echo "$SHA256  $tarball" | sha256sum --check --quiet; fi
    tar -xzf "$tarball" -C "$tmp"
    rm -rf "$SDIST_DIR"
    mv "$tmp/llama_cpp_python-$VERSION" "$SDIST_DIR"
fi

if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TOOLS=ON >&2
fi
cmake --build "$BUILD" -j "$JOBS" --target llama-perplexity llama-completion llama-quantize llama-bench >&2
echo "$BUILD/bin/llama-perplexity"
