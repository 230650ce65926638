#!/usr/bin/env bash
# `make lint`: the static checks every change must pass. Each step runs; any finding fails the run.
#   1. clang-format --dry-run -Werror on every tracked C++ file (.clang-format; `make format` fixes);
#   2. clang-tidy on src/ with the checks in .clang-tidy, through the build's compile_commands.json;
#   3. ruff (ruff.toml: its default rules) on the Python tools and tests.
# Usage: scripts/lint.sh [BUILD_DIR] [JOBS]. Full logs: BUILD_DIR/lint-*.log.
set -uo pipefail
BUILD=${1:-build}
JOBS=${2:-$(nproc)}
cd "$(dirname "$0")/.."

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "lint: $BUILD is not configured: configure first (make build)" >&2
  exit 1
fi
failed=()

mapfile -t cxx < <(git ls-files '*.cpp' '*.h')
echo "lint: clang-format on ${#cxx[@]} files"
if ! clang-format --dry-run -Werror "${cxx[@]}" > "$BUILD/lint-clang-format.log" 2>&1; then
  grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' "$BUILD/lint-clang-format.log" | cut -d: -f1 | sort | uniq -c >&2
  echo "lint: clang-format: the files above are not formatted (run make format)" >&2
  failed+=(clang-format)
fi

echo "lint: clang-tidy on src/"
# compile_commands.json holds g++ flags that clang does not know (-Wno-stringop-overflow, ...).
# src/quant/dispatch.cpp is left out: clang 14 rejects __builtin_cpu_supports("f16c"), which g++
# accepts (the CPU check the whole SIMD dispatch rests on).
if ! run-clang-tidy -quiet -p "$BUILD" -j "$JOBS" -extra-arg=-Wno-unknown-warning-option \
    "$PWD/src/(?!quant/dispatch\.cpp).*\.cpp\$" > "$BUILD/lint-clang-tidy.log" 2>&1; then
  sed 's/\x1b\[[0-9;]*m//g' "$BUILD/lint-clang-tidy.log" | grep -E ': (warning|error): ' | sort -u >&2
  echo "lint: clang-tidy found the problems above" >&2
  failed+=(clang-tidy)
fi

echo "lint: ruff"
if ! .venv/bin/ruff check --quiet . >&2; then
  failed+=(ruff)
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "lint: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "lint: ok"
