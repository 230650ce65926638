"""Writes tests/fixtures/quant/: a small deepseek2 model in F16 and, for each file type that both
llama-quantize and `mla gguf quantize` offer, the per-tensor type and SHA-256 of the bytes that
llama.cpp's llama-quantize writes (no imatrix). For the file types llama-quantize will not write
without an importance matrix (the lattice i-quants), only the per-tensor types, from its --dry-run.
The same for a few --tensor-type override sets. tests/py/test_quantize_vs_llama.py checks
`mla gguf quantize` against them.

    PYTHONPATH=SDIST/vendor/llama.cpp/gguf-py \
        .venv/bin/python tools/llama-cpp/make_quant_fixtures.py [--llama-quantize PATH] [--mla build/mla]

(the sdist's gguf-py, printed by fetch-sdist.sh: the pinned one predates MXFP4 and cannot read the
MXFP4_MOE output).

llama-quantize is built by build-perplexity.sh (llama-cpp-python 0.3.36 sdist). The input model is
made once with `mla gguf synth` (random weights, seed 5) and then kept: only the outputs come from
llama.cpp.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
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
TYPES = ["Q8_0", "Q4_0", "Q5_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
         "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE"]
# Per-tensor types only (--dry-run): these need an importance matrix to be written by llama-quantize.
PLAN_TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M"]
# --tensor-type sets: (name, file type, overrides, write the file?). The written one uses only types
# llama-quantize writes without an importance matrix, so its bytes are compared too.
OVERRIDES = [
    ("ud_q2_k_xl", "Q4_K_M", ["ffn_(gate|up)_exps=iq2_xxs", "ffn_down_exps=iq3_xxs", "shexp=q5_k",
                              "attn_(k|v)_b=q8_0"], False),
    ("mixed_k", "Q4_K_M", ["ffn_down_exps=q3_k", "ffn_(gate|up)_exps=q2_k", "ffn_down=q6_k", "attn_k_b=q8_0",
                           "attn_output=iq4_xs"], True),
]


def tensor_digests(path: Path) -> dict:
    return {t.name: [t.tensor_type.name, hashlib.sha256(np.asarray(t.data).view(np.uint8).tobytes()).hexdigest()]
            for t in GGUFReader(path).tensors}


def dry_run_types(llama_quantize: str, model: Path, ftype: str, extra: list) -> dict:
    """Per-tensor types from llama-quantize's --dry-run log ("name - [shape], type = f16, size = ...
    (q4_K)"; no parenthesis: the type is kept)."""
    p = subprocess.run([llama_quantize, "--dry-run", *extra, str(model), ftype, "1"], check=True,
                       capture_output=True, text=True)
    out = {}
    for line in (p.stdout + p.stderr).splitlines():
        m = re.search(r"\]\s+(\S+)\s+- \[.*\], type =\s+(\S+), size =.*?(?:\((\S+)\))?\s*$", line)
        if m:
            out[m.group(1)] = (m.group(3) or m.group(2)).upper()
    if not out:
        raise SystemExit(f"no tensor lines in llama-quantize --dry-run output for {ftype}")
    return out


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
        plans = {t: dry_run_types(args.llama_quantize, model, t, []) for t in PLAN_TYPES}
        overrides = {}
        for name, ftype, specs, write in OVERRIDES:
            extra = [a for spec in specs for a in ("--tensor-type", spec)]
            entry = {"file_type": ftype, "tensor_types": specs}
            if write:
                out = Path(tmp) / f"{name}.gguf"
                subprocess.run([args.llama_quantize, *extra, str(model), str(out), ftype, "1"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                entry["tensors"] = tensor_digests(out)
            else:
                entry["plan"] = dry_run_types(args.llama_quantize, model, ftype, extra)
            overrides[name] = entry
    (OUT / "llama-quantize.json").write_text(json.dumps(
        {"source": "llama-quantize from the llama-cpp-python 0.3.36 sdist (no imatrix), on small-f16.gguf",
         "types": ref, "plans": plans, "overrides": overrides}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
