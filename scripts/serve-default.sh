#!/usr/bin/env bash
# Serves the embedded default model. Until `mla serve` exists this says so and stops.
set -euo pipefail
MLA=$1 HOST=$2 PORT=$3
if ! "$MLA" serve --help >/dev/null 2>&1; then
  echo "make serve: the HTTP server (issue #6) is not built yet; 'mla version' and 'mla gguf inspect' work today." >&2
  exit 2
fi
exec "$MLA" serve --host "$HOST" --port "$PORT"
