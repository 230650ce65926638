"""A deterministic request fuzzer for a live `mla serve`: the seeds of the libFuzzer target
(tests/fixtures/request-seeds/) mutated at the JSON level (wrong types, huge and negative numbers,
NaN/Infinity, deep nesting, invalid UTF-8 and lone surrogates, missing and extra fields), the byte
level (truncation, flips, insertions) and the HTTP level (huge and malformed headers, bad
Content-Length, bad chunked encoding, bodies cut off by the client), sent over raw sockets.

The contract: no 5xx ever; every 4xx is one line of JSON in the API's error shape (OpenAI's, or
Anthropic's on /v1/messages) with a non-empty one-line message; the server keeps serving (a good
request succeeds after every batch) and ends with nothing running.

A fixed seed makes the run reproducible; `make test` runs MLA_FUZZ_CASES=400 (a few seconds).
For a long run: `MLA_FUZZ_CASES=100000 MLA_FUZZ_SEED=7 pytest tests/py/test_server_fuzz.py`.
A failure prints the case number, its kind and the request bytes.
"""
from __future__ import annotations

import json
import os
import random
import socket
import time
from pathlib import Path

import pytest
import requests

from server_util import MODEL_NAME, Server, metric, synth_model

SEEDS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "request-seeds"
PATHS = {"c": "/v1/completions", "h": "/v1/chat/completions", "m": "/v1/messages",
         "n": "/v1/messages/count_tokens", "t": "/tokenize", "d": "/detokenize"}
CASES = int(os.environ.get("MLA_FUZZ_CASES", "400"))
SEED = int(os.environ.get("MLA_FUZZ_SEED", "20261201"))
CTX = 128
MAX_BODY = 65536
PROBE = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 1, "temperature": 0}


class Raw:
    """Bytes written into the JSON text as they are (NaN, 1e999, invalid UTF-8, ...)."""

    def __init__(self, text: bytes):
        self.text = text


def dump(v) -> bytes:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        return b"{" + b",".join(dump(k) + b":" + dump(x) for k, x in v.items()) + b"}"
    if isinstance(v, list):
        return b"[" + b",".join(dump(x) for x in v) + b"]"
    return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")


def nasty_value(rng: random.Random):
    choices = [
        None, True, False, 0, -1, -(2**31), 2**31, 2**63, -(2**63) - 1, 10**30, 1.5, -0.0, 1e-320,
        Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"), Raw(b"1e999"), Raw(b"-1e999"),
        Raw(b"123456789012345678901234567890"), Raw(b"0x10"), Raw(b"01"), Raw(b"1."),
        "", "16", "x" * rng.choice([1, 100, 5000]), [], {}, [1, "a", None], {"a": {"b": []}},
        Raw(b"[" * 5000 + b"]" * 5000), Raw(b"{\"a\":" * 3000 + b"1" + b"}" * 3000),
        Raw(b"\"\\ud800\""), Raw(b"\"\\udc00x\""), Raw(b"\"\xff\xfe\""), Raw(b"\"\xc3\""),
        Raw(b"\"\xed\xa0\x80\""), Raw(b"\"a\x00b\""), Raw(b"\"\\u0000\""),
        "<｜begin▁of▁sentence｜>", "😀" * 10, [{"type": "text", "text": 5}],
        {"type": "function", "function": {"name": None}}, [{"role": "user"}],
        [{"role": 5, "content": "x"}], {"type": 5}, {"type": "tool", "name": 5},
    ]
    return rng.choice(choices)


def paths_of(v, prefix=()):
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths_of(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths_of(x, (*prefix, i))


def mutate_json(rng: random.Random, body):
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        targets = [p for p in paths_of(body) if p]
        if not targets or not isinstance(body, dict):
            return nasty_value(rng)
        path = rng.choice(targets)
        parent = body
        for k in path[:-1]:
            parent = parent[k]
        op = rng.random()
        if op < 0.7:
            parent[path[-1]] = nasty_value(rng)
        elif op < 0.85 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[rng.choice(["extra", "stream", "n", "max_tokens", "messages", "tools", "logit_bias",
                               "stop", "stream_options", "tool_choice", "response_format"])] = nasty_value(rng)
        elif isinstance(parent, list):
            parent.append(nasty_value(rng))
    return body


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    op = rng.randrange(4)
    if op == 0 and b:
        return bytes(b[: rng.randrange(len(b))])  # truncated JSON
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(b) + 1)
        if op == 1 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif op == 2:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif b:
            j = rng.randrange(len(b))
            b[at:at] = b[j : j + rng.randint(1, 32)]
    return bytes(b)


def request_bytes(path: str, body: bytes, headers: list[tuple[str, str]] | None = None,
                  content_length: int | None = None) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            "Connection: close"]
    if content_length is not None:
        head.append(f"Content-Length: {content_length}")
    for k, v in headers or []:
        head.append(f"{k}: {v}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + body


def chunked(body: bytes, rng: random.Random) -> bytes:
    out = b""
    at = 0
    while at < len(body):
        n = rng.randint(1, 64)
        out += f"{n if at + n <= len(body) else len(body) - at:x}\r\n".encode() + body[at : at + n] + b"\r\n"
        at += n
    return out + b"0\r\n\r\n"


def http_case(rng: random.Random, path: str, body: bytes) -> tuple[str, bytes, bool]:
    """(kind, raw request, may_close_silently): the request is malformed at the HTTP level."""
    kind = rng.randrange(12)
    if kind == 0:
        return "huge header", request_bytes(path, body, [("X-Filler", "a" * 20000)], len(body)), False
    if kind == 1:
        many = [(f"X-H{i}", "v" * 20) for i in range(2000)]
        return "many headers", request_bytes(path, body, many, len(body)), False
    if kind == 2:
        cl = rng.choice(["abc", "-5", "1, 2", "99999999999999999999999", "0x10", ""])
        return f"bad content-length {cl!r}", request_bytes(path, body, [("Content-Length", cl)]), False
    if kind == 3:
        size = rng.choice([b"zz", b"ffffffffffffffffffff", b"-1", b"", b"1;" + b"x" * 9000])
        raw = request_bytes(path, b"", [("Transfer-Encoding", "chunked")]) + size + b"\r\n" + body[:5] + b"\r\n"
        return f"bad chunk size {size[:12]!r}", raw, True
    if kind == 4:
        enc = chunked(body, rng)
        cut = enc[: rng.randrange(len(enc))] if enc else enc
        return "chunked body cut off", request_bytes(path, b"", [("Transfer-Encoding", "chunked")]) + cut, True
    if kind == 5:
        enc = chunked(body, rng).replace(b"\r\n", b"\n", 1)
        return "chunk without CRLF", request_bytes(path, b"", [("Transfer-Encoding", "chunked")]) + enc, True
    if kind == 6:
        te = rng.choice(["gzip", "chunked, gzip", "identity", "chunked, chunked"])
        return f"transfer-encoding {te}", request_bytes(path, chunked(body, rng), [("Transfer-Encoding", te)]), True
    if kind == 7:
        return "content-length over the body", request_bytes(path, body, content_length=len(body) + 10), True
    if kind == 8:
        line = rng.choice([b"POST  HTTP/1.1", b"P\x00ST / HTTP/1.1", b"POST " + b"/" * 20000 + b" HTTP/1.1",
                           b"POST /v1/completions HTTP/9.9", b"POST /v1/\xff\xfe HTTP/1.1", b"GET",
                           b"\r\n\r\n\r\n"])
        return f"bad request line {line[:24]!r}", line + b"\r\nHost: x\r\nConnection: close\r\n\r\n", True
    if kind == 9:
        bad = rng.choice([b"NoColon", b"Bad Name: v", b"X: a\x00b", b"X: \xff\xfe", b" folded: x"])
        raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n").encode() + bad + (
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        return f"bad header {bad[:16]!r}", raw, True
    if kind == 10:
        return "both length and chunked", request_bytes(
            path, chunked(body, rng), [("Transfer-Encoding", "chunked")], len(body)), True
    return "expect 100-continue", request_bytes(path, body, [("Expect", "100-continue")], len(body)), False


def send_raw(port: int, raw: bytes, half_close: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered early (400/413/431) and closed: read what it sent
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        return data


def parse_response(data: bytes) -> tuple[int, dict, bytes]:
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode("latin-1")
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line, 16)
            if n == 0:
                break
            body += rest[:n]
            rest = rest[n + 2 :]
        return status, headers, body
    return status, headers, rest[: int(headers.get("content-length", len(rest)))]


def check_response(data: bytes, path: str, may_close_silently: bool) -> int:
    if not data:
        assert may_close_silently, "the server closed the connection without an answer"
        return 0
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    status, headers, body = parse_response(data)
    assert status < 500, (status, body[:500])
    if status >= 400:
        assert headers.get("content-type", "").startswith("application/json"), headers
        assert b"\n" not in body, body[:500]
        err = json.loads(body)
        if path.startswith("/v1/messages") and err.get("type") == "error":
            msg = err["error"]["message"]
            assert isinstance(err["error"]["type"], str)
        else:
            assert set(err["error"]) == {"message", "type", "param", "code"}, err
            msg = err["error"]["message"]
        assert isinstance(msg, str) and msg and "\n" not in msg, err
    return status


def load_seeds() -> list[tuple[str, bytes]]:
    seeds = []
    for p in sorted(SEEDS_DIR.iterdir()):
        data = p.read_bytes()
        seeds.append((chr(data[0]), data[1:]))
    assert len(seeds) >= 16, f"seed corpus missing from {SEEDS_DIR}"
    return seeds


@pytest.fixture(scope="module")
def server():
    s = Server(synth_model(), "--max-model-len", str(CTX), "--max-request-bytes", str(MAX_BODY),
               "--timeout-keep-alive", "2", "--max-num-seqs", "8")
    yield s
    assert s.stop() == 0, s.log


def still_serving(server):
    r = requests.post(server.url + "/v1/completions", json=PROBE, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


def test_deep_nesting_is_refused_and_the_server_survives(server):
    """30,000 nested arrays (60 KB, under the body limit) where a chat template or the SSE writer
    would copy or print them: the JSON library recurses per level there, so before the depth bound
    this overflowed an HTTP thread's stack (seen under ASan) and killed the server."""
    deep = b"[" * 30000 + b"]" * 30000
    bodies = [
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"a": '
         + deep + b"}}"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}, ' + deep + b"]}"),
        ("/v1/messages", b'{"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": ' + deep + b"}"),
        ("/tokenize", b'{"messages": [{"role": "user", "content": "x"}], "tools": ' + deep + b"}"),
    ]
    for path, body in bodies:
        raw = request_bytes(path, body, content_length=len(body))
        assert check_response(send_raw(server.port, raw, half_close=False), path, False) == 400
        assert server.proc.poll() is None, server.log[-3000:]
    # Deeply nested JSON text inside a string (assistant tool-call arguments) is refused too.
    args = json.dumps({"a": json.loads("[" * 100 + "]" * 100)})[:-1] + "," + '"b": ' + "[" * 3000 + "]" * 3000 + "}"
    r = requests.post(server.url + "/v1/chat/completions", timeout=60, json={"max_tokens": 1, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})
    assert r.status_code == 400, r.text
    still_serving(server)


def test_mutated_requests_get_one_line_4xx_and_the_server_keeps_serving(server):
    rng = random.Random(SEED)
    seeds = load_seeds()
    statuses: dict[int, int] = {}
    for case in range(CASES):
        ep, seed_body = rng.choice(seeds)
        path = PATHS[ep]
        layer = rng.random()
        try:
            body = json.loads(seed_body)
        except (ValueError, UnicodeDecodeError):
            body = None
        if body is not None and layer < 0.55:
            kind, data = "json", dump(mutate_json(rng, body))
            raw, silent = request_bytes(path, data, content_length=len(data)), False
        elif layer < 0.8:
            data = mutate_bytes(rng, seed_body)
            kind, raw, silent = "bytes", request_bytes(path, data, content_length=len(data)), False
        else:
            kind, raw, silent = http_case(rng, path, seed_body)
        try:
            status = check_response(send_raw(server.port, raw, half_close=silent), path, silent)
        except AssertionError as e:
            pytest.fail(f"case {case} (seed {SEED}, {kind}) to {path}: {e}\nrequest: {raw[:1500]!r}")
        statuses[status] = statuses.get(status, 0) + 1
        assert server.proc.poll() is None, f"server died at case {case} ({kind}):\n{server.log[-5000:]}"
        if case % 50 == 49:
            still_serving(server)
    still_serving(server)
    # A fuzzer that only ever saw 400s or only 200s would test little: both must occur.
    assert statuses.get(400, 0) > CASES // 10 and statuses.get(200, 0) > 0, statuses
    deadline = time.time() + 30
    while metric(server.metrics(), "mla:num_requests_running") != 0:
        assert time.time() < deadline, "requests still running after the fuzz run"
        time.sleep(0.1)
