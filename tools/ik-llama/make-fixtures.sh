#!/usr/bin/env bash
# Writes tests/fixtures/quant/ik/ from ik_llama.cpp's own quantizers and dequantizers: compiles
# ik_fixtures.cpp against an ik_llama.cpp tree built OUTSIDE the repository (its ggml headers and
# static libggml.a) and runs it. Nothing of ik_llama.cpp is committed; only its outputs are.
#   bash tools/ik-llama/make-fixtures.sh IK_SRC [IK_BUILD]
# IK_SRC: the ik_llama.cpp checkout; IK_BUILD (default IK_SRC/build): a CMake build of it with
# BUILD_SHARED_LIBS=OFF (ggml/src/libggml.a). Env: CXX (default g++), OUT (default the fixture dir).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IK_SRC="${1:?usage: make-fixtures.sh IK_SRC [IK_BUILD]}"
IK_BUILD="${2:-$IK_SRC/build}"
OUT="${OUT:-$REPO/tests/fixtures/quant/ik}"
LIB="$IK_BUILD/ggml/src/libggml.a"
[ -f "$LIB" ] || { echo "no static ggml library at $LIB (build ik_llama.cpp with -DBUILD_SHARED_LIBS=OFF)" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# ik's ggml is C and C++ with OpenMP; link its runtime, threads and libm.
"${CXX:-g++}" -std=c++17 -O2 -I "$IK_SRC/ggml/include" "$HERE/ik_fixtures.cpp" "$LIB" \
    -fopenmp -pthread -lm -o "$WORK/ik_fixtures"
mkdir -p "$OUT"
"$WORK/ik_fixtures" "$OUT"
