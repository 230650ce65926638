"""`mla serve` under load and at the edges of a request's life: /metrics (format and counters),
client disconnects (streaming or not) aborting their requests and freeing their KV blocks, 32
concurrent streaming clients matching sequential runs, graceful shutdown."""
import json
import re
import signal
import socket
import threading
import time

import pytest
import requests

from server_util import MODEL_NAME, Server, metric, sse_events, synth_model, wait_idle

CTX = 4096


@pytest.fixture(scope="module")
def server():
    s = Server(synth_model(), "--max-model-len", str(CTX))
    yield s
    assert s.stop() == 0, s.log


def test_metrics_format_and_counters_move(server):
    before = wait_idle(server)
    for name in ["mla:num_requests_running", "mla:num_requests_waiting", "mla:kv_cache_usage_perc",
                 "mla:prompt_tokens_total", "mla:generation_tokens_total", "mla:num_preemptions_total",
                 "mla:prefix_cache_queries_total", "mla:prefix_cache_hits_total",
                 "mla:time_to_first_token_seconds_count", "mla:time_per_output_token_seconds_count",
                 "mla:e2e_request_latency_seconds_count"]:
        metric(before, name)
    n_prompt = requests.post(server.url + "/tokenize", json={"prompt": "Count these tokens"}).json()["count"]
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Count these tokens", "max_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200
    after = wait_idle(server)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("mla:prompt_tokens_total") == n_prompt
    assert delta("mla:generation_tokens_total") == 5
    assert delta("mla:request_success_total", finished_reason="length") == 1
    assert delta("mla:request_success_total", finished_reason="stop") == 0
    assert delta("mla:time_to_first_token_seconds_count") == 1
    assert delta("mla:e2e_request_latency_seconds_count") == 1
    assert delta("mla:time_per_output_token_seconds_count") == 4
    assert delta("mla:e2e_request_latency_seconds_sum") > 0
    # The prefill went down the path the server announced for prompt chunks (query length > 1),
    # the 4 decode steps through MQA.
    prefill = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)", server.log).group(1)
    assert delta("mla:attention_path_tokens_total", path="mha") == (n_prompt if prefill == "mha" else 0)
    assert delta("mla:attention_path_tokens_total", path="mqa") == 4 + (n_prompt if prefill == "mqa" else 0)
    # Every prompt token is looked up; a prompt shorter than a block (16 tokens) cannot hit.
    assert delta("mla:prefix_cache_queries_total") == n_prompt
    assert delta("mla:prefix_cache_hits_total") == 0
    assert metric(after, "mla:kv_cache_usage_perc") == 0
    # A repeated prompt hits the prefix cache: its full blocks, short of the last prompt token
    # (whose logits must be computed), are reused the second time and not the first.
    prompt = "The prefix cache keeps full blocks of the prompt for the next request. " * 4
    n_long = requests.post(server.url + "/tokenize", json={"prompt": prompt}).json()["count"]
    assert n_long > 32
    hits = []
    for _ in range(2):
        m0 = wait_idle(server)
        r = requests.post(server.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200
        m1 = wait_idle(server)
        assert metric(m1, "mla:prefix_cache_queries_total") - metric(m0, "mla:prefix_cache_queries_total") == n_long
        hits.append(metric(m1, "mla:prefix_cache_hits_total") - metric(m0, "mla:prefix_cache_hits_total"))
    assert hits == [0, (n_long - 1) // 16 * 16]


def long_request(stream: bool) -> bytes:
    body = json.dumps({"model": MODEL_NAME, "prompt": "Tell me everything", "max_tokens": CTX - 64,
                       "ignore_eos": True, "temperature": 0, "stream": stream}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def check_aborted(server, before):
    after = wait_idle(server)
    assert metric(after, "mla:kv_cache_usage_perc") == metric(before, "mla:kv_cache_usage_perc") == 0
    aborted = (metric(after, "mla:request_success_total", finished_reason="abort")
               - metric(before, "mla:request_success_total", finished_reason="abort"))
    assert aborted == 1
    generated = metric(after, "mla:generation_tokens_total") - metric(before, "mla:generation_tokens_total")
    assert 0 < generated < CTX - 64


def test_disconnect_mid_stream_aborts(server):
    before = wait_idle(server)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(long_request(stream=True))
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)
        assert got.startswith(b"HTTP/1.1 200")
        m = server.metrics()
        assert metric(m, "mla:num_requests_running") == 1
        assert metric(m, "mla:kv_cache_usage_perc") > 0
    check_aborted(server, before)


def test_disconnect_while_waiting_for_a_full_response_aborts(server):
    before = wait_idle(server)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(long_request(stream=False))
        deadline = time.time() + 10
        while metric(server.metrics(), "mla:generation_tokens_total") == metric(before, "mla:generation_tokens_total"):
            assert time.time() < deadline
            time.sleep(0.01)
    check_aborted(server, before)


def run_stream(url: str, prompt: str, results: dict, key):
    r = requests.post(url + "/v1/completions", stream=True, timeout=120,
                      json={"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                            "stream": True})
    assert r.status_code == 200
    results[key] = "".join(c["text"] for e in sse_events(r) for c in e["choices"])


def test_32_concurrent_streams_match_sequential(server):
    prompts = [f"Client {i} says: {' '.join(['word'] * (i % 7))}" for i in range(32)]
    sequential: dict = {}
    for i, p in enumerate(prompts):
        run_stream(server.url, p, sequential, i)
    concurrent: dict = {}
    errors = []

    def worker(i):
        try:
            run_stream(server.url, prompts[i], concurrent, i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert len(concurrent) == 32
    for i in range(32):
        assert concurrent[i] == sequential[i], (i, prompts[i])
    m = wait_idle(server)
    assert metric(m, "mla:kv_cache_usage_perc") == 0


def test_preemption_under_a_small_cache_completes_every_request_and_is_counted():
    """A KV cache of 4 blocks (64 tokens) for 6 concurrent sequences of about 50 tokens: the engine must
    preempt (and recompute) to finish them. Every request completes with the tokens it gets alone,
    /metrics counts the preemptions and the prompt/generation tokens, and the cache drains."""
    s = Server(synth_model(), "--kv-cache-tokens", "64", "--max-model-len", "64", "--max-num-batched-tokens", "32")
    try:
        prompts = [f"Request number {i} asks for a long answer about the cache" for i in range(6)]
        body = {"max_tokens": 40, "temperature": 0, "ignore_eos": True}
        alone = [requests.post(s.url + "/v1/completions", json=dict(body, prompt=p), timeout=120).json()
                 for p in prompts]
        before = wait_idle(s)
        assert metric(before, "mla:num_preemptions_total") == 0
        results: dict = {}

        def worker(i):
            results[i] = requests.post(s.url + "/v1/completions", json=dict(body, prompt=prompts[i]), timeout=120)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        for i, want in enumerate(alone):
            assert results[i].status_code == 200, results[i].text
            got = results[i].json()
            assert got["choices"][0]["text"] == want["choices"][0]["text"], i
            assert got["usage"] == want["usage"], i
        after = wait_idle(s)
        assert metric(after, "mla:num_preemptions_total") >= 1
        n_prompt = sum(a["usage"]["prompt_tokens"] for a in alone)
        assert metric(after, "mla:prompt_tokens_total") - metric(before, "mla:prompt_tokens_total") == n_prompt
        assert metric(after, "mla:generation_tokens_total") - metric(before, "mla:generation_tokens_total") == 40 * 6
        assert metric(after, "mla:request_success_total", finished_reason="length") - metric(
            before, "mla:request_success_total", finished_reason="length") == 6
        assert metric(after, "mla:kv_cache_usage_perc") == 0
    finally:
        assert s.stop() == 0, s.log


def test_graceful_shutdown_lets_running_requests_finish():
    # A grace window far longer than the request needs, even under a sanitizer on a loaded machine:
    # the request must end by length, not be cut at the window's end.
    s = Server(synth_model(), "--shutdown-timeout", "300")
    result = {}

    def client():
        r = requests.post(s.url + "/v1/completions", stream=True, timeout=300,
                          json={"prompt": "Finish me", "max_tokens": 100, "temperature": 0,
                                "ignore_eos": True, "stream": True})
        result["events"] = sse_events(r)

    t = threading.Thread(target=client)
    t.start()
    deadline = time.time() + 10
    while metric(s.metrics(), "mla:generation_tokens_total") == 0:
        assert time.time() < deadline
        time.sleep(0.01)
    s.proc.send_signal(signal.SIGTERM)
    t.join(300)
    assert s.stop() == 0, s.log
    events = result["events"]
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["text"] for e in events for c in e["choices"])
    with pytest.raises(requests.ConnectionError):
        requests.get(s.url + "/health", timeout=2)


def test_shutdown_grace_expiry_aborts():
    s = Server(synth_model(), "--shutdown-timeout", "0.2", "--max-model-len", str(CTX))
    try:
        with socket.create_connection(("127.0.0.1", s.port)) as sock:
            sock.sendall(long_request(stream=False))
            deadline = time.time() + 10
            while metric(s.metrics(), "mla:generation_tokens_total") == 0:
                assert time.time() < deadline
                time.sleep(0.01)
            t0 = time.time()
            s.proc.send_signal(signal.SIGINT)
            data = b""
            sock.settimeout(30)
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), data[:300]
        j = json.loads(body)
        assert j["choices"][0]["finish_reason"] == "abort"
        assert 0 < j["usage"]["completion_tokens"] < CTX - 64
        assert time.time() - t0 < 10
    finally:
        assert s.stop() == 0, s.log
