#!/usr/bin/env bash
# Sets up everything tools/train-tiny needs:
#   python3.11-doc (Debian)          the corpus (installed with apt-get when missing and run as root)
#   tools/train-tiny/.venv            torch + transformers + tokenizers + safetensors + matplotlib,
#                                     pinned in requirements.txt / requirements.lock
#   $REFERENCE_CACHE_DIR/llama-cpp-python-<ver>/   the llama-cpp-python sdist, unpacked OUTSIDE the
#       repo (default ~/.cache/mla); it carries convert_hf_to_gguf.py + gguf-py and llama.cpp's
#       sources (tools/train-tiny/build_llama_perplexity.sh builds its perplexity tool from them).
# Then builds data/ (corpus splits + tokenizer). Usage: bash tools/train-tiny/setup.sh
# Needs network access to PyPI (and the Debian mirror when the doc package is missing). Re-running
# is cheap. The torch wheel from PyPI is the CUDA build (~5 GB with its CUDA wheels); only the CPU
# is used.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLAMA_CPP_PYTHON_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CACHE_DIR="${REFERENCE_CACHE_DIR:-$HOME/.cache/mla}"
SDIST_DIR="$CACHE_DIR/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"

if [ ! -d /usr/share/doc/python3.11/html/_sources ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y python3.11-doc
    else
        echo "setup.sh: the corpus needs python3.11-doc: sudo apt-get install python3.11-doc" >&2
        exit 1
    fi
fi

if [ ! -x "$HERE/.venv/bin/python" ]; then
    "$PYTHON" -m venv "$HERE/.venv"
fi
"$HERE/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip==25.2
"$HERE/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$HERE/requirements.txt" -c "$HERE/requirements.lock"

if [ ! -f "$SDIST_DIR/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
    mkdir -p "$CACHE_DIR"
    tmp="$(mktemp -d "$CACHE_DIR/download.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    "$HERE/.venv/bin/python" -m pip download --quiet --disable-pip-version-check \
        --no-binary :all: --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$tmp"
    tarball="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    echo "$LLAMA_CPP_PYTHON_SHA256  $tarball" | sha256sum --check --quiet
    tar -xzf "$tarball" -C "$tmp"
    rm -rf "$SDIST_DIR"
    mv "$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION" "$SDIST_DIR"
fi

cd "$HERE"
.venv/bin/python prepare_corpus.py
.venv/bin/python train_tokenizer.py
echo "setup.sh: done; train with: cd $HERE && nohup nice -n 15 .venv/bin/python train.py --run main &"
