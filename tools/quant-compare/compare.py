#!/usr/bin/env python3
"""Quantizer accuracy: mla.cpp against llama.cpp's ggml reference quantizer, on identical data.

One-off tool (not a test). It downloads the llama-cpp-python sdist from PyPI (which vendors
llama.cpp) into a cache directory outside the repository, builds ggml's base library and
ggml_roundtrip.c against it, then quantizes Gaussian and Student-t (df=3) data with both
implementations and prints RMSE per type as a Markdown table. Nothing from llama.cpp is kept in
the repository.

    .venv/bin/python tools/quant-compare/compare.py [--mla build/mla] [--version 0.3.36]
"""
import argparse
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TYPES = ["q4_0", "q8_0", "q4_K", "q5_K", "q6_K"]


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def build_ggml(cache: Path, version: str, jobs: int) -> Path:
    """Returns the path of the ggml_roundtrip binary, building what is missing."""
    exe = cache / f"ggml_roundtrip-{version}"
    if exe.exists():
        return exe
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={version}", "-d", cache])
    with tarfile.open(sdist) as tf:
        members = tf.getmembers()
        for m in members:  # refuse paths that would land outside the cache
            if m.name.startswith("/") or ".." in Path(m.name).parts:
                sys.exit(f"unsafe path in {sdist}: {m.name}")
        src = cache / Path(members[0].name).parts[0]
        if not (src / "vendor").exists():
            tf.extractall(cache)
    llama_src = src / "vendor" / "llama.cpp"
    ggml_src = llama_src / "ggml"
    build = cache / f"build-ggml-{version}"
    # Configured through llama.cpp's top level: the sdist lacks what a standalone ggml needs.
    run(["cmake", "-S", llama_src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_COMMON=OFF"])
    run(["cmake", "--build", build, "--target", "ggml-base", "-j", str(jobs)])
    libs = sorted(build.rglob("libggml-base.a"))
    if not libs:
        sys.exit(f"libggml-base.a not found under {build}")
    run(["g++", "-O2", "-x", "c", HERE / "ggml_roundtrip.c", "-x", "none", "-I", ggml_src / "include",
         libs[0], "-fopenmp", "-lm", "-lpthread", "-o", exe])
    return exe


def rmse(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2)))


def roundtrip(cmd_prefix, x: np.ndarray, work: Path, tag: str) -> np.ndarray:
    src, out = work / f"{tag}.in.f32", work / f"{tag}.out.f32"
    x.astype("<f4").tofile(src)
    run([*cmd_prefix(src, out)])
    return np.fromfile(out, dtype="<f4")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("--version", default="0.3.36", help="llama-cpp-python version on PyPI")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "mla" / "quant-compare"))
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()

    cache = Path(args.cache)
    ggml = build_ggml(cache, args.version, args.jobs)
    work = cache / "work"
    work.mkdir(parents=True, exist_ok=True)

    rng = np.random.default_rng(args.seed)
    shape = (args.rows, args.cols)
    data = {
        "gaussian": rng.standard_normal(shape).astype(np.float32),
        "student-t3": rng.standard_t(3, shape).astype(np.float32),
    }
    print(f"llama.cpp ggml from llama-cpp-python {args.version}; {args.rows} rows x {args.cols}; seed {args.seed}\n")
    print("| data | type | llama.cpp RMSE | mla.cpp RMSE | mla / llama.cpp |")
    print("|---|---|---|---|---|")
    for dname, x in data.items():
        for t in TYPES:
            tag = f"{dname}.{t}"
            y_ref = roundtrip(lambda s, o, t=t: [ggml, s, o, args.cols, t], x, work, tag + ".ggml")
            y_mla = roundtrip(lambda s, o, t=t: [args.mla, "gguf", "quant-roundtrip", s, "--type", t, "--cols",
                                            args.cols, "-o", o], x, work, tag + ".mla")
            r_ref, r_mla = rmse(x.ravel(), y_ref), rmse(x.ravel(), y_mla)
            same = " (bit-identical)" if np.array_equal(y_ref.view(np.uint32), y_mla.view(np.uint32)) else ""
            print(f"| {dname} | {t.upper()} | {r_ref:.6f} | {r_mla:.6f} | {r_mla / r_ref:.4f}{same} |", flush=True)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
