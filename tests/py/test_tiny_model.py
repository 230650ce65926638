"""The embedded default model (models/) against what transformers computed for the same weights.

Fixtures (tests/fixtures/tiny/, written by tools/train-tiny/make_model.sh from the float32 HF
checkpoint the GGUFs were converted from):
  golden.json     per prompt: BOS + prompt ids, 32 greedy tokens from transformers (full
                  recompute each step), and each step's top-2 logit margin;
  reference.json  transformers' float32 perplexity on the first chunks of heldout-test.txt;
  heldout-test.txt the held-out test split (Python 3.11 docs text, PSF licence; models/MODEL_CARD.md).

Golden rules (quantization moves logits a little, so a near-tie may flip; MARGIN is the smallest
reference top-1/top-2 logit gap at which a flip counts as a bug):
  - greedy: mla.cpp's temperature-0 continuation equals transformers' up to its first difference,
    and that difference may only come at a step whose reference margin is below MARGIN;
  - teacher-forced: on transformers' own sequence (prompt + continuation), mla.cpp's top-1 at every
    step whose reference margin is at least MARGIN is transformers' token (one bad step cannot
    hide the rest, as it can after a greedy divergence);
  - at least MIN_COMPARED tokens must be compared over all prompts.
"""

import json

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
                                 str(len(case["continuation_ids"])), "--ignore-eos", "-t", "2", "--json").stdout)
        got, want, margins = out["continuation"], case["continuation_ids"], case["top2_margins"]
        assert len(got) == len(want), f"{quant} {case['name']}: {len(got)} tokens, asked for {len(want)}"
        k = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), len(want))
        if k < len(want):
            assert margins[k] < MARGIN[quant], (
                f"{quant} {case['name']}: greedy token {k} is {got[k]}, transformers gave {want[k]} with a clear "
                f"margin {margins[k]:.3f}; got {got[:k + 1]}, want {want[:k + 1]}")
        compared += k
    assert compared >= MIN_COMPARED[quant], f"only {compared} greedy tokens agreed before a near-tie"


@pytest.mark.parametrize("quant", ["q8_0", "q4_k"])
def test_teacher_forced_top1_matches_transformers(mla_bin, quant, tmp_path):
    import numpy as np
    compared = 0
    for case in golden()["cases"]:
        prompt, want, margins = case["prompt_ids"], case["continuation_ids"], case["top2_margins"]
        seq = prompt + want[:-1]
        dump = tmp_path / f"{case['name']}-{quant}.f32"
        run_mla(mla_bin, "run", "-m", str(MODELS[quant]), "--tokens", ",".join(map(str, seq)), "-n", "1",
                "-t", "2", "--dump-logits", str(dump))
        logits = np.fromfile(dump, dtype=np.float32)
        assert logits.size % len(seq) == 0, f"{case['name']}: {logits.size} logits for {len(seq)} positions"
        logits = logits.reshape(len(seq), -1)
        for k, w in enumerate(want):
            if margins[k] < MARGIN[quant]:
                continue
            top = int(logits[len(prompt) - 1 + k].argmax())
            assert top == w, (f"{quant} {case['name']}: at continuation step {k} (teacher-forced) top-1 is {top}, "
                              f"transformers gave {w} with margin {margins[k]:.3f}")
            compared += 1
    assert compared >= MIN_COMPARED[quant], f"only {compared} steps were clear enough to compare"


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


def test_served_model_answers_like_transformers():
    """`mla serve` on the default model (as `make serve` runs it) through the official openai
    client: the chat prompt is rendered and tokenized as transformers does it (template + BOS),
    and temperature-0 completions reproduce transformers' greedy continuations."""
    import openai
    import requests

    from server_util import MODEL_NAME, Server

    cases = {c["name"]: c for c in golden()["cases"]}
    server = Server(MODELS["q8_0"])
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        chat = cases["chat"]
        messages = [{"role": "user", "content": "What is a dictionary?"}]
        tok = requests.post(server.url + "/tokenize", json={"model": MODEL_NAME, "messages": messages,
                                                             "add_generation_prompt": True}, timeout=30).json()
        assert tok["tokens"] == chat["prompt_ids"], "chat prompt tokenized differently from transformers"
        n = len(chat["continuation_ids"])
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=n, temperature=0)
        assert r.usage.prompt_tokens == len(chat["prompt_ids"])
        assert r.choices[0].message.content == chat["continuation_text"]
        hello = cases["hello"]
        r = client.completions.create(model=MODEL_NAME, prompt=hello["prompt_text"],
                                      max_tokens=len(hello["continuation_ids"]), temperature=0)
        assert r.choices[0].text == hello["continuation_text"]
        assert r.choices[0].finish_reason == "length"
    finally:
        server.stop()
