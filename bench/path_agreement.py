"""MHA against MQA (and 1-token / chunked prefill, both layouts) per weight type, as `mla doctor`
measures it, with the exact attention kernels and with the F32 ones (--attention-precision f32): the
table of docs/PERF.md, issue 25. The files are tests/py/test_path_agreement.py's (hidden 512,
16 heads of v 64, 3 layers, MoE; synth or random blocks re-encoded by gguf-py).

    .venv/bin/python bench/path_agreement.py [--mla build/mla] [--kv f32] [FILE.gguf ...]

Extra FILEs (e.g. a V2-Lite-width Q4_K_M file) are added as rows. Prints a markdown table: per
file the largest relative logits difference of any variant against MHA and the per-layer maxima.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "py"))

from conftest import run_mla
from test_path_agreement import RANDOM_TYPES, SYNTH_TYPES, model_file


def worst(mla: str, path: Path, kv: str, exact: bool) -> tuple[float, list[float], bool]:
    p = run_mla(mla, "doctor", path, "--json", "--kv-cache-dtype", kv, "-t", "2", "--attention-precision",
                "exact" if exact else "f32", check=False)
    paths = [v for v in json.loads(p.stdout)["paths"] if v["status"] != "n/a"]
    logits = max(v["logits_rel"] for v in paths)
    layers = [max(v["layer_rel"][i] for v in paths) for i in range(len(paths[0]["layer_rel"]))]
    return logits, layers, all(v["greedy_agree"] for v in paths)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--kv", default="f32")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    print("| file | F32 kernels: logits | layers | greedy | exact kernels: logits | layers | greedy |")
    print("|---|---:|---|---|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        files = [(n, model_file(a.mla, Path(tmp), n, dense=False)) for n in SYNTH_TYPES + list(RANDOM_TYPES)]
        files += [(Path(f).name, Path(f)) for f in a.files]
        for name, path in files:
            cells = []
            for exact in (False, True):
                logits, layers, greedy = worst(a.mla, path, a.kv, exact)
                cells += [f"{logits:.1e}", "[" + " ".join(f"{x:.1e}" for x in layers) + "]",
                          "same" if greedy else "DIFFER"]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
