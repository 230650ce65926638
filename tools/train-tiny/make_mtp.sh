#!/usr/bin/env bash
# The MTP (nextn) layer of the committed tiny model, after make_model.sh (which writes trunk-only
# files):
#   models/tiny-q8_0.gguf (trunk) --train_mtp.py--> runs/RUN/mtp.pt      (trunk frozen)
#   runs/RUN/mtp.pt --export_mtp.py--> models/tiny-q8_0.gguf, models/tiny-q4_k.gguf with blk.3 nextn
#       (trunk tensors and keys byte-identical; checked against $FIXTURES/trunk.json)
#   models/tiny-q8_0.gguf --mtp_reference.py fixture--> $FIXTURES/draft_logits.json, case*.f32
#   models/tiny-*.gguf --mtp_reference.py eval--> runs/RUN/mtp-eval-*.json (the model card's figures)
#   models/tiny-*.gguf --compare_mtp_llama.py--> runs/RUN/compare-llama-*.json (llama-server draft-mtp)
# Usage: bash tools/train-tiny/make_mtp.sh [RUN] [MLA_BIN]
# Env: STEPS (1100), LR (2e-3), MODELS (REPO/models), FIXTURES (REPO/tests/fixtures/tiny-mtp).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
RUN="${1:-mtp}"
MLA="${2:-$REPO/build/mla}"
MODELS="${MODELS:-$REPO/models}"
FIXTURES="${FIXTURES:-$REPO/tests/fixtures/tiny-mtp}"
PY="$HERE/.venv/bin/python"

cd "$HERE"
mkdir -p "$FIXTURES"
"$PY" mtp_reference.py tokenizer "$MLA"
# The trunk's hashes, from the trunk-only files, once (the test checks the shipped files against them).
[ -f "$FIXTURES/trunk.json" ] || "$PY" export_mtp.py --models "$MODELS" --record-trunk "$FIXTURES/trunk.json"
"$PY" train_mtp.py --run "$RUN" --trunk "$MODELS/tiny-q8_0.gguf" --steps "${STEPS:-1100}" --lr "${LR:-2e-3}" \
    --eval-every 100
"$PY" export_mtp.py --run "$RUN" --mla "$MLA" --models "$MODELS"
"$PY" mtp_reference.py fixture "$MODELS/tiny-q8_0.gguf" "$FIXTURES"
for q in q8_0 q4_k; do
    "$PY" mtp_reference.py eval "$MODELS/tiny-$q.gguf" --json "runs/$RUN/mtp-eval-$q.json"
done
# llama.cpp's own MTP drafting on the same files, when its llama-server is built
# (tools/llama-cpp/build-perplexity.sh)
SERVER="${REFERENCE_CACHE_DIR:-$HOME/.cache/mla}/llama.cpp-0.3.36-build/bin/llama-server"
if [ -x "$SERVER" ]; then
    "$PY" compare_mtp_llama.py --server "$SERVER" --json "runs/$RUN/compare-llama-q8_0.json"
    "$PY" compare_mtp_llama.py --server "$SERVER" --model "$MODELS/tiny-q4_k.gguf" \
        --json "runs/$RUN/compare-llama-q4_k.json"
fi
echo "make_mtp.sh: done"
