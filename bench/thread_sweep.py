"""Thread scaling of mla.cpp on one machine: `mla bench` at each thread count, against what the
per-stage model of docs/PERF.md ("Thread scaling: the per-stage model") says it should show.

    python3 bench/thread_sweep.py MODEL.gguf -t 1,2,4,8,16,32,64 [-p 512] [-n 64] [-r 3]
        [--mla build/mla] [--json OUT.json]

For each thread count T, one process each:
  - mla bench --membw -t T --json: the read bandwidth T threads reach (decode's ceiling);
  - mla bench -m MODEL -p P -n N -t T -r R --json: ppP and tgN, with each forward stage's time and
    bytes per token and the thread-pool regions per token.
Prints one row per T: prompt speed and its parallel efficiency against T x the 1-thread speed
(prefill is compute-bound: it should stay near 1 while T is within the cores of one NUMA node),
decode speed and its share of the bandwidth bound (membw / weight bytes per token: decode should
hold >= 80% of it at every T), the regions per token (constant in T: their cost, a few µs each,
is what grows), and the decode stages' ms per token. Run it on an idle machine; pin with numactl
for one node (`numactl -N 0 -m 0 python3 bench/thread_sweep.py ...`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_json(cmd: list[str]):
    p = subprocess.run(cmd, capture_output=True, check=False, text=True)
    if p.returncode != 0:
        raise SystemExit(f"thread_sweep: {' '.join(cmd[:4])} ... failed ({p.returncode}):\n{p.stderr[-1500:]}")
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("-t", default="1,2,4,8", help="thread counts, comma-separated")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    rows = []
    for t in (int(x) for x in args.t.split(",")):
        bw = run_json([args.mla, "bench", "--membw", "-t", str(t), "--json"])["membw_gbps"]
        tests = run_json([args.mla, "bench", "-m", args.model, "-p", str(args.p), "-n", str(args.n), "-t", str(t),
                          "-r", str(args.r), "--json", "--log-level", "warn"])
        pp = next(e for e in tests if e["n_prompt"] > 0)
        tg = next(e for e in tests if e["n_gen"] > 0)
        rows.append({"threads": t, "membw_gbps": bw, "pp": pp["avg_ts"], "tg": tg["avg_ts"],
                     "tg_bytes": tg["weight_bytes_per_token"], "regions": tg["pool_regions_per_token"],
                     "stages": {s["stage"]: s["seconds_per_token"] for s in tg["stages"]}})

    pp1 = rows[0]["pp"] / rows[0]["threads"]
    stage_names = list(rows[0]["stages"])
    print(f"pp{args.p} and tg{args.n}, {args.r} repetitions each; efficiency = pp / (threads x the first row's "
          "pp per thread); bound = membw / weight bytes per token\n")
    print("| threads | membw GB/s | pp t/s | pp efficiency | tg t/s | tg bound t/s | tg / bound | regions/token | "
          + " | ".join(f"{s} ms" for s in stage_names) + " |")
    print("|" + "---:|" * (8 + len(stage_names)))
    for r in rows:
        bound = r["membw_gbps"] * 1e9 / r["tg_bytes"]
        print(f"| {r['threads']} | {r['membw_gbps']:.1f} | {r['pp']:.1f} | {r['pp'] / (pp1 * r['threads']):.2f} | "
              f"{r['tg']:.1f} | {bound:.1f} | {r['tg'] / bound:.2f} | {r['regions']:.0f} | "
              + " | ".join(f"{1e3 * r['stages'][s]:.3f}" for s in stage_names) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
