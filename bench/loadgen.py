#!/usr/bin/env python3
"""Load generator and soak test for `mla serve` (or any OpenAI-compatible server).

K concurrent clients, each sending one request after another for T seconds: a mix of
/v1/completions and /v1/chat/completions, streaming and not, temperatures, n > 1, stop strings,
logprobs and prompt lengths; a share of clients hang up mid-stream, a share of requests are
malformed (they must get a 4xx). Reports requests, output tokens/s, TTFT and inter-token latency
p50/p99, 4xx/5xx counts, lost streams, and every --sample-every seconds the server's resident
memory, KV cache usage and running requests (from /proc and /metrics).

    # against a running server (PID for its memory):
    bench/loadgen.py --url http://127.0.0.1:8080 --pid 1234 --clients 256 --duration 600
    # or start one:
    bench/loadgen.py --model models/tiny-q8_0.gguf --clients 256 --duration 600 --json out.json

--check exits 1 unless: no 5xx, no lost stream, no 4xx for a good request, every malformed
request a 4xx, running requests and KV usage back to 0 at the end, and resident memory growth
from the first sample to the last under --max-rss-growth (5%). Only the standard library.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

WORDS = ["the", "a", "of", "to", "in", "is", "for", "on", "with", "as", "by", "an", "be", "this", "that", "are",
         "from", "at", "or", "it", "which", "not", "can", "function", "return", "value", "list", "string",
         "object", "module", "class", "method", "file", "data", "type", "error"]

MALFORMED = [
    ("/v1/completions", b'{"prompt": "x", "max_tokens": -5}'),
    ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1e999}'),
    ("/v1/completions", b'{"prompt": "x", "n": 0}'),
    ("/v1/completions", b'{"prompt": '),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"abc": 1}}'),
    ("/v1/completions", b'{"prompt": [1, 2, -7]}'),
    ("/v1/chat/completions", b'{"messages": []}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}]}'),
    ("/v1/chat/completions", b'{"messages": "hi"}'),
    ("/v1/chat/completions", b'\xff\xfe not json'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_p": NaN}'),
]


@dataclass
class Stats:
    requests: int = 0
    ok: int = 0
    streams: int = 0
    disconnects: int = 0
    malformed: int = 0
    malformed_4xx: int = 0
    status_4xx: int = 0
    status_5xx: int = 0
    unexpected_4xx: int = 0
    lost_streams: int = 0
    errors: list = field(default_factory=list)
    output_tokens: int = 0
    ttft: list = field(default_factory=list)
    itl: list = field(default_factory=list)
    latency: list = field(default_factory=list)

    def error(self, what: str):
        if len(self.errors) < 20:
            self.errors.append(what)


class HttpError(Exception):
    pass


async def http_request(host: str, port: int, path: str, body: bytes, on_event=None, stop_after=None):
    """POST with Connection: close. Returns (status, body). For SSE, on_event(payload) is called
    per `data:` event as it arrives; stop_after: hang up after that many events (returns None)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if headers.get("transfer-encoding") != "chunked":
            n = int(headers.get("content-length", "0"))
            return status, await reader.readexactly(n)
        data = b""
        pending = b""
        n_events = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, data
            chunk = await reader.readexactly(size + 2)
            data += chunk[:-2]
            if on_event is None:
                continue
            pending += chunk[:-2]
            while b"\n\n" in pending:
                ev, _, pending = pending.partition(b"\n\n")
                if ev.startswith(b"data: "):
                    on_event(ev[6:])
                    n_events += 1
                    if stop_after is not None and n_events >= stop_after:
                        return None
    finally:
        writer.close()


@dataclass
class StreamEvents:
    """An on_event for http_request on a streamed completion: when each event carrying text
    arrived (time.monotonic()), the usage, the finish reasons, and whether [DONE] came."""
    times: list = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    finish: list = field(default_factory=list)
    done: bool = False

    def __call__(self, payload: bytes):
        if payload == b"[DONE]":
            self.done = True
            return
        ev = json.loads(payload)
        if ev.get("usage"):
            self.usage.update(ev["usage"])
        choices = ev.get("choices", [])
        if any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices):
            self.times.append(time.monotonic())
        self.finish.extend(c["finish_reason"] for c in choices if c.get("finish_reason"))


def make_prompt(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def pct(values: list, p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


async def client(cid: int, args, stats: Stats, deadline: float, host: str, port: int, max_len: int):
    rng = random.Random(args.seed * 100003 + cid)
    hangs_up = rng.random() < args.disconnect_share
    while time.monotonic() < deadline:
        stats.requests += 1
        t0 = time.monotonic()
        if rng.random() < args.malformed_share:
            stats.malformed += 1
            path, body = rng.choice(MALFORMED)
            try:
                status, _ = await http_request(host, port, path, body)
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                stats.status_5xx += 1
                stats.error(f"malformed request: connection error {e!r}")
                continue
            if 400 <= status < 500:
                stats.malformed_4xx += 1
                stats.status_4xx += 1
            else:
                stats.status_5xx += status >= 500
                stats.error(f"malformed request {body[:60]!r} answered {status}")
            continue
        chat = rng.random() < 0.5
        stream = rng.random() < args.stream_share
        # A word is one or two tokens: keep the prompt and the output inside the context.
        n_words = min(rng.choice(args.prompt_words), max(1, (max_len - 64 - args.min_tokens) // 2))
        max_tokens = rng.randint(args.min_tokens, args.max_tokens)
        max_tokens = max(1, min(max_tokens, max_len - 2 * n_words - 64))
        req: dict = {"max_tokens": max_tokens, "temperature": rng.choice([0.0, 0.7, 1.0]),
                     "seed": rng.randrange(1 << 30)}
        if args.model_name:
            req["model"] = args.model_name
        if rng.random() < 0.15:
            req["n"] = 2
        if rng.random() < 0.2:
            req["stop"] = [rng.choice(WORDS)]
        if chat:
            path = "/v1/chat/completions"
            req["messages"] = [{"role": "user", "content": make_prompt(rng, n_words)}]
            if rng.random() < 0.2:
                req["logprobs"], req["top_logprobs"] = True, 2
        else:
            path = "/v1/completions"
            req["prompt"] = make_prompt(rng, n_words)
            if rng.random() < 0.2:
                req["logprobs"] = 2
        if stream:
            req["stream"] = True
            req["stream_options"] = {"include_usage": True}
        body = json.dumps(req).encode()
        events = StreamEvents()
        stop_after = rng.randint(1, 8) if stream and hangs_up and rng.random() < 0.5 else None
        try:
            res = await http_request(host, port, path, body, events if stream else None, stop_after)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            if stream:
                stats.lost_streams += 1
            stats.error(f"{path}: connection error {e!r}")
            continue
        if res is None:  # hung up on purpose
            stats.disconnects += 1
            continue
        status, data = res
        if status >= 500:
            stats.status_5xx += 1
            stats.error(f"{path} {status}: {data[:200]!r}")
            continue
        if status >= 400:
            stats.status_4xx += 1
            stats.unexpected_4xx += 1
            stats.error(f"{path} {status}: {data[:200]!r}")
            continue
        stats.ok += 1
        stats.latency.append(time.monotonic() - t0)
        if stream:
            stats.streams += 1
            if not events.done:
                stats.lost_streams += 1
                stats.error(f"{path}: stream ended without [DONE]")
            if events.times:
                stats.ttft.append(events.times[0] - t0)
                stats.itl.extend(b - a for a, b in itertools.pairwise(events.times))
            stats.output_tokens += events.usage.get("completion_tokens", 0)
        else:
            stats.output_tokens += json.loads(data)["usage"]["completion_tokens"]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def read_metrics(url: str) -> dict:
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name.split("{")[0]] = float(value)
    return out


def rss_mib(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def sampler(args, url: str, pid: int | None, samples: list, t_start: float, deadline: float):
    loop = asyncio.get_running_loop()
    while True:
        m = await loop.run_in_executor(None, read_metrics, url)
        samples.append({"t": round(time.monotonic() - t_start, 1), "rss_mib": rss_mib(pid),
                        "kv_usage": m.get("mla:kv_cache_usage_perc"),
                        "running": m.get("mla:num_requests_running"),
                        "waiting": m.get("mla:num_requests_waiting")})
        s = samples[-1]
        print(f"  t={s['t']:7.1f}s rss={s['rss_mib']} MiB kv={s['kv_usage']} running={s['running']} "
              f"waiting={s['waiting']}", file=sys.stderr, flush=True)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(args.sample_every, remaining))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cmd: list[str], port: int, log: str | Path, what: str, ready_s: float) -> tuple[subprocess.Popen, str]:
    """Starts the server cmd (listening on 127.0.0.1:port, stderr to log) and waits up to ready_s
    seconds for /health to answer 200. Returns (process, base URL); exits naming `what` and the log
    when the server dies or is not ready in time."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + ready_s
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}: {' '.join(cmd)} (log: {log})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"{what} not ready in {ready_s:g} s (log: {log})")


def start_server(args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [args.mla_bin, "serve", "-m", args.model, "--port", str(port), *args.serve_arg]
    return launch(cmd, port, args.server_log, "mla serve", 120)


async def run(args) -> dict:
    proc = None
    url, pid = args.url, args.pid
    if args.model:
        proc, url = start_server(args)
        pid = proc.pid
    host, port = url.split("//")[1].split(":")
    port = int(port.rstrip("/"))
    try:
        card = get_json(url + "/v1/models")["data"][0]
        max_len = int(card.get("max_model_len", 2048))
        if not args.model_name:
            args.model_name = card["id"]
        stats = Stats()
        samples: list = []
        t_start = time.monotonic()
        deadline = t_start + args.duration
        clients = [client(i, args, stats, deadline, host, port, max_len) for i in range(args.clients)]
        await asyncio.gather(sampler(args, url, pid, samples, t_start, deadline), *clients)
        elapsed = time.monotonic() - t_start
        # Drained: nothing running, the cache empty (blocks held by the prefix cache are free).
        drain_deadline = time.monotonic() + 60
        while True:
            m = read_metrics(url)
            if (m.get("mla:num_requests_running") == 0 and m.get("mla:kv_cache_usage_perc") == 0) or \
                    time.monotonic() > drain_deadline:
                break
            await asyncio.sleep(0.2)
        final = {"rss_mib": rss_mib(pid), "kv_usage": m.get("mla:kv_cache_usage_perc"),
                 "running": m.get("mla:num_requests_running"), "waiting": m.get("mla:num_requests_waiting")}
        rss = [s["rss_mib"] for s in samples if s["rss_mib"] is not None]
        growth = (rss[-1] / rss[1] - 1) if len(rss) >= 3 else (rss[-1] / rss[0] - 1 if len(rss) >= 2 else None)
        result = {
            "clients": args.clients, "duration_s": round(elapsed, 1), "requests": stats.requests,
            "ok": stats.ok, "streams": stats.streams, "disconnects": stats.disconnects,
            "malformed": stats.malformed, "malformed_4xx": stats.malformed_4xx,
            "status_4xx": stats.status_4xx, "status_5xx": stats.status_5xx,
            "unexpected_4xx": stats.unexpected_4xx, "lost_streams": stats.lost_streams,
            "output_tokens": stats.output_tokens,
            "output_tokens_per_s": round(stats.output_tokens / elapsed, 1),
            "requests_per_s": round(stats.ok / elapsed, 2),
            "ttft_ms": {"p50": ms(pct(stats.ttft, 50)), "p99": ms(pct(stats.ttft, 99))},
            "itl_ms": {"p50": ms(pct(stats.itl, 50)), "p99": ms(pct(stats.itl, 99))},
            "latency_s": {"p50": rnd(pct(stats.latency, 50)), "p99": rnd(pct(stats.latency, 99)),
                          "mean": rnd(statistics.fmean(stats.latency) if stats.latency else None)},
            "samples": samples, "final": final,
            "rss_growth": None if growth is None else round(growth, 4),
            "errors": stats.errors,
        }
        if proc:
            proc.send_signal(signal.SIGTERM)
            result["server_exit"] = proc.wait(60)
        return result
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()


def ms(v):
    return None if v is None else round(v * 1000, 1)


def rnd(v):
    return None if v is None else round(v, 3)


def failures(r: dict, max_growth: float) -> list[str]:
    out = []
    if r["status_5xx"]:
        out.append(f"{r['status_5xx']} 5xx")
    if r["lost_streams"]:
        out.append(f"{r['lost_streams']} lost streams")
    if r["unexpected_4xx"]:
        out.append(f"{r['unexpected_4xx']} good requests got a 4xx")
    if r["malformed_4xx"] != r["malformed"]:
        out.append(f"{r['malformed'] - r['malformed_4xx']} malformed requests not answered 4xx")
    if r["final"]["running"] != 0 or r["final"]["kv_usage"] != 0:
        out.append(f"not drained at the end: {r['final']}")
    if r["rss_growth"] is not None and r["rss_growth"] > max_growth:
        out.append(f"resident memory grew {r['rss_growth']:.1%} (limit {max_growth:.0%})")
    if r.get("server_exit", 0) != 0:
        out.append(f"server exited with {r['server_exit']}")
    if r["ok"] == 0:
        out.append("no request succeeded")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--pid", type=int, help="the server's PID, for its resident memory (with --url)")
    ap.add_argument("--model", help="start `mla serve -m MODEL` instead of using --url")
    ap.add_argument("--mla-bin", default=os.environ.get("MLA_BIN", "build/mla"))
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `mla serve` argument (repeat)")
    ap.add_argument("--server-log", default="loadgen-server.log")
    ap.add_argument("--model-name", default="", help="model field to send (default: the server's)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=20, help="seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-words", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16, 64, 200])
    ap.add_argument("--min-tokens", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--stream-share", type=float, default=0.7)
    ap.add_argument("--disconnect-share", type=float, default=0.2, help="share of clients that hang up")
    ap.add_argument("--malformed-share", type=float, default=0.1, help="share of requests that are malformed")
    ap.add_argument("--sample-every", type=float, default=60, help="seconds between memory/metrics samples")
    ap.add_argument("--max-rss-growth", type=float, default=0.05)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a reliability criterion fails")
    args = ap.parse_args()
    if not args.url and not args.model:
        ap.error("give --url or --model")
    r = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    summary = {k: v for k, v in r.items() if k not in ("samples", "errors")}
    print(json.dumps(summary, indent=1))
    for e in r["errors"]:
        print("error:", e, file=sys.stderr)
    bad = failures(r, args.max_rss_growth)
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
