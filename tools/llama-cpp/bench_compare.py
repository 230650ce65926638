"""Prompt processing and decode speed: mla.cpp against llama.cpp's llama-bench, same GGUF, same run.

    python3 tools/llama-cpp/bench_compare.py MODEL.gguf [MODEL.gguf ...] [-p 512] [-n 128] [-d 0,4096]
        [-t 2] [--reps 5] [--repack auto|0|1] [--mla build/mla] [--llama-bench PATH] [--ik-bench PATH]
        [--no-llama] [--mla-base PATH] [--json OUT.json]

For each file and repetition, interleaved so that both tools see the same machine load:
  - llama-bench -p P -n N -d D -r 1 -> ppP (P prompt tokens in one batch) and tgN (N tokens
    decoded after D context tokens; D = 0: from an empty context) tokens/s. Repacking (llama.cpp's
    CPU weight repack, its default) is on with --repack 1, off with 0; auto (the default) tries it
    on and falls back to off for a file where llama-bench fails with it (llama.cpp 0.3.36 aborts on
    some deepseek2 files with repacking), and the table says which was used;
  - with --ik-bench: ik_llama.cpp's llama-bench (built outside the repository, target llama-bench)
    with its MLA settings spelled out, -mla 3 -fa 1 -fmoe 1: ppP, tgN, and for each depth D > 0
    -gp D,N (tgN timed after an untimed D-token prompt; its llama-bench has no -d);
  - mla bench -p P -n N -d D -r 1 --json: the same tests through mla.cpp's serving engine (one
    untimed warm-up per test, as llama-bench does);
  - with --mla-base: a second mla binary (e.g. a build of an earlier commit) as one more column,
    so that a change is measured against its base in the same run.
--no-llama leaves llama.cpp out (a run against ik_llama.cpp only: the table says so).
Prints the median and best of each and the ratios of mla.cpp's median to the peers', as a
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


def ik_rows(args, model: str):
    depths = [d for d in (int(x) for x in args.d.split(",")) if d > 0]
    cmd = [args.ik_bench, "-m", model, "-p", str(args.p), "-n", str(args.n), "-t", str(args.t), "-r", "1",
           "-mla", "3", "-fa", "1", "-fmoe", "1", "-o", "json"]
    for d in depths:
        cmd += ["-gp", f"{d},{args.n}"]
    rows = []
    for e in run_json(cmd):
        label = e.get("test", "")
        if "@pp" in label:  # -gp D,N: N tokens decoded after a D-token prompt
            rows.append((f"tg{e['n_gen']}@d{e['n_prompt']}", e["avg_ts"]))
        elif e["n_prompt"] > 0 and e["n_gen"] == 0:
            rows.append((f"pp{e['n_prompt']}", e["avg_ts"]))
        elif e["n_gen"] > 0 and e["n_prompt"] == 0:
            rows.append((f"tg{e['n_gen']}", e["avg_ts"]))
    return rows


def slot(r: dict, name: str) -> dict[str, list[float]]:
    return r.setdefault(name, {"llama": [], "mla": [], "ik": [], "base": []})


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
    ap.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench binary: a third column")
    ap.add_argument("--no-llama", action="store_true", help="do not run llama.cpp's llama-bench")
    ap.add_argument("--mla-base", help="another mla binary, measured the same way: a base column")
    ap.add_argument("--mla-arg", action="append", default=[],
                    help="an extra argument for the mla binary's bench (repeatable), e.g. --mla-arg=--attention-precision=f32")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    results = {}
    for model in args.models:
        r: dict[str, dict[str, list[float]]] = {}
        repack = "1" if args.repack in ("auto", "1") else "0"
        for _ in range(args.reps):
            if not args.no_llama:
                rows, err = llama_rows(args, model, repack)
                if rows is None and args.repack == "auto" and repack == "1":
                    repack = "0"
                    rows, err = llama_rows(args, model, repack)
                if rows is None:
                    raise SystemExit(f"bench_compare: llama-bench failed on {model}:\n{err}")
                for e in rows:
                    slot(r, test_name(e))["llama"].append(e["avg_ts"])
            if args.ik_bench:
                for name, ts in ik_rows(args, model):
                    slot(r, name)["ik"].append(ts)
            for key, binary, extra in (("mla", args.mla, args.mla_arg), ("base", args.mla_base, [])):
                if binary is None:
                    continue
                for e in run_json([binary, "bench", "-m", model, "-p", str(args.p), "-n", str(args.n), "-d", args.d,
                                   "-t", str(args.t), "-r", "1", "--json", "--log-level", "warn", *extra]):
                    slot(r, e["test"])[key].append(e["avg_ts"])
        results[model] = {"repack": repack, "tests": r}

    print(f"{args.reps} interleaved repetitions, {args.t} threads; ppP = a P-token prompt in one batch, tgN = N "
          f"tokens decoded one at a time (@dD: after a D-token context)"
          + ("; llama.cpp not run (--no-llama)" if args.no_llama else "") + "\n")
    ik, base, llama = bool(args.ik_bench), bool(args.mla_base), not args.no_llama
    head = "| model | " + ("llama.cpp repack | " if llama else "") + "test | mla.cpp median (best) tok/s | "
    head += ("base mla median (best) | " if base else "") + ("llama.cpp median (best) tok/s | " if llama else "")
    head += ("ik_llama.cpp median (best) tok/s | " if ik else "") + ("mla/base | " if base else "")
    head += ("mla/llama | " if llama else "") + ("mla/ik |" if ik else "")
    print(head.rstrip())
    n_num = 1 + base + llama + ik + base + llama + ik
    print("|---|" + ("---|" if llama else "") + "---|" + "---:|" * n_num)

    def cell(v: list[float]) -> str:
        return f"{statistics.median(v):.1f} ({max(v):.1f})" if v else "-"

    def ratio(a: list[float], b: list[float]) -> str:
        return f"{statistics.median(a) / statistics.median(b):.2f}" if a and b else "-"

    for model, res in results.items():
        for test, v in res["tests"].items():
            m, l, k, b = v["mla"], v["llama"], v["ik"], v["base"]
            if not m or not (l or k or b):
                continue
            row = f"| {Path(model).name} | " + (f"{'on' if res['repack'] == '1' else 'off'} | " if llama else "")
            row += f"{test} | {cell(m)} | " + (f"{cell(b)} | " if base else "") + (f"{cell(l)} | " if llama else "")
            row += (f"{cell(k)} | " if ik else "") + (f"{ratio(m, b)} | " if base else "")
            row += (f"{ratio(m, l)} | " if llama else "") + (f"{ratio(m, k)} |" if ik else "")
            print(row.rstrip())
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
