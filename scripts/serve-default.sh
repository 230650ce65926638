#!/usr/bin/env bash
# Serves the embedded default model (models/tiny-q8_0.gguf; see models/MODEL_CARD.md), or $MLA_MODEL.
# Until `mla serve` exists this says so and stops.
set -euo pipefail
MLA=$1 HOST=$2 PORT=$3
MODEL="${MLA_MODEL:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/models/tiny-q8_0.gguf}"
if ! "$MLA" serve --help >/dev/null 2>&1; then
  echo "make serve: the HTTP server (issue #6) is not built yet; try: $MLA run -m $MODEL -p 'Hello' -n 32" >&2
  exit 2
fi
exec "$MLA" serve -m "$MODEL" --host "$HOST" --port "$PORT"
