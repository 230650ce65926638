#!/usr/bin/env bash
# Serves the default model (make serve). Until the trained default model is embedded in models/,
# that is a random-weight synthetic deepseek2 model (models/synth/default.json) with the
# DeepSeek-V2 vocabulary and a chat template (models/synth/chat_template.jinja). It is generated
# on first run and cached in models/.cache/ (ignored by git); a newer config or template
# regenerates it. Its text is noise; everything around it (API, engine, MLA paths) is real.
set -euo pipefail
MLA=$1 HOST=$2 PORT=$3
cd "$(dirname "$0")/.."
VOCAB=../shared/data/vocab/ggml-vocab-deepseek-llm.gguf
CONFIG=models/synth/default.json
TEMPLATE=models/synth/chat_template.jinja
MODEL=models/.cache/deepseek2-synth.gguf
if [ ! -f "$MODEL" ] || [ "$CONFIG" -nt "$MODEL" ] || [ "$TEMPLATE" -nt "$MODEL" ]; then
  if [ ! -f "$VOCAB" ]; then
    echo "make serve: the DeepSeek-V2 vocabulary $VOCAB is missing (expected ../shared next to the repository)" >&2
    exit 2
  fi
  mkdir -p models/.cache
  echo "make serve: generating the synthetic default model $MODEL (first run only)" >&2
  "$MLA" gguf synth -o "$MODEL.tmp" --config "$CONFIG" --vocab "$VOCAB" --chat-template "$TEMPLATE" >&2
  mv "$MODEL.tmp" "$MODEL"
fi
exec "$MLA" serve -m "$MODEL" --host "$HOST" --port "$PORT" --served-model-name deepseek2-synth
