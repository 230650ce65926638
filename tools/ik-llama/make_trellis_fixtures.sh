#!/usr/bin/env bash
# Builds dump_trellis.cpp against an ik_llama.cpp build outside the repository and writes the
# trellis fixtures into tests/fixtures/quant/ik-trellis/. Nothing of ik_llama.cpp is committed.
#   IK_DIR=/path/to/ik_llama.cpp bash tools/ik-llama/make_trellis_fixtures.sh
# IK_DIR must hold ggml/include/ggml.h and build/ggml/src/libggml.a (a CPU build, OpenMP on).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
IK_DIR="${IK_DIR:?set IK_DIR to an ik_llama.cpp tree with build/ggml/src/libggml.a}"
OUT="$ROOT/tests/fixtures/quant/ik-trellis"
BIN="$(mktemp -d)/dump_trellis"

g++ -std=c++17 -O2 -o "$BIN" "$HERE/dump_trellis.cpp" -I"$IK_DIR/ggml/include" \
    "$IK_DIR/build/ggml/src/libggml.a" -fopenmp -lpthread -lm
mkdir -p "$OUT"
"$BIN" "$OUT"
