"""`mla serve`: the seed's probe, the simple endpoints, tokenize/detokenize, and completions/chat
through `requests` (the official client is in test_server_openai.py)."""
import re
import time

import pytest
import requests

from server_util import CHAT_TEMPLATE, MODEL_NAME, Server, sse_events, synth_model

PROBE = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 1, "temperature": 0}


@pytest.fixture(scope="module")
def server():
    s = Server(synth_model(), "--max-model-len", "512")
    yield s
    assert s.stop() == 0, s.log


def test_probe_with_dispatch_trace():
    # A fresh server, so the first forward calls are the probe's.
    s = Server(synth_model(), "--trace", "dispatch:2")
    try:
        r = requests.post(s.url + "/v1/completions", json=PROBE, timeout=30)
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["object"] == "text_completion"
        assert j["model"] == MODEL_NAME
        assert j["id"].startswith("cmpl-")
        assert len(j["choices"]) == 1
        c = j["choices"][0]
        assert c["index"] == 0
        assert c["finish_reason"] == "length"
        assert isinstance(c["text"], str)
        assert j["usage"]["completion_tokens"] == 1
        # "Hello" is BOS + one token in the DeepSeek-LLM vocabulary (llama.cpp's test vectors).
        assert j["usage"]["prompt_tokens"] == 2
        assert j["usage"]["total_tokens"] == 3
        # The probe's prefill went through layer 0 on the path the server announced for prefill
        # chunks (2 query tokens > threshold 1).
        prefill = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)", s.log).group(1)
        one = "num_mqa=0 num_mha=1" if prefill == "mha" else "num_mqa=1 num_mha=0"
        deadline = time.time() + 5
        pattern = re.compile(rf"dispatch layer=blk\.0 is_sparse=0 {one} total_toks=2 policy=auto")
        while not pattern.search(s.log) and time.time() < deadline:
            time.sleep(0.05)
        assert pattern.search(s.log), s.log
    finally:
        assert s.stop() == 0, s.log


def test_probe_with_curl(server):
    import json
    import shutil
    import subprocess

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    out = subprocess.run([curl, "-s", server.url + "/v1/completions", "-H", "Content-Type: application/json",
                          "-d", json.dumps(PROBE)], capture_output=True, check=False, text=True, timeout=30)
    assert out.returncode == 0
    j = json.loads(out.stdout)
    assert j["choices"][0]["finish_reason"] == "length"
    assert j["usage"]["completion_tokens"] == 1


def test_health_version_models(server):
    assert requests.get(server.url + "/health").status_code == 200
    v = requests.get(server.url + "/version").json()
    assert re.fullmatch(r"\d+\.\d+\.\d+", v["version"])
    m = requests.get(server.url + "/v1/models").json()
    assert m["object"] == "list"
    assert [d["id"] for d in m["data"]] == [MODEL_NAME]
    assert m["data"][0]["object"] == "model"
    assert m["data"][0]["max_model_len"] == 512
    one = requests.get(server.url + "/v1/models/" + MODEL_NAME)
    assert one.status_code == 200 and one.json()["id"] == MODEL_NAME


def test_tokenize_detokenize(server):
    # Reference ids from llama.cpp's vocabulary test vectors (.inp/.out) for this vocabulary.
    r = requests.post(server.url + "/tokenize", json={"prompt": "Hello world", "add_special_tokens": False}).json()
    assert r["tokens"] == [17464, 1843]
    assert r["count"] == 2
    assert r["max_model_len"] == 512
    r = requests.post(server.url + "/tokenize", json={"prompt": "Hello world"}).json()
    assert r["tokens"] == [100000, 17464, 1843]  # BOS first (add_bos_token)
    d = requests.post(server.url + "/detokenize", json={"tokens": [17464, 1843]}).json()
    assert d["prompt"] == "Hello world"


def test_tokenize_messages_uses_the_chat_template(server):
    import jinja2.sandbox

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(CHAT_TEMPLATE.read_text()).render(
        messages=messages, add_generation_prompt=True,
        bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>")
    want = requests.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
    got = requests.post(server.url + "/tokenize", json={"messages": messages}).json()
    assert got["tokens"] == want["tokens"]
    assert got["tokens"][0] == 100000


def test_usage_matches_tokenize(server):
    for prompt in ["Hello", "The capital of France is", "日本語のテキスト 123"]:
        n = requests.post(server.url + "/tokenize", json={"prompt": prompt}).json()["count"]
        r = requests.post(server.url + "/v1/completions",
                          json={"prompt": prompt, "max_tokens": 3, "temperature": 0, "ignore_eos": True}).json()
        assert r["usage"]["prompt_tokens"] == n
        assert r["usage"]["completion_tokens"] == 3
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    n = requests.post(server.url + "/tokenize", json={"messages": messages}).json()["count"]
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": messages, "max_tokens": 2, "temperature": 0, "ignore_eos": True}).json()
    assert r["usage"]["prompt_tokens"] == n
    assert r["usage"]["completion_tokens"] == 2


def test_prompt_forms_and_echo(server):
    ids = requests.post(server.url + "/tokenize", json={"prompt": "One two three"}).json()["tokens"]
    base = {"max_tokens": 4, "temperature": 0, "ignore_eos": True}
    by_text = requests.post(server.url + "/v1/completions", json={**base, "prompt": "One two three"}).json()
    by_ids = requests.post(server.url + "/v1/completions", json={**base, "prompt": ids}).json()
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]
    for prompts in ([ids, ids[:-1]], ["One two three", "One two"]):
        batch = requests.post(server.url + "/v1/completions", json={**base, "prompt": prompts}).json()
        assert [c["index"] for c in batch["choices"]] == [0, 1]
        assert batch["choices"][0]["text"] == by_text["choices"][0]["text"]
        alone = requests.post(server.url + "/v1/completions", json={**base, "prompt": prompts[1]}).json()
        assert batch["choices"][1]["text"] == alone["choices"][0]["text"]
        assert batch["usage"]["prompt_tokens"] == 2 * len(ids) - 1
        assert batch["usage"]["completion_tokens"] == 8
    echo = requests.post(server.url + "/v1/completions", json={**base, "prompt": "One two three", "echo": True}).json()
    assert echo["choices"][0]["text"] == "One two three" + by_text["choices"][0]["text"]


def test_stream_concatenates_to_the_full_text(server):
    body = {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    full = requests.post(server.url + "/v1/completions", json=body).json()
    r = requests.post(server.url + "/v1/completions", json={**body, "stream": True}, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(r)
    assert all(e["object"] == "text_completion" and e["id"] == events[0]["id"] for e in events)
    assert "".join(c["text"] for e in events for c in e["choices"]) == full["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["finish_reason"] is None for e in events[:-1] for c in e["choices"])


def test_chat_stream_role_first_and_usage_last(server):
    body = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 12,
            "temperature": 0, "ignore_eos": True}
    full = requests.post(server.url + "/v1/chat/completions", json=body).json()
    assert full["object"] == "chat.completion"
    assert full["choices"][0]["message"]["role"] == "assistant"
    r = requests.post(server.url + "/v1/chat/completions",
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}, stream=True)
    events = sse_events(r)
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == full["usage"]
    text = "".join(c["delta"].get("content", "") for e in events[:-1] for c in e["choices"])
    assert text == full["choices"][0]["message"]["content"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_stop_reason_and_stop_token(server):
    # A +100 logit bias makes token 17464 ("Hello") the greedy choice at every step.
    body = {"prompt": "A B C", "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "logit_bias": {"17464": 100}}
    full = requests.post(server.url + "/v1/completions", json=body).json()["choices"][0]
    assert full["text"] == "Hello" * 6 and full["finish_reason"] == "length" and full["stop_reason"] is None
    r = requests.post(server.url + "/v1/completions", json={**body, "stop_token_ids": [17464]}).json()
    c = r["choices"][0]
    assert (c["text"], c["finish_reason"], c["stop_reason"]) == ("", "stop", 17464)
    assert r["usage"]["completion_tokens"] == 1
    r = requests.post(server.url + "/v1/completions", json={**body, "stop": ["xyz", "lloHe"]}).json()
    c = r["choices"][0]
    assert (c["text"], c["finish_reason"], c["stop_reason"]) == ("He", "stop", "lloHe")
    r = requests.post(server.url + "/v1/completions",
                      json={**body, "stop": "lloHe", "include_stop_str_in_output": True}).json()
    assert r["choices"][0]["text"] == "HelloHe"
