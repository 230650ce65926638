#!/usr/bin/env python3
"""Records what llama.cpp's llama-gguf-split writes, for tests/fixtures/split/.

For each input GGUF and each option set, runs `llama-gguf-split [options] IN PREFIX` and
`llama-gguf-split --merge PREFIX-00001-of-N.gguf OUT`, and writes the sha256 and size of every
shard and of the merged file to tests/fixtures/split/llama-gguf-split.json. The shards of one
case are copied into tests/fixtures/split/ so the reader is tested on llama.cpp's own bytes.
Also writes tests/fixtures/split/odd-shapes.gguf (with gguf-py), a small input whose tensors
have trailing dimensions of 1 and whose metadata holds every value type.

    bash tools/llama-cpp/build-perplexity.sh     # builds llama-gguf-split from the sdist
    .venv/bin/python tools/llama-cpp/make_split_fixtures.py [--bin DIR]

Nothing of llama.cpp is committed: only hashes, and files llama-gguf-split wrote from our inputs.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "split"
REF = ROOT / "tests" / "fixtures" / "reference"

INPUTS = {
    "deepseek-v2-lite-tiny": REF / "deepseek-v2-lite-tiny" / "model-f32.gguf",
    "deepseek-v3-tiny": REF / "deepseek-v3-tiny" / "model-f32.gguf",
    "odd-shapes": OUT / "odd-shapes.gguf",
}
CASES = {
    "default": [],                                   # 128 tensors per shard: one shard here
    "tensors-16": ["--split-max-tensors", "16"],
    "size-1M": ["--split-max-size", "1M"],
    "no-first-tensors-20": ["--split-max-tensors", "20", "--no-tensor-first-split"],
}
ODD_CASES = {"tensors-2": ["--split-max-tensors", "2"], "size-1M": ["--split-max-size", "1M"]}
COMMITTED = ("deepseek-v2-lite-tiny", "tensors-16")  # these shards are copied into OUT


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_odd_shapes(path: Path) -> None:
    import gguf  # gguf-py, as shipped with the sdist or the test venv

    w = gguf.GGUFWriter(str(path), "deepseek2")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -5)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1.5e-6)
    w.add_uint64("test.u64", 2**64 - 1)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 3.141592653589793)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo")
    w.add_array("test.strs", ["a", "", "ccc"])
    w.add_array("test.ints", [1, -2, 3])
    rng = np.random.default_rng(7)
    # numpy shape (rows, cols) is GGUF ne {cols, rows}: {48, 1}, {1, 1, 3}... have trailing 1s.
    for name, shape in [("a.weight", (1, 48)), ("b.weight", (3, 1, 1)), ("c.weight", (5, 7)),
                        ("d.weight", (1, 1, 9)), ("e.weight", (2, 3, 4)), ("f.weight", (1, 1000))]:
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.add_tensor("g.weight", rng.standard_normal((600, 512)).astype(np.float16))  # 614 kB
    w.add_tensor("h.weight", rng.standard_normal((512, 600)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.expanduser("~/.cache/mla/llama.cpp-0.3.36-build/bin"))
    args = ap.parse_args()
    tool = Path(args.bin) / "llama-gguf-split"
    OUT.mkdir(parents=True, exist_ok=True)
    write_odd_shapes(INPUTS["odd-shapes"])
    record = {"tool": "llama-gguf-split from the llama-cpp-python 0.3.36 sdist (tools/llama-cpp/build-perplexity.sh)",
              "inputs": {}}
    for old in OUT.glob("*-of-*.gguf"):
        old.unlink()
    for model, src in INPUTS.items():
        entry = {"input": str(src.relative_to(ROOT)), "input_sha256": sha256(src), "cases": {}}
        for case, opts in (ODD_CASES if model == "odd-shapes" else CASES).items():
            with tempfile.TemporaryDirectory() as tmp:
                prefix = Path(tmp) / model
                subprocess.run([str(tool), *opts, str(src), str(prefix)], check=True, capture_output=True)
                shards = sorted(Path(tmp).glob(f"{model}-*-of-*.gguf"))
                merged = Path(tmp) / "merged.gguf"
                subprocess.run([str(tool), "--merge", str(shards[0]), str(merged)], check=True, capture_output=True)
                entry["cases"][case] = {
                    "options": opts,
                    "shards": [{"name": s.name, "sha256": sha256(s), "bytes": s.stat().st_size} for s in shards],
                    "merged": {"sha256": sha256(merged), "bytes": merged.stat().st_size},
                }
                if (model, case) == COMMITTED:
                    for s in shards:
                        shutil.copy(s, OUT / s.name)
        record["inputs"][model] = entry
    (OUT / "llama-gguf-split.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT / 'llama-gguf-split.json'}")


if __name__ == "__main__":
    main()
