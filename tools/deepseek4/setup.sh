#!/usr/bin/env bash
# Creates the reference venv for tools/deepseek4/make_fixtures.py outside the repo.
# Usage: bash tools/deepseek4/setup.sh [VENV_DIR]   (default /root/venv-ref). Needs PyPI only.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${1:-/root/venv-ref}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
"$VENV/bin/python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
