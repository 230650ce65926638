"""Prompt processing and decode speed: mla.cpp against llama.cpp's llama-bench, same GGUF, same run.

    python3 tools/llama-cpp/bench_compare.py MODEL.gguf [MODEL.gguf ...] [-p 128] [-n 64] [-t 2]
        [--reps 5] [--mla build/mla] [--llama-bench PATH] [--json OUT.json]

For each file and repetition, interleaved so that both tools see the same machine load:
  - llama-bench -p P -n N -r 1 (--repack 0: llama.cpp 0.3.36 aborts on these files with CPU
    weight repacking) -> pp (P prompt tokens in one batch) and tg (N tokens decoded from an empty
    context) tokens/s;
  - mla run --warmup --tokens (P ids) -n 1 -> prefill tokens/s; mla run --warmup --tokens (1 id)
    -n N+1 --ignore-eos -> decode tokens/s of the N tokens after the first (from position 1, like
    tg). --warmup runs one untimed request first, as llama-bench warms up before measuring.
Prompt ids are fixed pseudo-random ids (seed 1) below the vocabulary size. Prints the median and
best of each and the ratio mla.cpp / llama.cpp of the medians, as a markdown table.
llama-bench is built by tools/llama-cpp/build-perplexity.sh.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_json(cmd: list[str]):
    p = subprocess.run(cmd, capture_output=True, check=False, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_compare: {' '.join(cmd[:4])} ... failed ({p.returncode}):\n{p.stderr[-1500:]}")
    return json.loads(p.stdout)


def n_vocab(mla: str, model: str) -> int:
    out = run_json([mla, "gguf", "inspect", model, "--json"])
    for kv in out.get("metadata", []):
        if kv.get("key") == "tokenizer.ggml.tokens":
            return int(kv.get("count") or len(kv.get("value", [])))
    return 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=0, help="ids are drawn below this (default: from the file, else 1000)")
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--llama-bench", default=str(Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-bench"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    results = {}
    for model in args.models:
        vocab = args.vocab or n_vocab(args.mla, model)
        rng = random.Random(1)
        prompt = ",".join(str(rng.randrange(5, vocab)) for _ in range(args.p))
        r = {"llama_pp": [], "llama_tg": [], "mla_pp": [], "mla_tg": []}
        for _ in range(args.reps):
            for e in run_json([args.llama_bench, "-m", model, "-p", str(args.p), "-n", str(args.n), "-t", str(args.t),
                               "-r", "1", "--repack", "0", "-o", "json"]):
                r["llama_pp" if e["n_prompt"] > 0 else "llama_tg"].append(e["avg_ts"])
            j = run_json([args.mla, "run", "-m", model, "--tokens", prompt, "-n", "1", "-t", str(args.t), "--json",
                          "--warmup", "--log-level", "warn"])
            r["mla_pp"].append(j["prefill_tokens_per_second"])
            j = run_json([args.mla, "run", "-m", model, "--tokens", prompt.split(",")[0], "-n", str(args.n + 1),
                          "--ignore-eos", "-t", str(args.t), "--json", "--warmup", "--log-level", "warn"])
            r["mla_tg"].append(j["decode_tokens_per_second"])
        results[model] = r

    print(f"{args.reps} interleaved repetitions, {args.t} threads; pp{args.p} = a {args.p}-token prompt in one "
          f"batch, tg{args.n} = {args.n} tokens decoded one at a time\n")
    print("| model | test | mla.cpp median (best) tok/s | llama.cpp median (best) tok/s | mla/llama |")
    print("|---|---|---:|---:|---:|")
    for model, r in results.items():
        for test, key in ((f"pp{args.p}", "pp"), (f"tg{args.n}", "tg")):
            m, l = r[f"mla_{key}"], r[f"llama_{key}"]
            print(f"| {Path(model).name} | {test} | {statistics.median(m):.1f} ({max(m):.1f}) | "
                  f"{statistics.median(l):.1f} ({max(l):.1f}) | {statistics.median(m) / statistics.median(l):.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
