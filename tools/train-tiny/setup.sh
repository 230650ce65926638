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

SDIST_DIR="$(bash "$HERE/../llama-cpp/fetch-sdist.sh" "$HERE/.venv/bin/python")"

cd "$HERE"
.venv/bin/python prepare_corpus.py
.venv/bin/python train_tokenizer.py
echo "setup.sh: done; train with: cd $HERE && nohup nice -n 15 .venv/bin/python train.py --run main &"
