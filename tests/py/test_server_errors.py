"""`mla serve` bad input: every error is an OpenAI error object with the right status, and the
server keeps serving after each one (every case is followed by a successful request)."""
import fcntl
import os
import shutil
import signal
import socket
import time

import pytest
import requests

from server_util import MODEL_NAME, Server, synth_model

PROBE = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
CTX = 512


@pytest.fixture(scope="module")
def server():
    s = Server(synth_model(), "--max-model-len", str(CTX), "--max-request-bytes", "65536",
               "--timeout-keep-alive", "1")
    yield s
    assert s.stop() == 0, s.log


def assert_error(r: requests.Response, status: int, param=None, contains=()):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    if param is not None:
        assert err["param"] == param, err
    for s in contains:
        assert s in err["message"], err
    return err


def still_serving(server):
    r = requests.post(server.url + "/v1/completions", json=PROBE, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


def post(server, path, **kw):
    return requests.post(server.url + path, timeout=30, **kw)


@pytest.mark.parametrize("body", ["{", "not json", '{"prompt": "x",}', "", "\xff\xfe"])
def test_invalid_json(server, body):
    assert_error(post(server, "/v1/completions", data=body.encode("latin-1"),
                      headers={"Content-Type": "application/json"}), 400)
    still_serving(server)


@pytest.mark.parametrize("body", ["[1, 2]", '"a string"', "42", "null"])
def test_body_not_an_object(server, body):
    assert_error(post(server, "/v1/completions", data=body, headers={"Content-Type": "application/json"}), 400)
    still_serving(server)


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.5), ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5), ("top_k", -2),
    ("min_p", 1.5), ("n", 0), ("n", "2"), ("logprobs", 21), ("logprobs", -1), ("max_tokens", 0),
    ("max_tokens", "5"), ("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0),
    ("stop", 5), ("stop", [""]), ("stop_token_ids", [10 ** 7]), ("logit_bias", {"x": 1}),
    ("logit_bias", {"5": 200}), ("seed", "abc"), ("stream", "yes"), ("echo", 1), ("prompt", 7),
    ("prompt", []), ("prompt", [[]]), ("prompt", [-1]), ("prompt", [10 ** 7]), ("ignore_eos", "no"),
    ("min_tokens", -1), ("user", 5),
])
def test_completion_field_errors(server, field, value):
    body = {**PROBE, field: value}
    assert_error(post(server, "/v1/completions", json=body), 400, param=field)
    still_serving(server)


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]}, "chat_template_kwargs"),
    ({"prompt": "x"}, "messages"),
])
def test_chat_errors(server, body, param):
    assert_error(post(server, "/v1/chat/completions", json={"model": MODEL_NAME, **body}), 400, param=param)
    still_serving(server)


def test_stream_options_without_stream(server):
    assert_error(post(server, "/v1/completions", json={**PROBE, "stream_options": {"include_usage": True}}),
                 400, param="stream_options")
    still_serving(server)


def test_unknown_fields_are_ignored(server):
    r = post(server, "/v1/completions", json={**PROBE, "frobnicate": {"x": [1, 2]}, "best_of_luck": True})
    assert r.status_code == 200


def test_prompt_longer_than_context(server):
    ids = [17464] * (CTX + 88)
    err = assert_error(post(server, "/v1/completions", json={**PROBE, "prompt": ids}), 400,
                       contains=(str(CTX + 88), str(CTX)))
    assert err["code"] == "context_length_exceeded"
    still_serving(server)
    # Prompt + max_tokens over the context is an error too (as in vLLM); both numbers are given.
    ids = [17464] * (CTX - 10)
    assert_error(post(server, "/v1/completions", json={**PROBE, "prompt": ids, "max_tokens": 20}), 400,
                 param="max_tokens", contains=(str(CTX), str(CTX + 10)))
    still_serving(server)
    long_text = "word " * (CTX + 50)
    assert_error(post(server, "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": long_text}], "max_tokens": 1}), 400,
                 contains=(str(CTX),))
    ok = post(server, "/v1/completions", json={**PROBE, "prompt": [17464] * (CTX - 10), "max_tokens": 10})
    assert ok.status_code == 200  # exactly the context: fine


def test_not_found(server):
    assert_error(requests.get(server.url + "/v2/nothing"), 404)
    assert_error(post(server, "/v1/embeddings", json={"input": "x"}), 404)
    assert_error(post(server, "/v1/completions", json={**PROBE, "model": "gpt-5"}), 404, param="model",
                 contains=("gpt-5",))
    assert_error(post(server, "/v1/chat/completions",
                      json={"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}), 404)
    assert_error(requests.get(server.url + "/v1/models/gpt-5"), 404)
    still_serving(server)


def test_method_not_allowed(server):
    r = requests.get(server.url + "/v1/completions")
    assert_error(r, 405)
    assert r.headers["Allow"] == "POST"
    assert_error(requests.post(server.url + "/health"), 405)
    assert_error(requests.delete(server.url + "/v1/models"), 405)
    still_serving(server)


def test_body_too_large(server):
    r = post(server, "/v1/completions", json={**PROBE, "prompt": "a" * 70000})
    assert_error(r, 413, contains=("65536",))
    still_serving(server)


def test_headers_too_large(server):
    r = requests.get(server.url + "/health", headers={"X-Filler": "a" * 20000})
    assert_error(r, 431)
    still_serving(server)


def test_idle_and_slow_connections_time_out(server):
    # Idle: the server closes the connection after --timeout-keep-alive (1 s).
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(10)
        t0 = time.time()
        assert s.recv(1) == b""
        assert 0.5 < time.time() - t0 < 5
    # Slow: half a request, then nothing: closed after the same timeout.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        assert s.recv(4096) == b""
        assert 0.5 < time.time() - t0 < 5
    # A body that stops half-way: closed too.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert s.recv(4096) == b""
    still_serving(server)


def test_malformed_http(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(10)
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 400"), data
    still_serving(server)


def test_api_key():
    s = Server(synth_model(), "--api-key", "sk-test-123")
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sk-test-123"},
                        {"Authorization": "Bearer sk-test-1234"}, {"Authorization": "Basic sk-test-123"}):
            assert_error(requests.post(s.url + "/v1/completions", json=PROBE, headers=headers), 401)
            assert_error(requests.get(s.url + "/v1/models", headers=headers), 401)
        assert requests.get(s.url + "/health").status_code == 200
        assert requests.get(s.url + "/metrics").status_code == 200
        ok = {"Authorization": "Bearer sk-test-123"}
        assert requests.post(s.url + "/v1/completions", json=PROBE, headers=ok).status_code == 200
        assert requests.get(s.url + "/v1/models", headers=ok).status_code == 200
    finally:
        assert s.stop() == 0, s.log
    # The same key from the environment.
    s = Server(synth_model(), env={"MLA_API_KEY": "sk-env"})
    try:
        assert_error(requests.post(s.url + "/v1/completions", json=PROBE), 401)
        r = requests.post(s.url + "/v1/completions", json=PROBE, headers={"Authorization": "Bearer sk-env"})
        assert r.status_code == 200
    finally:
        assert s.stop() == 0, s.log


def test_health_is_503_then_200_while_loading(tmp_path):
    """/health and the API answer 503 (an error object) while the model loads, then 200.
    The load is held deterministically: the test takes a write lease on (a copy of) the model file
    (fcntl F_SETLEASE), so the server's open() of it blocks, after it has started listening,
    until the test releases the lease (the kernel would break it after lease-break-time, 45 s)."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(synth_model(), model)
    old_sigio = signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease-break notice
    fd = os.open(model, os.O_RDONLY)
    s = None
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        s = Server(model, wait=False)
        seen = []
        deadline = time.time() + 30
        while not seen:
            assert time.time() < deadline, s.log
            try:
                r = requests.get(s.url + "/health", timeout=5)
            except requests.ConnectionError:
                assert s.proc.poll() is None, s.log
                time.sleep(0.01)
                continue
            seen.append(r.status_code)
            assert_error(r, 503)
        assert_error(requests.post(s.url + "/v1/completions", json=PROBE), 503, contains=("loading",))
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        while seen[-1] != 200:
            assert time.time() < deadline, s.log
            r = requests.get(s.url + "/health", timeout=5)
            if r.status_code == 503:
                assert_error(r, 503)
            seen.append(r.status_code)
        assert set(seen) == {503, 200}
        assert requests.post(s.url + "/v1/completions", json=PROBE).status_code == 200
        assert "listening on" in s.log
    finally:
        os.close(fd)
        signal.signal(signal.SIGIO, old_sigio)
        if s is not None:
            assert s.stop() == 0, s.log
