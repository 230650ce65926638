#!/usr/bin/env bash
# From a training run to the committed model and its test fixtures:
#   runs/RUN/ckpt.pt --export.py--> runs/RUN/export/{hf/, model-f16.gguf}   (checks HF == training module)
#   model-f16.gguf --mla gguf quantize--> $MODELS/tiny-q8_0.gguf, $MODELS/tiny-q4_k.gguf (Q4_K_M rules)
#   hf/ --reference.py--> $FIXTURES/golden.json (greedy continuations), $FIXTURES/reference.json
#       (transformers float32 perplexity: the short run the tests use and the whole held-out split)
#   data/test.txt --> $FIXTURES/heldout-test.txt
# The files it writes have no MTP layer: tools/train-tiny/make_mtp.sh then trains one on the frozen
# trunk and adds it (blk.3 nextn) without changing the trunk's bytes.
# Usage: bash tools/train-tiny/make_model.sh [RUN] [MLA_BIN]
# Env: MODELS (default REPO/models), FIXTURES (default REPO/tests/fixtures/tiny), CTX (256),
#      SHORT_CHUNKS (4).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
RUN="${1:-main}"
MLA="${2:-$REPO/build/mla}"
MODELS="${MODELS:-$REPO/models}"
FIXTURES="${FIXTURES:-$REPO/tests/fixtures/tiny}"
CTX="${CTX:-256}"
SHORT_CHUNKS="${SHORT_CHUNKS:-4}"
PY="$HERE/.venv/bin/python"
EXPORT="$HERE/runs/$RUN/export"

cd "$HERE"
"$PY" export.py --run "$RUN" --out "$EXPORT"
mkdir -p "$MODELS" "$FIXTURES"
"$MLA" gguf quantize "$EXPORT/model-f16.gguf" "$MODELS/tiny-q8_0.gguf" q8_0 > "$EXPORT/quantize-q8_0.txt"
"$MLA" gguf quantize "$EXPORT/model-f16.gguf" "$MODELS/tiny-q4_k.gguf" q4_k_m > "$EXPORT/quantize-q4_k.txt"
cp data/test.txt "$FIXTURES/heldout-test.txt"
"$PY" reference.py "$EXPORT/hf" golden "$FIXTURES/golden.json"
"$PY" reference.py "$EXPORT/hf" perplexity "$FIXTURES/heldout-test.txt" -c "$CTX" --chunks "$SHORT_CHUNKS" --json > "$EXPORT/ppl-short.json"
"$PY" reference.py "$EXPORT/hf" perplexity "$FIXTURES/heldout-test.txt" -c "$CTX" --json > "$EXPORT/ppl-full.json"
"$PY" - "$EXPORT" "$FIXTURES/reference.json" <<'PYEOF'
import json, sys
from pathlib import Path
exp = Path(sys.argv[1])
check = json.loads((exp / "export-check.json").read_text())
out = {"step": check["step"], "export_check": check,
       "perplexity_short": json.loads((exp / "ppl-short.json").read_text()),
       "perplexity_full": json.loads((exp / "ppl-full.json").read_text())}
for k in ("perplexity_short", "perplexity_full"):
    out[k].pop("running_ppl", None)
Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
PYEOF
ls -l "$MODELS"/tiny-*.gguf
echo "make_model.sh: done (step $(python3 -c "import json;print(json.load(open('$EXPORT/export-check.json'))['step'])"))"
