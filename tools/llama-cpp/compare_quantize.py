"""Compares `mla gguf quantize` with llama.cpp's llama-quantize on the same input GGUF.

    python compare_quantize.py IN.gguf TYPE [--mla build/mla] [--llama-quantize PATH]

TYPE is a llama-quantize file type name (Q8_0, Q4_K_M, ...). Runs both quantizers (llama-quantize
built by build-perplexity.sh; no imatrix), then reads both outputs with gguf-py and prints, per
tensor, both types and whether the quantized bytes are identical; exits 1 when a tensor with the
same type in both files has different bytes. Needs gguf-py on PYTHONPATH (the sdist's gguf-py) and
numpy.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gguf import GGUFReader

DEFAULT_LLAMA_QUANTIZE = Path.home() / ".cache/mla/llama.cpp-0.3.36-build/bin/llama-quantize"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("type")
    ap.add_argument("--mla", default=str(Path(__file__).resolve().parents[2] / "build" / "mla"))
    ap.add_argument("--llama-quantize", default=str(DEFAULT_LLAMA_QUANTIZE))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = Path(tmp) / "mla.gguf", Path(tmp) / "llama.gguf"
        subprocess.run([args.mla, "gguf", "quantize", str(args.input), str(ours), args.type], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([args.llama_quantize, str(args.input), str(theirs), args.type, "1"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        a = {t.name: t for t in GGUFReader(ours).tensors}
        b = {t.name: t for t in GGUFReader(theirs).tensors}
        if set(a) != set(b):
            sys.exit(f"tensor sets differ: {sorted(set(a) ^ set(b))}")
        same_type = identical = 0
        bad = []
        print(f"{'tensor':<34} {'mla.cpp':>8} {'llama.cpp':>9}  bytes")
        for name, ta in a.items():
            tb = b[name]
            eq = ta.tensor_type == tb.tensor_type and np.array_equal(np.asarray(ta.data).view(np.uint8),
                                                                     np.asarray(tb.data).view(np.uint8))
            if ta.tensor_type == tb.tensor_type:
                same_type += 1
                identical += eq
                if not eq:
                    bad.append(name)
            note = "identical" if eq else ("DIFFERENT" if ta.tensor_type == tb.tensor_type else "-")
            print(f"{name:<34} {ta.tensor_type.name:>8} {tb.tensor_type.name:>9}  {note}")
        print(f"{args.type}: {len(a)} tensors, {same_type} of the same type, {identical} of those byte-identical")
        if bad:
            sys.exit(f"byte differences in: {bad}")


if __name__ == "__main__":
    main()
