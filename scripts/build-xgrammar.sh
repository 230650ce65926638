#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine behind structured outputs) from its PyPI sdist
# into a cache directory OUTSIDE the repository, once, sha256-checked. Nothing of xgrammar is
# committed. CMake finds the result through MLA_XGRAMMAR_DIR (default
# ~/.cache/mla/xgrammar-0.2.8-build; it links dist/lib/libxgrammar.a and dist/include).
#   bash scripts/build-xgrammar.sh        -> prints the build directory
# Env: MLA_XGRAMMAR_CACHE (default ~/.cache/mla), JOBS (default 2).
# The sdist is fetched from its PyPI file URL rather than with `pip download --no-binary`, which
# would first build the package metadata (scikit-build-core, nanobind, tvm_ffi) for minutes.
set -euo pipefail

VERSION="0.2.8"
SHA256="8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80"  # xgrammar-0.2.8.tar.gz
URL="https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-$VERSION.tar.gz"
CACHE_DIR="${MLA_XGRAMMAR_CACHE:-$HOME/.cache/mla}"
SRC="$CACHE_DIR/xgrammar-$VERSION"
BUILD="$CACHE_DIR/xgrammar-$VERSION-build"
JOBS="${JOBS:-2}"

DIST="$BUILD/dist"  # what mla links: dist/lib/libxgrammar.a, dist/include/{xgrammar,dlpack}
if [ -f "$DIST/lib/libxgrammar.a" ] && [ -f "$DIST/include/xgrammar/xgrammar.h" ]; then
    echo "$BUILD"
    exit 0
fi

if [ ! -f "$SRC/include/xgrammar/xgrammar.h" ]; then
    mkdir -p "$CACHE_DIR"
    tmp="$(mktemp -d "$CACHE_DIR/download.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    curl -sSfL --retry 3 -o "$tmp/xgrammar-$VERSION.tar.gz" "$URL"
    echo "$SHA256  $tmp/xgrammar-$VERSION.tar.gz" | sha256sum --check --quiet
    tar -xzf "$tmp/xgrammar-$VERSION.tar.gz" -C "$tmp"
    rm -rf "$SRC"
    mv "$tmp/xgrammar-$VERSION" "$SRC"
fi

mkdir -p "$BUILD"
# xgrammar's CMakeLists reads config.cmake from the build directory before its own
# cmake/config.cmake (which turns the Python bindings on; they need tvm_ffi).
cat > "$BUILD/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
# -fno-lto: its flags add -flto=auto, which would leave GIMPLE-only objects in the archive and
# force an LTO link onto every mla binary. -Wno-error: its -Werror must not fail on newer compilers.
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" >&2
cmake --build "$BUILD" -j "$JOBS" --target xgrammar >&2
cmake --install "$BUILD" --prefix "$DIST" >&2
echo "$BUILD"
