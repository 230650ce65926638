#!/usr/bin/env bash
# Sets up the external reference for the forward pass:
#   tools/reference/.venv            torch + transformers + safetensors + tokenizers (pinned, CPU use)
#   $REFERENCE_CACHE_DIR/llama-cpp-python-<ver>/   the llama-cpp-python sdist, unpacked OUTSIDE the repo;
#       it carries vendor/llama.cpp/convert_hf_to_gguf.py and vendor/llama.cpp/gguf-py, which
#       make_fixtures.py runs with that gguf-py on PYTHONPATH.
# Usage: bash tools/reference/setup.sh [--tf4]
#   --tf4  also create tools/reference/.venv-tf4 (transformers 4.57.6 stack) for crosscheck_tf4.py.
# Needs network access to PyPI only. Re-running is cheap: pip skips what is installed, the sdist is
# downloaded once. The torch wheel from PyPI is the CUDA build (~5 GB with its CUDA runtime wheels).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"

want_tf4=0
for arg in "$@"; do
    case "$arg" in
        --tf4) want_tf4=1 ;;
        *) echo "setup.sh: unknown argument '$arg' (expected: --tf4)" >&2; exit 2 ;;
    esac
done

make_venv() {  # make_venv DIR REQUIREMENTS [CONSTRAINTS]
    local dir="$1" req="$2" lock="${3:-}"
    if [ ! -x "$dir/bin/python" ]; then
        "$PYTHON" -m venv "$dir"
    fi
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip==25.2
    if [ -n "$lock" ] && [ -f "$lock" ]; then
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" -c "$lock"
    else
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    fi
}

echo "setup.sh: python: $("$PYTHON" --version 2>&1)"
make_venv "$HERE/.venv" "$HERE/requirements.txt" "$HERE/requirements.lock"
if [ ! -f "$HERE/requirements.lock" ]; then
    "$HERE/.venv/bin/python" -m pip freeze --disable-pip-version-check > "$HERE/requirements.lock"
    echo "setup.sh: wrote $HERE/requirements.lock"
fi
if [ "$want_tf4" = 1 ]; then
    make_venv "$HERE/.venv-tf4" "$HERE/requirements-tf4.txt"
fi

SDIST_DIR="$(bash "$HERE/../llama-cpp/fetch-sdist.sh" "$HERE/.venv/bin/python")"
echo "setup.sh: converter: $SDIST_DIR/vendor/llama.cpp/convert_hf_to_gguf.py"
echo "setup.sh: done; run: $HERE/.venv/bin/python $HERE/make_fixtures.py"
