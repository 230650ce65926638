"""Single-thread encode throughput: mla.cpp vs HF tokenizers on the same corpus.

    .venv/bin/python tools/bench_tokenizer.py [--mla build/mla] [--passes 5]

Corpus: tests/py/tokenizer_corpus.py (≥1.1 MB, ~8.7k items). Vocabulary: DeepSeek-V3 from
tests/fixtures/tokenizers/deepseek-v3, converted with `mla gguf vocab-from-hf`. Both sides encode
the items one by one without special-token insertion (add_special_tokens=False; special tokens
in the text are parsed by both), one warm-up pass then the best of --passes timed passes.
HF runs single-threaded (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false) through
encode_batch (one call for all items) and through a Python loop of encode() calls.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))
import tokenizer_corpus


def best_of(passes, fn):
    """(best wall seconds, best process-CPU seconds) over `passes` runs after one warm-up run."""
    fn()  # warm-up (fills the BPE caches)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(passes):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best_cpu = min(best_cpu, time.process_time() - c)
        best = min(best, time.perf_counter() - t)
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mla", default=str(ROOT / "build" / "mla"))
    ap.add_argument("--tokenizer-dir", default=str(ROOT / "tests" / "fixtures" / "tokenizers" / "deepseek-v3"))
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()

    items = tokenizer_corpus.build_corpus()
    n_bytes = tokenizer_corpus.corpus_bytes(items)
    with tempfile.TemporaryDirectory() as tmp:
        gguf = pathlib.Path(tmp) / "vocab.gguf"
        subprocess.run([args.mla, "gguf", "vocab-from-hf", args.tokenizer_dir, "-o", gguf], check=True,
                       capture_output=True)
        corpus = pathlib.Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
        r = subprocess.run([args.mla, "tokenize", "-m", gguf, "--bench", corpus, "--bench-passes", str(args.passes)],
                           check=True, capture_output=True, text=True)
        mla = json.loads(r.stdout)

    hf = Tokenizer.from_file(str(pathlib.Path(args.tokenizer_dir) / "tokenizer.json"))
    t_batch = best_of(args.passes, lambda: hf.encode_batch(items, add_special_tokens=False))
    t_loop = best_of(args.passes, lambda: [hf.encode(x, add_special_tokens=False) for x in items])
    n_tokens = sum(len(e.ids) for e in hf.encode_batch(items, add_special_tokens=False))
    assert n_tokens == mla["tokens"], (n_tokens, mla["tokens"])

    rows = [("mla.cpp (mla tokenize --bench)", (mla["seconds"], mla["cpu_seconds"])),
            ("HF tokenizers encode_batch, 1 thread", t_batch),
            ("HF tokenizers encode() loop, 1 thread", t_loop)]
    print(f"corpus: {len(items)} items, {n_bytes} bytes, {n_tokens} tokens; best of {args.passes} passes after warm-up")
    print(f"mla.cpp first (cold-cache) pass: {mla['first_pass_mb_per_s']:.2f} MB/s wall")
    print("| encoder | MB/s (wall) | MB/s (CPU time) | mla.cpp speed-up (CPU time) |")
    print("|---|---:|---:|---:|")
    for name, (sec, cpu) in rows:
        print(f"| {name} | {n_bytes / sec / 1e6:.2f} | {n_bytes / cpu / 1e6:.2f} | {cpu / mla['cpu_seconds']:.1f}x |")

if __name__ == "__main__":
    main()
