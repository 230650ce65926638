"""Runs llama.cpp on the DSA fixtures and records what it produces, for tests/py/test_dsa_llama_cpp.py.

    tools/reference/.venv/bin/python tools/reference/llama_cpp_dsa.py [--bin ~/.cache/mla/llama.cpp-0.3.36-build/bin]

llama.cpp: llama-completion and llama-perplexity built from the llama-cpp-python 0.3.36 sdist by
tools/llama-cpp/build-perplexity.sh (vendored llama.cpp 0c1e570), which runs glm-dsa and deepseek32
with the lightning indexer and top-k (its indexer Hadamard rotation needs an indexer head dim >= 64:
the fixtures use 64). Every cache is F32 (-ctk/-ctv f32: llama.cpp keeps the indexer keys in the
type_k cache), 2 threads.

Per model of tests/fixtures/dsa-reference (glm-dsa-tiny, deepseek32-tiny, glm-dsa-shared-tiny):
 1. greedy continuation: llama-completion, --temp 0, 65 tokens, EOS ignored, prompt PROMPTS[model]. The
    token ids come from the session file that --prompt-cache-all writes (prompt ids, then the
    generated ones; the prompt length from --verbose-prompt); the printed text is checked against
    the first 64 generated ids, which are kept;
 2. perplexity: llama-perplexity on tests/fixtures/tiny/heldout-test.txt, -c 64 (so 56 of the
    64 positions of a chunk have more keys than top_k = 8), the first 8 chunks;
 3. the same continuation by gguf_forward.py (numpy float64, the transformers-equivalent forward):
    its greedy ids and each step's top-1/top-2 margin, and the smallest top-k boundary gap on the
    sequence, so a difference between llama.cpp and transformers is located and explained.
Writes tests/fixtures/dsa-reference/llama-cpp/results.json (commands included).
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_fixtures import DEFAULT_LLAMA_CPP, LLAMA_CPP_PYTHON_VERSION, REPO

import gguf_forward

FIXTURES = REPO / "tests" / "fixtures" / "dsa-reference"
OUT = FIXTURES / "llama-cpp" / "results.json"
DEFAULT_BIN = Path.home() / ".cache" / "mla" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}-build" / "bin"
# Prompt per model, from four candidate sentences: one whose prompt + 64-token continuation has a
# smallest top-k boundary gap (numpy forward) well above f32 rounding (over ~100 tokens, gaps of
# 1e-6..1e-5 are common) and on which llama.cpp's continuation equals transformers'. (glm-dsa-tiny
# with "Attention reads the rows that the indexer picked, and the cache keeps one key per token."
# has a smallest gap of 4.4e-4 and top-1 margins >= 0.02, yet llama.cpp leaves transformers' greedy
# path at step 22: see NOTES.md.)
PROMPTS = {
    "glm-dsa-tiny": "The indexer picks a few keys for every query, and attention reads only those rows.",
    "deepseek32-tiny": "Each layer reads a few selected rows of the cache instead of every row.",
    "glm-dsa-shared-tiny": "The indexer picks a few keys for every query, and attention reads only those rows.",
}
MODELS = list(PROMPTS)
N_GREEDY = 64
PPL_TEXT = "tests/fixtures/tiny/heldout-test.txt"   # relative to the repository root
PPL_CTX, PPL_CHUNKS = 64, 8
SESSION_MAGIC = 0x6767736E  # 'ggsn', llama.cpp's LLAMA_SESSION_MAGIC


def session_tokens(path: Path) -> list[int]:
    """Token ids stored in a llama.cpp session file (magic, version, count, int32 ids, state)."""
    data = path.read_bytes()
    magic, _version, n = struct.unpack_from("<III", data, 0)
    if magic != SESSION_MAGIC:
        raise SystemExit(f"{path}: not a llama.cpp session file")
    return list(struct.unpack_from(f"<{n}i", data, 12))


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, cwd=REPO)  # noqa: PLW1510 (the caller checks the return code)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode(errors="replace")[-4000:])
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}")
    return r


def shown(cmd: list[str], gguf: Path) -> str:
    """The command as committed: binaries by name, paths relative to the repository."""
    out = [Path(cmd[0]).name]
    for a in cmd[1:]:
        if a.endswith(".session"):
            a = "SESSION_FILE"  # a temporary file
        out.append(str(Path(a).relative_to(REPO)) if a.startswith(str(REPO)) else a)
    return " ".join(f"'{a}'" if " " in a else a for a in out)


def decode(keys: dict, ids: list[int]) -> bytes:
    """Byte-level BPE detokenisation from the GGUF vocabulary (GPT-2 byte alphabet)."""
    table = {}
    n = 0
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    tokens, types = keys["tokenizer.ggml.tokens"], keys["tokenizer.ggml.token_type"]
    # control tokens print as nothing (llama.cpp renders specials only with --special)
    return b"".join(b"" if types[i] == 3 else bytes(table[c] for c in tokens[i]) for i in ids)


def numpy_greedy(keys, w, prompt: list[int], n: int) -> tuple[list[int], list[float], float]:
    seq, margins = list(prompt), []
    for _ in range(n):
        last = gguf_forward.forward(keys, w, seq, "mqa")[-1]
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        seq.append(int(last.argmax()))
    info = {}
    gguf_forward.forward(keys, w, seq[:-1], "mqa", info=info)
    gap = min(g for v in info["gaps"].values() for g, _ in v)
    return seq[len(prompt):], margins, gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=DEFAULT_BIN)
    args = ap.parse_args()
    completion, perplexity = args.bin / "llama-completion", args.bin / "llama-perplexity"
    for b in (completion, perplexity):
        if not b.is_file():
            raise SystemExit(f"{b} not found: run tools/llama-cpp/build-perplexity.sh")
    results = {"llama_cpp": f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist (vendored llama.cpp 0c1e570), "
                            "tools/llama-cpp/build-perplexity.sh", "models": {}}
    with tempfile.TemporaryDirectory(prefix="mla-llama-dsa-") as tmp:
        for name in MODELS:
            gguf = FIXTURES / name / "model-f32.gguf"
            session = Path(tmp) / f"{name}.session"
            cmd = [str(completion), "-m", str(gguf), "-p", PROMPTS[name], "-n", str(N_GREEDY + 1), "--temp", "0",
                   "--ignore-eos", "-no-cnv", "--no-display-prompt", "-c", "256", "-t", "2", "-ctk", "f32",
                   "-ctv", "f32", "--seed", "1", "--prompt-cache", str(session), "--prompt-cache-all", "--verbose-prompt"]
            r = run(cmd)
            ids = session_tokens(session)
            keys, w = gguf_forward.load_gguf(gguf, DEFAULT_LLAMA_CPP)
            n_prompt = int(re.search(rb"number of tokens in prompt = (\d+)", r.stderr).group(1))
            if len(ids) < n_prompt + N_GREEDY:
                raise SystemExit(f"{name}: session holds {len(ids)} ids, expected >= {n_prompt} + {N_GREEDY}")
            prompt_ids, cont = ids[:n_prompt], ids[n_prompt:n_prompt + N_GREEDY]
            if not r.stdout.startswith(decode(keys, cont)):
                raise SystemExit(f"{name}: printed text does not start with the session's continuation")
            mine, margins, gap = numpy_greedy(keys, w, prompt_ids, N_GREEDY)
            first_diff = next((i for i, (a, b) in enumerate(zip(mine, cont)) if a != b), None)
            ppl_cmd = [str(perplexity), "-m", str(gguf), "-f", str(REPO / PPL_TEXT), "-c", str(PPL_CTX),
                       "--chunks", str(PPL_CHUNKS), "-b", str(PPL_CTX), "-t", "2", "-ctk", "f32", "-ctv", "f32"]
            # stdout carries the running estimate after each chunk, "[1]4669.37,[2]...": the last one is
            # the final PPL. Both it and the "Final estimate" line go through llama.cpp's asynchronous
            # logger, which does not always flush everything before exit: retry until it is complete.
            for _ in range(5):
                p = run(ppl_cmd)
                running = re.findall(r"\[(\d+)\]([0-9.]+),", p.stdout.decode(errors="replace"))
                if running and int(running[-1][0]) == PPL_CHUNKS:
                    break
            else:
                raise SystemExit(f"{name}: no per-chunk PPL for {PPL_CHUNKS} chunks in llama-perplexity's stdout")
            ppl = float(running[-1][1])
            over = re.search(r"calculating perplexity over .*", p.stderr.decode(errors="replace"))
            ref = json.loads((FIXTURES / name / "reference.json").read_text())
            tf_ppl = ref["perplexity"]["ppl"]
            results["models"][name] = {
                "gguf_sha256": ref["gguf"]["sha256"],
                "greedy": {
                    "command": shown(cmd, gguf),
                    "prompt": PROMPTS[name],
                    "prompt_ids": prompt_ids,
                    "continuation_ids": cont,
                    "numpy_forward_continuation_equal": first_diff is None,
                    "numpy_forward_first_difference": first_diff,
                    "numpy_forward_top1_top2_margin_min": round(min(margins), 6),
                    "topk_gap_min_on_sequence": gap,
                },
                "perplexity": {
                    "command": shown(ppl_cmd, gguf), "text": PPL_TEXT, "n_ctx": PPL_CTX, "chunks": PPL_CHUNKS,
                    "ppl": ppl, "per_chunk_running_ppl": [float(v) for _, v in running],
                    "transformers_ppl": tf_ppl, "llama_cpp_vs_transformers": ppl / tf_ppl - 1,
                    "log_line": over.group(0) if over else None,
                },
            }
            print(f"{name}: prompt {len(prompt_ids)} ids, numpy greedy == llama.cpp greedy: {first_diff is None} "
                  f"(first difference {first_diff}, min margin {min(margins):.4f}, min top-k gap {gap:.2e}); "
                  f"PPL {ppl} (transformers {tf_ppl:.4f}, {ppl / tf_ppl - 1:+.3%})", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
