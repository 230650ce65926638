"""Writes tests/fixtures/quant/: a small deepseek2 model in F16 and, for each file type that both
llama-quantize and `mla gguf quantize` offer, the per-tensor type and SHA-256 of the bytes that
llama.cpp's llama-quantize writes (no imatrix). tests/py/test_quantize_vs_llama.py checks
`mla gguf quantize` against them.

    .venv/bin/python tools/llama-cpp/make_quant_fixtures.py [--llama-quantize PATH] [--mla build/mla]

llama-quantize is built by build-perplexity.sh (llama-cpp-python 0.3.36 sdist). The input model is
made once with `mla gguf synth` (random weights, seed 5) and then kept: only the outputs come from
llama.cpp.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gguf import GGUFReader

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "quant"
DEFAULT_LLAMA_QUANTIZE = Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-quantize"
# Rows of 256 so the K-quants apply; one dense and one MoE layer; vocabulary 256.
SYNTH = ["--type", "f16", "--seed", "5", "--n-layer", "2", "--n-layer-dense-lead", "1", "--n-embd", "256",
         "--n-ff", "256", "--n-head", "2", "--q-lora-rank", "256", "--kv-lora-rank", "256", "--qk-nope", "32",
         "--qk-rope", "32", "--v-head", "32", "--n-expert", "2", "--n-expert-used", "1", "--n-expert-shared", "1",
         "--n-ff-exp", "256", "--n-vocab", "256"]
TYPES = ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]


def tensor_digests(path: Path) -> dict:
    return {t.name: [t.tensor_type.name, hashlib.sha256(np.asarray(t.data).view(np.uint8).tobytes()).hexdigest()]
            for t in GGUFReader(path).tensors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-quantize", default=str(DEFAULT_LLAMA_QUANTIZE))
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    model = OUT / "small-f16.gguf"
    if not model.exists():
        subprocess.run([args.mla, "gguf", "synth", "-o", str(model), *SYNTH], check=True, stdout=subprocess.DEVNULL)
    ref = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in TYPES:
            out = Path(tmp) / f"{t}.gguf"
            subprocess.run([args.llama_quantize, str(model), str(out), t, "1"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ref[t] = tensor_digests(out)
    (OUT / "llama-quantize.json").write_text(json.dumps(
        {"source": "llama-quantize from the llama-cpp-python 0.3.36 sdist (no imatrix), on small-f16.gguf",
         "types": ref}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
