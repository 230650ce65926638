"""Prompt logprobs from `mla serve`: `echo` with `logprobs` on /v1/completions (the prompt tokens
and their logprobs lead each choice, as OpenAI's legacy API and vLLM give them; `max_tokens: 0`
scores the prompt only) and vLLM's `prompt_logprobs` field on completions and chat.

The values are checked against the engine's own all-rows scoring outside the server: `mla run
--tokens IDS --dump-logits FILE` writes the raw logits of every prompt position, and this test
takes their log-softmax with numpy. They must not change with chunked prefill, a prefix-cache
hit, other requests in the batch or the MLA path.
"""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import requests
from openai import OpenAI

from server_util import MODEL_NAME, REPO, Server, metric, mla_bin

TINY = REPO / "models" / "tiny-q8_0.gguf"
N_VOCAB = 4096
TEXT = "The for statement in Python differs a bit from what you may be used to in C or Pascal."


def engine_logprobs(tmp_path: Path, ids: list[int], path: str = "auto") -> np.ndarray:
    """log p(ids[i + 1] | ids[: i + 1]) for every i, from `mla run --dump-logits`."""
    dump = tmp_path / f"logits-{path}.f32"
    subprocess.run([mla_bin(), "run", "-m", str(TINY), "--tokens", ",".join(map(str, ids)), "-n", "1",
                    "--temp", "0", "--mla-path", path, "--dump-logits", str(dump), "--threads", "1"],
                   check=True, capture_output=True, text=True)
    rows = np.fromfile(dump, dtype=np.float32).reshape(-1, N_VOCAB)[: len(ids) - 1].astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))[:, 0]
    return rows[np.arange(len(ids) - 1), ids[1:]] - lse


@pytest.fixture(scope="module")
def server():
    s = Server(TINY, "--max-model-len", "256")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def chunked_mha():
    s = Server(TINY, "--max-model-len", "256", "--max-num-batched-tokens", "8", "--mla-path", "mha")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mqa():
    s = Server(TINY, "--max-model-len", "256", "--mla-path", "mqa", "--no-enable-prefix-caching")
    yield s
    s.stop()


def tokenize(server: Server, text: str) -> list[int]:
    r = requests.post(server.url + "/tokenize", json={"prompt": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def echo_scores(server: Server, prompt, **extra) -> dict:
    body = {"model": MODEL_NAME, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0,
            "temperature": 0, **extra}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_echo_with_logprobs_scores_the_prompt_as_the_engine_does(server, tmp_path):
    ids = tokenize(server, TEXT)
    out = echo_scores(server, ids)
    choice = out["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    assert all(len(t) == 1 for t in lp["top_logprobs"][1:])
    want = engine_logprobs(tmp_path, ids)
    np.testing.assert_allclose(np.array(lp["token_logprobs"][1:]), want, atol=1e-4, rtol=0)
    # max_tokens 0: the prompt only, nothing generated.
    assert choice["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 0
    assert out["usage"]["prompt_tokens"] == len(ids)
    # The top-1 entry is at least as likely as the prompt token (a greedy check as lm-eval makes).
    for tok_lp, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        assert max(top.values()) >= tok_lp - 1e-6


def test_echo_with_generation_puts_prompt_then_completion(server):
    out = echo_scores(server, TEXT, max_tokens=4, logprobs=2)
    choice = out["choices"][0]
    lp = choice["logprobs"]
    n_prompt = out["usage"]["prompt_tokens"]
    assert out["usage"]["completion_tokens"] == 4
    assert len(lp["tokens"]) == n_prompt + 4
    assert lp["token_logprobs"][0] is None
    assert all(x is not None for x in lp["token_logprobs"][1:])
    assert choice["text"].startswith(TEXT)
    # The completion's offsets continue after the echoed prompt's text.
    assert lp["text_offset"][n_prompt] == len(TEXT)
    # The same prompt without echo generates the same tokens (greedy).
    plain = requests.post(server.url + "/v1/completions", json={
        "model": MODEL_NAME, "prompt": TEXT, "max_tokens": 4, "temperature": 0, "logprobs": 2}, timeout=60).json()
    assert plain["choices"][0]["logprobs"]["tokens"] == lp["tokens"][n_prompt:]
    assert choice["text"] == TEXT + plain["choices"][0]["text"]


def test_chunked_prefill_prefix_hits_batching_and_both_paths_agree(server, chunked_mha, mqa, tmp_path):
    ids = tokenize(server, TEXT * 2)
    cold = echo_scores(mqa, ids)["choices"][0]["logprobs"]["token_logprobs"][1:]
    # Warm the prefix cache with the same prompt, then score it: every position still comes back.
    for _ in range(2):
        requests.post(server.url + "/v1/completions",
                      json={"model": MODEL_NAME, "prompt": ids, "max_tokens": 2, "temperature": 0}, timeout=60)
    hits = metric(server.metrics(), "mla:prefix_cache_hits_total")
    assert hits > 0, "the second plain request should have hit the cache"
    warm_lp = echo_scores(server, ids)["choices"][0]["logprobs"]["token_logprobs"][1:]
    # The scored request recomputed its prompt (a cached block has rows, not logits).
    assert metric(server.metrics(), "mla:prefix_cache_hits_total") == hits
    # Chunks of 8 tokens down MHA while other requests decode alongside.
    results: dict = {}

    def background(i):
        results[i] = requests.post(chunked_mha.url + "/v1/completions", json={
            "model": MODEL_NAME, "prompt": f"{i} {TEXT}", "max_tokens": 24, "temperature": 0}, timeout=60)

    threads = [threading.Thread(target=background, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    chunked = echo_scores(chunked_mha, ids)["choices"][0]["logprobs"]["token_logprobs"][1:]
    for t in threads:
        t.join()
    assert all(r.status_code == 200 for r in results.values())
    want = engine_logprobs(tmp_path, ids)
    for name, got in (("prefix hit", warm_lp), ("chunked mha", chunked), ("mqa", cold)):
        assert len(got) == len(ids) - 1, name
        np.testing.assert_allclose(np.array(got), want, atol=2e-3, rtol=0, err_msg=name)
    # The same path and cache dtype as the reference run: equal to float rounding.
    np.testing.assert_allclose(np.array(warm_lp), want, atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.array(chunked), engine_logprobs(tmp_path, ids, "mha"), atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.array(cold), engine_logprobs(tmp_path, ids, "mqa"), atol=1e-4, rtol=0)


def test_prompt_logprobs_field_on_completions_and_chat(server, tmp_path):
    ids = tokenize(server, TEXT)
    r = requests.post(server.url + "/v1/completions", json={
        "model": MODEL_NAME, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2}, timeout=60)
    assert r.status_code == 200, r.text
    pl = r.json()["choices"][0]["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    want = engine_logprobs(tmp_path, ids)
    for i, entry in enumerate(pl[1:]):
        tok = str(ids[i + 1])
        assert tok in entry and 2 <= len(entry) <= 3
        assert abs(entry[tok]["logprob"] - want[i]) < 1e-4
        ranks = sorted(e["rank"] for e in entry.values())
        assert ranks[:2] == [1, 2]
        assert entry[tok]["rank"] >= 1 and isinstance(entry[tok]["decoded_token"], str)
    chat = requests.post(server.url + "/v1/chat/completions", json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": TEXT}], "max_tokens": 1, "temperature": 0,
        "prompt_logprobs": 0}, timeout=60)
    assert chat.status_code == 200, chat.text
    body = chat.json()
    assert body["prompt_logprobs"][0] is None
    assert len(body["prompt_logprobs"]) == body["usage"]["prompt_tokens"]
    assert all(len(e) == 1 for e in body["prompt_logprobs"][1:])


def test_the_official_client_scores_a_prompt(server):
    client = OpenAI(base_url=server.url + "/v1", api_key="none")
    out = client.completions.create(model=MODEL_NAME, prompt=TEXT, echo=True, logprobs=0, max_tokens=0)
    assert out.choices[0].text == TEXT
    assert out.choices[0].logprobs.token_logprobs[0] is None
    assert out.usage.completion_tokens == 0


@pytest.mark.parametrize("body,field", [
    ({"prompt": TEXT, "echo": True, "logprobs": 21}, "logprobs"),
    ({"prompt": TEXT, "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": TEXT, "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ({"prompt": TEXT, "max_tokens": 0}, "max_tokens"),
    ({"prompt": TEXT, "prompt_logprobs": "two"}, "prompt_logprobs"),
])
def test_bad_prompt_logprob_requests_are_400_and_disturb_nothing(server, body, field):
    # A long streamed generation runs meanwhile and must finish untouched.
    stream = requests.post(server.url + "/v1/completions", json={
        "model": MODEL_NAME, "prompt": TEXT, "max_tokens": 32, "temperature": 0, "stream": True,
        "ignore_eos": True}, stream=True, timeout=60)
    r = requests.post(server.url + "/v1/completions", json={"model": MODEL_NAME, **body}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field
    assert field in r.json()["error"]["message"]
    text = stream.text
    assert stream.status_code == 200 and text.rstrip().endswith("data: [DONE]")
    chat = requests.post(server.url + "/v1/chat/completions", json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1,
        "stream": True}, timeout=30)
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "prompt_logprobs"


def test_tokenizer_info_serves_lm_evals_remote_tokenizer(server):
    info = requests.get(server.url + "/tokenizer_info", timeout=10).json()
    assert info["eos_token"] == "<|end|>" and info["bos_token"] == "<|bos|>"
    assert "<|assistant|>" in info["chat_template"]
    # lm-eval encodes the EOS text without special tokens added and takes the first id.
    r = requests.post(server.url + "/tokenize", json={"prompt": info["eos_token"], "add_special_tokens": False})
    assert r.json()["tokens"] == [1]


def test_speculative_decoding_gives_the_same_prompt_and_sampled_logprobs(server):
    mtp = Server(TINY, "--max-model-len", "256", "--speculative-config",
                 '{"method": "mtp", "num_speculative_tokens": 2}')
    try:
        body = {"max_tokens": 8}
        want = echo_scores(server, TEXT, **body)["choices"][0]
        got = echo_scores(mtp, TEXT, **body)["choices"][0]
    finally:
        mtp.stop()
    assert got["text"] == want["text"]
    assert got["logprobs"]["tokens"] == want["logprobs"]["tokens"]
    np.testing.assert_allclose(np.array(got["logprobs"]["token_logprobs"][1:]),
                               np.array(want["logprobs"]["token_logprobs"][1:]), atol=1e-5, rtol=0)
