#!/usr/bin/env python3
"""Writes tests/fixtures/quant/llama-rmse.json: the round-trip RMSE of llama.cpp's own quantizer
(ggml_quantize_chunk, as llama-quantize calls it) per tensor type, on the seeded data that
tests/py/test_quant_quality.py regenerates, so mla.cpp's quantizers are held to an external
reference. The lattice i-quants get an importance matrix of ones (llama.cpp requires one for
IQ1_S, IQ2_XXS and IQ2_XS; giving it to all of them keeps their weighting alike); the other types
get none, as llama-quantize without --imatrix.

    .venv/bin/python tools/quant-compare/make_rmse_fixture.py [--version 0.3.36]

ggml is built from the llama-cpp-python sdist by compare.py's build_ggml (outside the repository).
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import build_ggml, rmse, roundtrip

REPO = HERE.parents[1]
OUT = REPO / "tests" / "fixtures" / "quant" / "llama-rmse.json"
ROWS, COLS, SEED = 64, 4096, 11
# ggml's names; the second field: pass an importance matrix of ones.
TYPES = [("q2_K", False), ("q3_K", False), ("q4_K", False), ("q5_K", False), ("q6_K", False), ("q4_0", False),
         ("q5_0", False), ("q5_1", False), ("q8_0", False), ("iq4_nl", False), ("iq4_xs", False), ("mxfp4", False),
         ("iq2_xxs", True), ("iq2_xs", True), ("iq2_s", True), ("iq3_xxs", True), ("iq3_s", True), ("iq1_s", True),
         ("iq1_m", True)]


def make_data() -> dict:
    """The test data; tests/py/test_quant_quality.py builds the same arrays."""
    rng = np.random.default_rng(SEED)
    return {"gaussian": rng.standard_normal((ROWS, COLS)).astype(np.float32),
            "student-t3": rng.standard_t(3, (ROWS, COLS)).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--version", default="0.3.36", help="llama-cpp-python version on PyPI")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "mla" / "quant-compare"))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    cache = Path(args.cache)
    ggml = build_ggml(cache, args.version, args.jobs)
    work = cache / "work"
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for dname, x in make_data().items():
        out[dname] = {}
        for t, ones in TYPES:
            extra = ["ones"] if ones else []
            y = roundtrip(lambda s, o, t=t, extra=extra: [ggml, s, o, COLS, t, *extra], x, work, f"{dname}.{t}")
            out[dname][t.upper()] = round(rmse(x.ravel(), y), 7)
    OUT.write_text(json.dumps({
        "source": f"ggml_quantize_chunk from the llama-cpp-python {args.version} sdist "
                  "(tools/quant-compare/make_rmse_fixture.py); lattice i-quants with an importance matrix of ones",
        "rows": ROWS, "cols": COLS, "seed": SEED, "rmse": out}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
