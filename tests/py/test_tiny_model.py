"""The embedded default model (models/) against what transformers computed for the same weights.

Fixtures (tests/fixtures/tiny/, written by tools/train-tiny/make_model.sh from the float32 HF
checkpoint the GGUFs were converted from):
  golden.json     per prompt: BOS + prompt ids, 32 greedy tokens from transformers (full
                  recompute each step), and each step's top-2 logit margin;
  reference.json  transformers' float32 perplexity on the first chunks of heldout-test.txt;
  heldout-test.txt the held-out test split (Python 3.11 docs text, PSF licence; models/MODEL_CARD.md).

Golden rule: the quantized model must reproduce transformers' greedy tokens exactly up to the first
step whose reference top-2 margin is below MARGIN (a near-tie that quantization noise may flip; the
comparison stops there), and at least MIN_COMPARED tokens must be compared over all prompts.
"""

import json
from pathlib import Path

import pytest

from conftest import REPO, run_mla

FIX = REPO / "tests" / "fixtures" / "tiny"
MODELS = {"q8_0": REPO / "models" / "tiny-q8_0.gguf", "q4_k": REPO / "models" / "tiny-q4_k.gguf"}
MARGIN = {"q8_0": 0.25, "q4_k": 1.0}
MIN_COMPARED = {"q8_0": 64, "q4_k": 24}
# Perplexity on the first PPL_CHUNKS chunks: at most this far above transformers' float32 value.
PPL_CHUNKS = 4
PPL_TOL = {"q8_0": 0.005, "q4_k": 0.03}


def golden():
    return json.loads((FIX / "golden.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("quant", ["q8_0", "q4_k"])
def test_greedy_continuation_matches_transformers(mla_bin, quant):
    compared = 0
    for case in golden()["cases"]:
        ids = ",".join(map(str, case["prompt_ids"]))
        out = json.loads(run_mla(mla_bin, "run", "-m", str(MODELS[quant]), "--tokens", ids, "-n",
                                 str(len(case["continuation_ids"])), "-t", "2", "--json").stdout)
        got, want = out["continuation"], case["continuation_ids"]
        for k, (g, w) in enumerate(zip(got, want)):
            if case["top2_margins"][k] < MARGIN[quant]:
                break
            assert g == w, (f"{quant} {case['name']}: token {k} is {g}, transformers gave {w} "
                            f"(margin {case['top2_margins'][k]}); got {got[:k + 1]}, want {want[:k + 1]}")
            compared += 1
    assert compared >= MIN_COMPARED[quant], f"only {compared} tokens were clear enough to compare"


def test_prompt_text_tokenizes_as_transformers(mla_bin):
    for case in golden()["cases"]:
        out = run_mla(mla_bin, "run", "-m", str(MODELS["q8_0"]), "-p", case["prompt_text"], "-n", "1",
                      "-t", "2", "--json").stdout
        assert json.loads(out)["prompt"] == case["prompt_ids"], case["name"]


@pytest.mark.parametrize("quant", ["q8_0", "q4_k"])
def test_short_perplexity_against_transformers(mla_bin, quant):
    ref = json.loads((FIX / "reference.json").read_text())["perplexity_short"]
    out = json.loads(run_mla(mla_bin, "perplexity", "-m", str(MODELS[quant]), "-f", str(FIX / "heldout-test.txt"),
                             "-c", str(ref["n_ctx"]), "--chunks", str(ref["chunks"]), "-t", "2", "--json").stdout)
    assert out["chunks"] == ref["chunks"] and out["scored_tokens"] == ref["scored_tokens"]
    assert out["n_tokens"] == ref["n_tokens"], "mla.cpp and transformers tokenized the file differently"
    rel = out["ppl"] / ref["ppl"] - 1
    assert -PPL_TOL[quant] <= rel <= PPL_TOL[quant], f"{quant}: PPL {out['ppl']:.4f} vs transformers {ref['ppl']:.4f}"


def test_perplexity_rejects_short_text(mla_bin, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Only a few words.")
    p = run_mla(mla_bin, "perplexity", "-m", str(MODELS["q8_0"]), "-f", str(short), check=False)
    assert p.returncode != 0 and "needs at least" in p.stderr
