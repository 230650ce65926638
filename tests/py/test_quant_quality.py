"""Quantizer accuracy against llama.cpp's: per tensor type, the round-trip RMSE of `mla gguf
quant-roundtrip` on seeded Gaussian and Student-t (3 degrees of freedom, heavy-tailed) data must be
within a stated factor of the RMSE of llama.cpp's own quantizer on the same data
(tests/fixtures/quant/llama-rmse.json, made by tools/quant-compare/make_rmse_fixture.py).

The types whose bytes equal llama-quantize's (test_quantize_vs_llama.py) must match its RMSE to
rounding. The lattice i-quants use mla.cpp's own search; llama.cpp's reference for them is run
with an importance matrix of ones.
"""
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla

FIX = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "quant" / "llama-rmse.json").read_text())
ROWS, COLS, SEED = FIX["rows"], FIX["cols"], FIX["seed"]

# mla RMSE / llama.cpp RMSE may be at most this; 1.0001 for the types written byte for byte alike.
EXACT = 1.0001
FACTOR = {"Q2_K": EXACT, "Q3_K": EXACT, "Q4_K": EXACT, "Q5_K": EXACT, "Q6_K": EXACT, "Q4_0": EXACT, "Q5_0": EXACT,
          "Q5_1": EXACT, "Q8_0": EXACT, "IQ4_NL": EXACT, "IQ4_XS": EXACT, "MXFP4": EXACT,
          "IQ2_XXS": 1.05, "IQ2_XS": 1.05, "IQ2_S": 1.05, "IQ3_XXS": 1.05, "IQ3_S": 1.05, "IQ1_S": 1.05,
          "IQ1_M": 1.05}


def make_data() -> dict:
    """The arrays tools/quant-compare/make_rmse_fixture.py quantized with llama.cpp."""
    rng = np.random.default_rng(SEED)
    return {"gaussian": rng.standard_normal((ROWS, COLS)).astype(np.float32),
            "student-t3": rng.standard_t(3, (ROWS, COLS)).astype(np.float32)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = {}
    for name, x in make_data().items():
        path = tmp_path_factory.mktemp("quality") / f"{name}.f32"
        x.astype("<f4").tofile(path)
        out[name] = (x, path)
    return out


@pytest.mark.parametrize("dname", sorted(FIX["rmse"]))
@pytest.mark.parametrize("qtype", sorted(FACTOR))
def test_rmse_within_factor_of_llama_cpp(mla_bin, data, tmp_path, dname, qtype):
    x, src = data[dname]
    out = tmp_path / "out.f32"
    run_mla(mla_bin, "gguf", "quant-roundtrip", str(src), "--type", qtype, "--cols", str(COLS), "-o", str(out))
    y = np.fromfile(out, dtype="<f4").astype(np.float64)
    ours = float(np.sqrt(np.mean((x.ravel().astype(np.float64) - y) ** 2)))
    ref = FIX["rmse"][dname][qtype]
    assert ours <= FACTOR[qtype] * ref, f"{qtype} on {dname}: RMSE {ours:.6f} vs llama.cpp {ref:.6f} " \
                                        f"(ratio {ours / ref:.4f}, allowed {FACTOR[qtype]})"
