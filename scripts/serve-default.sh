#!/usr/bin/env bash
# Serves the embedded default model (make serve): models/tiny-q8_0.gguf, the tiny DeepSeek-V3-style
# MLA-MoE model trained by tools/train-tiny (see models/MODEL_CARD.md). MLA_MODEL overrides the file.
# Usage: scripts/serve-default.sh MLA_BIN HOST PORT
set -euo pipefail
MLA=$1 HOST=$2 PORT=$3
MODEL="${MLA_MODEL:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/models/tiny-q8_0.gguf}"
if [ ! -f "$MODEL" ]; then
  echo "make serve: model file $MODEL not found (set MLA_MODEL=FILE to serve another GGUF)" >&2
  exit 2
fi
exec "$MLA" serve -m "$MODEL" --host "$HOST" --port "$PORT" --served-model-name "${MLA_SERVED_MODEL_NAME:-mla-tiny}"
