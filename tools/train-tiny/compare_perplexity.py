"""Held-out perplexity of the embedded model across implementations, as a markdown table.

    .venv/bin/python compare_perplexity.py --run main [--mla build/mla] [--llama-perplexity PATH]
                                           [--chunks N] [--ctx 256] [--threads 2] [--out FILE.md]

Rows: transformers float32 (reference.py on the exported HF checkpoint) and, for each GGUF
(runs/RUN/export/model-f16.gguf, models/tiny-q8_0.gguf, models/tiny-q4_k.gguf): `mla perplexity`
with --mla-path mha and mqa, and llama.cpp's own llama-perplexity (built by
tools/llama-cpp/build-perplexity.sh; skipped with a note when the path does not exist). Every run
uses the same text (tests/fixtures/tiny/heldout-test.txt), context and chunk count. Also writes the
raw numbers as JSON next to the markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TEXT = REPO / "tests" / "fixtures" / "tiny" / "heldout-test.txt"


def run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, check=False, text=True)
    if p.returncode != 0:
        raise SystemExit(f"compare: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def last_json(text: str) -> dict:
    """The last line that is a JSON object (libraries may log to the same streams)."""
    return json.loads(next(line for line in reversed(text.splitlines()) if line.startswith("{")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="main")
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--llama-perplexity", default=str(Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-perplexity"))
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    export = HERE / "runs" / args.run / "export"
    files = {"F16": export / "model-f16.gguf", "Q8_0": REPO / "models" / "tiny-q8_0.gguf",
             "Q4_K_M": REPO / "models" / "tiny-q4_k.gguf"}
    rows = []

    t = time.time()
    ref_cmd = [sys.executable, str(HERE / "reference.py"), str(export / "hf"), "perplexity", str(TEXT),
               "-c", str(args.ctx), "--chunks", str(args.chunks), "--json"]
    ref = last_json(run(ref_cmd))
    rows.append({"impl": "transformers 5.24 (float32)", "file": "HF checkpoint", "ppl": ref["ppl"],
                 "err": ref["ppl_error"], "chunks": ref["chunks"], "seconds": time.time() - t})
    print(rows[-1], flush=True)
    for label, path in files.items():
        for path_mode in ("mha", "mqa"):
            out = last_json(run([args.mla, "perplexity", "-m", str(path), "-f", str(TEXT), "-c", str(args.ctx),
                                  "--chunks", str(args.chunks), "-t", str(args.threads), "--mla-path", path_mode,
                                 "--json"]))
            rows.append({"impl": f"mla.cpp --mla-path {path_mode}", "file": label, "ppl": out["ppl"],
                         "err": out["ppl_error"], "chunks": out["chunks"], "seconds": out["seconds"]})
            print(rows[-1], flush=True)
        if Path(args.llama_perplexity).exists():
            t = time.time()
            # -nr (no weight repacking): with repacking, llama.cpp 0.3.36's graph scheduler aborts on
            # this model's F16/Q8_0/Q4_K files (GGML_ASSERT(*cur_backend_id != -1) in
            # ggml_backend_sched_split_graph, AVX-512/AMX CPU); plain CPU buffers compute the same math.
            text = run([args.llama_perplexity, "-m", str(path), "-f", str(TEXT), "-c", str(args.ctx), "-b", str(args.ctx),
                        "--chunks", str(args.chunks), "-t", str(args.threads), "-nr"])
            m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
            n = re.search(r"calculating perplexity over (\d+) chunks", text)
            if not m:
                raise SystemExit(f"compare: no final estimate from llama-perplexity:\n{text[-2000:]}")
            rows.append({"impl": "llama.cpp llama-perplexity (sdist 0.3.36)", "file": label, "ppl": float(m.group(1)),
                         "err": float(m.group(2)), "chunks": int(n.group(1)) if n else None, "seconds": time.time() - t})
            print(rows[-1], flush=True)

    f16_mha = next(r["ppl"] for r in rows if r["file"] == "F16" and r["impl"].endswith("mha"))
    lines = [(f"Held-out split ({TEXT.relative_to(REPO)}, {ref['n_tokens']} tokens), n_ctx {args.ctx}, "
              f"{ref['chunks']} chunks ({ref['scored_tokens']} scored tokens), {args.threads} threads."), "",
             "| implementation | weights | PPL | ± | vs transformers F32 | vs mla.cpp F16 (mha) | seconds |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['impl']} | {r['file']} | {r['ppl']:.4f} | {r['err']:.4f} | "
                     f"{100 * (r['ppl'] / ref['ppl'] - 1):+.3f}% | {100 * (r['ppl'] / f16_mha - 1):+.3f}% | {r['seconds']:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
