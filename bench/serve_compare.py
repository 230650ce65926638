#!/usr/bin/env python3
"""Serving throughput of `mla serve` against llama.cpp's `llama-server` on the same GGUF.

For each stream count, each engine in turn (the order alternates from one point to the next, so
the runs are interleaved): start the server on a free port with the same thread count, wait for
/health, send one warm-up request, then S concurrent clients each send streaming
/v1/completions requests back to back for --duration seconds (every client at least one): the
same prompts for both engines (seeded random words, one per client and request), temperature 0,
a fixed max_tokens with EOS ignored (`ignore_eos`, which both servers accept), then stop the
server. Reported per run: aggregate output tokens/s (all output tokens over the time from the
first request to the last token), TTFT and inter-token latency p50/p99, the server's CPU seconds
(from /proc) and output tokens per CPU second, and the load average before and after.

    bench/serve_compare.py models/tiny-q8_0.gguf --streams 1,4,16,64 --duration 60 -t 2 \\
        --llama-server ~/.cache/mla/llama.cpp-0.3.36-build/bin/llama-server --llama-arg=-nr --json out.json

llama-server gets --parallel S slots (one per stream), -c S x --slot-ctx (a context for every
slot), -t/-tb = the thread count, and otherwise its defaults (continuous batching on, -b 2048,
-ub 512). mla serve gets -t and its defaults (--max-num-seqs 64, --max-num-batched-tokens 2048,
prefix cache on). Extra flags: --mla-arg / --llama-arg (repeat; `--llama-arg=-nr` turns off
llama.cpp's CPU weight repacking, which 0.3.36 needs for these deepseek2 files: with it on, the
server aborts at start-up in ggml_backend_sched_split_graph). Only the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import StreamEvents, free_port, http_request, launch, make_prompt, ms, pct


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def server_cmd(engine: str, args, streams: int, port: int) -> list[str]:
    common = ["-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads)]
    if engine == "mla":
        return [args.mla_bin, "serve", *common, *args.mla_arg]
    return [
        args.llama_server,
        *common,
        "-tb",
        str(args.threads),
        "--parallel",
        str(streams),
        "-c",
        str(streams * args.slot_ctx),
        *args.llama_arg,
    ]


def start(engine: str, args, streams: int, log: Path) -> tuple[subprocess.Popen, str, list[str]]:
    port = free_port()
    cmd = server_cmd(engine, args, streams, port)
    proc, url = launch(cmd, port, log, f"{engine} server", 300)
    return proc, url, cmd


def prompt(seed: int, client: int, k: int, n_words: int) -> str:
    return make_prompt(random.Random(f"{seed}/{client}/{k}"), n_words)


async def one_request(host: str, port: int, body: dict) -> dict:
    events = StreamEvents()
    t0 = time.monotonic()
    status, data = await http_request(host, port, "/v1/completions", json.dumps(body).encode(), events)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
    n = events.usage.get("completion_tokens", len(events.times))
    return {
        "t0": t0,
        "times": events.times,
        "tokens": n,
        "from_usage": "completion_tokens" in events.usage,
        "finish": events.finish[-1] if events.finish else None,
    }


async def load(url: str, model_name: str, args, streams: int) -> list[dict]:
    host, port = url.split("//")[1].split(":")
    port = int(port)
    deadline = time.monotonic() + args.duration
    results: list = []

    async def client(c: int):
        k = 0
        while k == 0 or time.monotonic() < deadline:
            body = {
                "model": model_name,
                "prompt": prompt(args.seed, c, k, args.prompt_words),
                "max_tokens": args.max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            results.append(await one_request(host, port, body))
            k += 1

    await asyncio.gather(*(client(c) for c in range(streams)))
    return results


def measure(engine: str, args, streams: int) -> dict:
    log = Path(args.log_dir) / f"serve_compare-{engine}-{streams}.log"
    proc, url, cmd = start(engine, args, streams, log)
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            model_name = json.loads(r.read())["data"][0]["id"]
        warm = {
            "model": model_name,
            "prompt": prompt(args.seed, -1, 0, args.prompt_words),
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        host, port = url.split("//")[1].split(":")
        asyncio.run(one_request(host, int(port), warm))
        load_before = os.getloadavg()
        cpu0 = cpu_seconds(proc.pid)
        t_start = time.monotonic()
        results = asyncio.run(load(url, model_name, args, streams))
        cpu = cpu_seconds(proc.pid) - cpu0
        load_after = os.getloadavg()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    t_end = max(r["times"][-1] if r["times"] else r["t0"] for r in results)
    elapsed = t_end - t_start
    tokens = sum(r["tokens"] for r in results)
    short = [r for r in results if r["tokens"] != args.max_tokens or r["finish"] != "length"]
    ttft = [r["times"][0] - r["t0"] for r in results if r["times"]]
    itl = [b - a for r in results for a, b in zip(r["times"], r["times"][1:])]
    return {
        "engine": engine,
        "streams": streams,
        "command": " ".join(cmd),
        "requests": len(results),
        "output_tokens": tokens,
        "tokens_from_usage": all(r["from_usage"] for r in results),
        "requests_not_max_tokens": len(short),
        "elapsed_s": round(elapsed, 2),
        "output_tokens_per_s": round(tokens / elapsed, 2),
        "ttft_ms": {"p50": ms(pct(ttft, 50)), "p99": ms(pct(ttft, 99))},
        "itl_ms": {"p50": ms(pct(itl, 50)), "p99": ms(pct(itl, 99))},
        "cpu_s": round(cpu, 2),
        "tokens_per_cpu_s": round(tokens / cpu, 2) if cpu > 0 else None,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GGUF file both servers load")
    ap.add_argument("--streams", default="1,4,16,64", help="comma-separated concurrent stream counts")
    ap.add_argument("--engines", default="mla,llama", help="order at the first point (alternates after)")
    ap.add_argument("--duration", type=float, default=60, help="seconds of load per run")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=48, help="words per prompt (a word is 1-2 tokens)")
    ap.add_argument("--slot-ctx", type=int, default=256, help="llama-server context per slot (-c = S x this)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mla-bin", default=os.environ.get("MLA_BIN", "build/mla"))
    ap.add_argument("--llama-server", default=str(Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-server"))
    ap.add_argument("--mla-arg", action="append", default=[], help="extra `mla serve` argument (repeat)")
    ap.add_argument("--llama-arg", action="append", default=[], help="extra llama-server argument (repeat)")
    ap.add_argument("--log-dir", default=".", help="where the servers' logs go")
    ap.add_argument("--json", help="append the rows (one JSON object per line) here")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows = []
    for i, s in enumerate(int(x) for x in args.streams.split(",")):
        order = engines if i % 2 == 0 else engines[::-1]
        point = {e: measure(e, args, s) for e in order}
        for e in order:
            r = point[e]
            rows.append(r)
            print(json.dumps(r), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
        if "mla" in point and "llama" in point:
            ratio = point["mla"]["output_tokens_per_s"] / point["llama"]["output_tokens_per_s"]
            print(
                f"streams {s}: mla {point['mla']['output_tokens_per_s']} tok/s, llama-server "
                f"{point['llama']['output_tokens_per_s']} tok/s, ratio {ratio:.2f}",
                file=sys.stderr,
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
