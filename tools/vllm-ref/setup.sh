#!/usr/bin/env bash
# Makes ~/.cache/mla/vllm-ref/venv: PyPI vllm (pinned) without its dependencies, plus the light
# packages its parser modules import (requirements.txt). torch is not installed: vllm_stubs.py
# stands in for it (its version metadata is written so vLLM's version checks pass).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VLLM_VERSION=0.33.0
root="${MLA_VLLM_REF_DIR:-$HOME/.cache/mla/vllm-ref}"
venv="$root/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "vllm==$VLLM_VERSION"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/requirements.txt"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$site/torch-2.14.0.dist-info"
printf 'Metadata-Version: 2.1\nName: torch\nVersion: 2.14.0\n' > "$site/torch-2.14.0.dist-info/METADATA"
echo "$venv"
