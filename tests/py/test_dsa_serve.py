"""`mla serve` on the DSA architectures: the converted transformers fixtures (tests/fixtures/
dsa-reference: glm-dsa and deepseek32, one MTP block each) answer a greedy completion of a prompt
longer than index_topk with transformers' own greedy continuation, through the official openai
client; the sparse-attention counters of /metrics move; `--dsa off` serves dense attention and
gives a different continuation where the references differ."""
import json
from pathlib import Path

import openai
import pytest
import requests

from server_util import Server, metric

ROOT = Path(__file__).resolve().parents[2]
REF_DIR = ROOT / "tests" / "fixtures" / "dsa-reference"


def fixture(model):
    d = REF_DIR / model
    ref = json.loads((d / "reference.json").read_text())
    return d / ref["gguf"]["file"], ref


@pytest.mark.parametrize("model", ["glm-dsa-tiny", "deepseek32-tiny"])
def test_served_greedy_equals_transformers(model):
    path, ref = fixture(model)
    case = ref["cases"]["long"]
    assert len(case["token_ids"]) > ref["index_topk"]
    want = case["greedy"]["new_token_ids"][:16]
    srv = Server(path, "--kv-cache-dtype", "f32", "--self-check=off")
    try:
        want_text = requests.post(srv.url + "/detokenize", json={"tokens": want}, timeout=30).json()["prompt"]
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        r = client.completions.create(model="tiny-deepseek2", prompt=case["token_ids"], max_tokens=len(want),
                                      temperature=0, extra_body={"ignore_eos": True, "skip_special_tokens": False})
        assert r.usage.completion_tokens == len(want)
        assert r.choices[0].text == want_text
        m = srv.metrics()
        n_layer = ref["hf_config"]["num_hidden_layers"]
        tokens = len(case["token_ids"]) + len(want) - 1
        assert metric(m, "mla:sparse_attention_layer_tokens_total") == n_layer * tokens
        assert metric(m, "mla:sparse_attention_selected_rows_total") > 0
    finally:
        assert srv.stop() == 0


def test_dsa_off_serves_dense_attention():
    path, ref = fixture("glm-dsa-tiny")
    case = ref["cases"]["long"]
    srv = Server(path, "--kv-cache-dtype", "f32", "--self-check=off", "--dsa", "off")
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        r = client.completions.create(model="tiny-deepseek2", prompt=case["token_ids"], max_tokens=16, temperature=0,
                                      extra_body={"ignore_eos": True, "skip_special_tokens": False})
        want_text = requests.post(srv.url + "/detokenize", json={"tokens": case["greedy"]["new_token_ids"][:16]},
                                  timeout=30).json()["prompt"]
        assert r.choices[0].text != want_text  # the sparse reference's continuation differs from dense
        assert metric(srv.metrics(), "mla:sparse_attention_layer_tokens_total") == 0
    finally:
        assert srv.stop() == 0
