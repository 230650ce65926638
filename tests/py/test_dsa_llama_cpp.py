"""mla.cpp vs llama.cpp on the converted glm-dsa / deepseek32 fixtures (tests/fixtures/dsa-reference):
llama.cpp's outputs were recorded by tools/reference/llama_cpp_dsa.py (commands in
tests/fixtures/dsa-reference/llama-cpp/results.json; llama.cpp 0c1e570 from the llama-cpp-python
0.3.36 sdist, F32 caches, the indexer and top-k on).
- greedy: on llama.cpp's prompt ids, mla.cpp's 64-token temperature-0 continuation equals
  llama.cpp's;
- perplexity: `mla perplexity` on the same text, context and chunks is within 0.5% of llama-perplexity.
"""
import json
import os
from pathlib import Path

import pytest
from conftest import REPO, run_mla

FIX = Path(os.environ.get("MLA_DSA_REFERENCE_DIR", REPO / "tests" / "fixtures" / "dsa-reference"))
RESULTS = FIX / "llama-cpp" / "results.json"
PPL_REL_TOL = 0.005


def results():
    return json.loads(RESULTS.read_text())


MODELS = sorted(results()["models"]) if RESULTS.is_file() else []


def test_results_present():
    assert {"glm-dsa-tiny", "deepseek32-tiny"} <= set(MODELS), f"llama.cpp results missing: {RESULTS}"
    # the recorded continuations are also transformers' (its float64 restatement, gguf_forward.py), so
    # an implementation matching transformers can match them
    assert all(m["greedy"]["numpy_forward_continuation_equal"] for m in results()["models"].values())


@pytest.mark.parametrize("model", MODELS)
def test_greedy_matches_llama_cpp(mla_bin, model):
    g = results()["models"][model]["greedy"]
    out = json.loads(run_mla(mla_bin, "run", "-m", str(FIX / model / "model-f32.gguf"),
                             "--tokens", ",".join(map(str, g["prompt_ids"])), "-n", str(len(g["continuation_ids"])),
                             "--kv-cache-dtype", "f32", "--ignore-eos", "--threads", "2", "--json").stdout)
    got, want = out["continuation"], g["continuation_ids"]
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert got == want, f"{model}: continuation differs from llama.cpp's from step {first}"


@pytest.mark.parametrize("model", MODELS)
def test_perplexity_matches_llama_cpp(mla_bin, model):
    p = results()["models"][model]["perplexity"]
    out = json.loads(run_mla(mla_bin, "perplexity", "-m", str(FIX / model / "model-f32.gguf"), "-f",
                             str(REPO / p["text"]), "-c", str(p["n_ctx"]), "--chunks", str(p["chunks"]),
                             "-t", "2", "--json").stdout)
    assert out["chunks"] == p["chunks"]
    rel = out["ppl"] / p["ppl"] - 1
    assert abs(rel) <= PPL_REL_TOL, f"{model}: PPL {out['ppl']:.4f} vs llama.cpp {p['ppl']:.4f} ({rel:+.2%})"
