#!/usr/bin/env bash
# Writes the fixtures made by ik_llama.cpp's own quantizers and dequantizers: compiles
# ik_fixtures.cpp (-> tests/fixtures/quant/ik/), dump_trellis.cpp (-> ik-trellis/) and
# dump_interleaved.cpp (-> ik-interleaved/) against an ik_llama.cpp tree built OUTSIDE the
# repository (its ggml headers and static libggml.a) and runs them. Nothing of ik_llama.cpp is
# committed; only its outputs are.
#   bash tools/ik-llama/make-fixtures.sh IK_SRC [IK_BUILD]
# IK_SRC: the ik_llama.cpp checkout; IK_BUILD (default IK_SRC/build): a CMake build of it with
# BUILD_SHARED_LIBS=OFF (ggml/src/libggml.a). Env: CXX (default g++), OUT (default
# tests/fixtures/quant: the parent of the three fixture directories).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IK_SRC="${1:?usage: make-fixtures.sh IK_SRC [IK_BUILD]}"
IK_BUILD="${2:-$IK_SRC/build}"
OUT="${OUT:-$REPO/tests/fixtures/quant}"
LIB="$IK_BUILD/ggml/src/libggml.a"
[ -f "$LIB" ] || { echo "no static ggml library at $LIB (build ik_llama.cpp with -DBUILD_SHARED_LIBS=OFF)" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# ik's ggml is C and C++ with OpenMP; link its runtime, threads and libm.
for tool in ik_fixtures:ik dump_trellis:ik-trellis dump_interleaved:ik-interleaved; do
    src="${tool%%:*}"
    dir="$OUT/${tool##*:}"
    "${CXX:-g++}" -std=c++17 -O2 -I "$IK_SRC/ggml/include" "$HERE/$src.cpp" "$LIB" \
        -fopenmp -pthread -lm -o "$WORK/$src"
    mkdir -p "$dir"
    "$WORK/$src" "$dir"
done
