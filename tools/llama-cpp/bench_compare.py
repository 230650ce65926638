"""Prompt processing and decode speed: mla.cpp against llama.cpp's llama-bench, same GGUF, same run.

    python3 tools/llama-cpp/bench_compare.py MODEL.gguf [MODEL.gguf ...] [-p 512] [-n 128] [-d 0,4096]
        [-t 2] [--reps 5] [--repack auto|0|1] [--mla build/mla] [--llama-bench PATH] [--json OUT.json]

For each file and repetition, interleaved so that both tools see the same machine load:
  - llama-bench -p P -n N -d D -r 1 -> ppP (P prompt tokens in one batch) and tgN (N tokens
    decoded after D context tokens; D = 0: from an empty context) tokens/s. Repacking (llama.cpp's
    CPU weight repack, its default) is on with --repack 1, off with 0; auto (the default) tries it
    on and falls back to off for a file where llama-bench fails with it (llama.cpp 0.3.36 aborts on
    some deepseek2 files with repacking), and the table says which was used;
  - mla bench -p P -n N -d D -r 1 --json: the same tests through mla.cpp's serving engine (one
    untimed warm-up per test, as llama-bench does).
Prints the median and best of each and the ratio mla.cpp / llama.cpp of the medians, as a
markdown table. llama-bench is built by tools/llama-cpp/build-perplexity.sh.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_json(cmd: list[str]):
    p = subprocess.run(cmd, capture_output=True, check=False, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_compare: {' '.join(cmd[:4])} ... failed ({p.returncode}):\n{p.stderr[-1500:]}")
    return json.loads(p.stdout)


def llama_rows(args, model: str, repack: str):
    cmd = [args.llama_bench, "-m", model, "-p", str(args.p), "-n", str(args.n), "-d", args.d, "-t", str(args.t),
           "-r", "1", "--repack", repack, "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)  # noqa: PLW1510 (the caller checks the return code)
    if p.returncode != 0:
        return None, p.stderr[-1500:]
    return json.loads(p.stdout), ""


def test_name(e) -> str:
    base = f"pp{e['n_prompt']}" if e["n_prompt"] > 0 else f"tg{e['n_gen']}"
    return base + (f"@d{e['n_depth']}" if e.get("n_depth", 0) > 0 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-d", default="0", help="context depths, comma-separated (llama-bench applies them to pp too; "
                    "mla bench to tg only, so only tg rows are compared at depth)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--repack", choices=["auto", "0", "1"], default="auto")
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--llama-bench", default=str(Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-bench"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    results = {}
    for model in args.models:
        r: dict[str, dict[str, list[float]]] = {}
        repack = "1" if args.repack in ("auto", "1") else "0"
        for _ in range(args.reps):
            rows, err = llama_rows(args, model, repack)
            if rows is None and args.repack == "auto" and repack == "1":
                repack = "0"
                rows, err = llama_rows(args, model, repack)
            if rows is None:
                raise SystemExit(f"bench_compare: llama-bench failed on {model}:\n{err}")
            for e in rows:
                r.setdefault(test_name(e), {"llama": [], "mla": []})["llama"].append(e["avg_ts"])
            for e in run_json([args.mla, "bench", "-m", model, "-p", str(args.p), "-n", str(args.n), "-d", args.d,
                               "-t", str(args.t), "-r", "1", "--json", "--log-level", "warn"]):
                r.setdefault(e["test"], {"llama": [], "mla": []})["mla"].append(e["avg_ts"])
        results[model] = {"repack": repack, "tests": r}

    print(f"{args.reps} interleaved repetitions, {args.t} threads; ppP = a P-token prompt in one batch, tgN = N "
          f"tokens decoded one at a time (@dD: after a D-token context)\n")
    print("| model | llama.cpp repack | test | mla.cpp median (best) tok/s | llama.cpp median (best) tok/s | mla/llama |")
    print("|---|---|---|---:|---:|---:|")
    for model, res in results.items():
        for test, v in res["tests"].items():
            m, l = v["mla"], v["llama"]
            if not m or not l:
                continue
            print(f"| {Path(model).name} | {'on' if res['repack'] == '1' else 'off'} | {test} | "
                  f"{statistics.median(m):.1f} ({max(m):.1f}) | {statistics.median(l):.1f} ({max(l):.1f}) | "
                  f"{statistics.median(m) / statistics.median(l):.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
