"""llama.cpp's loglikelihoods for the lm-eval multiple-choice task in tests/fixtures/lm-eval, on the
tiny model's Q8_0 and Q4_K files: the reference tests/py/test_lm_eval.py compares mla serve's
lm-eval results with (tests/fixtures/lm-eval/llama-cpp-reference.json, committed). Each file is
also scored as an F32 copy (every tensor dequantized by gguf-py, tests/py/gguf_f32.py): llama.cpp
rounds activations to 8 bits for its quantized dot products and computes F32 weights in float,
so the gap between the two runs is llama.cpp's own rounding noise on that file — the measure the
test's tolerance is set from.

    .venv/bin/python tools/llama-cpp/lm_eval_reference.py

Builds llama.cpp from the llama-cpp-python sdist (build-perplexity.sh, outside the repository)
and links score_pairs.cpp against its static libraries, then scores every (context, " " +
choice) pair the task makes, tokenized and split as lm-eval's loglikelihood requests are.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TASK = REPO / "tests" / "fixtures" / "lm-eval" / "tiny_python_mc.jsonl"
OUT = REPO / "tests" / "fixtures" / "lm-eval" / "llama-cpp-reference.json"
MODELS = ["tiny-q8_0.gguf", "tiny-q4_k.gguf"]


def build() -> Path:
    perplexity = Path(subprocess.run(["bash", str(HERE / "build-perplexity.sh")], check=True, capture_output=True,
                                     text=True).stdout.strip())
    build_dir = perplexity.parent.parent
    version = build_dir.name.removeprefix("llama.cpp-").removesuffix("-build")
    src = build_dir.parent / f"llama-cpp-python-{version}" / "vendor" / "llama.cpp"
    exe = build_dir / "bin" / "score_pairs"
    libs = [build_dir / "src" / "libllama.a"] + [build_dir / "ggml" / "src" / f"libggml{s}.a"
                                                 for s in ("", "-cpu", "-base")]
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}",
                    str(HERE / "score_pairs.cpp"), *map(str, libs), "-fopenmp", "-lpthread", "-ldl", "-o", str(exe)],
                   check=True)
    return exe


def pairs() -> list[tuple[str, str]]:
    out = []
    for line in TASK.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        out += [(doc["context"], " " + c) for c in doc["choices"]]
    return out


def main() -> None:
    exe = build()
    todo = pairs()
    stdin = "".join(f"{c}\t{x}\n" for c, x in todo)
    result = {"llama_cpp": exe.parent.parent.name, "task": TASK.name, "models": {}}
    def score(model: Path) -> list[str]:
        return subprocess.run([str(exe), str(model)], input=stdin, check=True, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "2"}).stdout.splitlines()

    for name in MODELS:
        with tempfile.TemporaryDirectory() as tmp:
            f32 = Path(tmp) / "f32.gguf"
            subprocess.run([sys.executable, str(REPO / "tests" / "py" / "gguf_f32.py"), str(REPO / "models" / name),
                            str(f32)], check=True, capture_output=True)
            dequantized = score(f32)
        rows = []
        for (context, continuation), line, line32 in zip(todo, score(REPO / "models" / name), dequantized, strict=True):
            ll, greedy, ctx_ids, cont_ids = line.split(" ")
            rows.append({"context": context, "continuation": continuation, "loglikelihood": float(ll),
                         "loglikelihood_f32_copy": float(line32.split(" ")[0]), "is_greedy": greedy == "1",
                         "context_ids": [int(t) for t in ctx_ids.split(",")],
                         "continuation_ids": [int(t) for t in cont_ids.split(",")]})
        result["models"][name] = rows
    lines = [f'{{"llama_cpp": {json.dumps(result["llama_cpp"])}, "task": {json.dumps(result["task"])}, "models": {{']
    for i, (name, rows) in enumerate(result["models"].items()):
        lines.append(f" {json.dumps(name)}: [")
        lines += [f"  {json.dumps(r)}" + ("," if j + 1 < len(rows) else "") for j, r in enumerate(rows)]
        lines.append(" ]" + ("," if i + 1 < len(result["models"]) else ""))
    lines.append("}}")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
