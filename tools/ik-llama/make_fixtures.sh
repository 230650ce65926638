#!/usr/bin/env bash
# Builds dump_trellis.cpp and dump_interleaved.cpp against an ik_llama.cpp build outside the
# repository and writes their fixtures into tests/fixtures/quant/ik-trellis/ and
# tests/fixtures/quant/ik-interleaved/. Nothing of ik_llama.cpp is committed.
#   IK_DIR=/path/to/ik_llama.cpp bash tools/ik-llama/make_fixtures.sh
# IK_DIR must hold ggml/include/ggml.h and build/ggml/src/libggml.a (a CPU build, OpenMP on).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
IK_DIR="${IK_DIR:?set IK_DIR to an ik_llama.cpp tree with build/ggml/src/libggml.a}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

for tool in trellis interleaved; do
    g++ -std=c++17 -O2 -o "$TMP/dump_$tool" "$HERE/dump_$tool.cpp" -I"$IK_DIR/ggml/include" \
        "$IK_DIR/build/ggml/src/libggml.a" -fopenmp -lpthread -lm
    mkdir -p "$ROOT/tests/fixtures/quant/ik-$tool"
    "$TMP/dump_$tool" "$ROOT/tests/fixtures/quant/ik-$tool"
done
