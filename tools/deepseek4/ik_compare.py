"""ik_llama.cpp on a deepseek4 GGUF written by make_fixtures.py: does it read the file as
transformers' model (layout agreement), and where do the two differ?

    /root/venv-ref/bin/python tools/deepseek4/ik_compare.py [--ik-src /root/peers/ik] [--ik-build DIR]

Builds tools/ik-llama/dump_logits.cpp against the ik_llama.cpp build tree (nothing of ik is
committed), writes a tiny random DeepSeek-V4 model at dimensions ik's kernels accept (hidden 64,
head 64 with 16 rope dims, indexer 8 x 64, layers CSA/HCA/sliding, hash + routed MoE, the 512-token
vocabulary of tests/fixtures/reference so ik's vocabulary loader has one) twice — once with a
SwiGLU limit that never binds and once with limit 2 — and compares ik's logits at every position
(several -fa / -ub modes) with transformers'. The numbers go to tests/fixtures/deepseek4/ik/results.json
and docs/DEEPSEEK-V4.md §4; the models themselves are not kept.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import gguf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures as mf

VOCAB_GGUF = mf.REPO / "tests" / "fixtures" / "reference" / "deepseek-v3-tiny" / "model-f32.gguf"
MODES = ["prefill-fa:0:1:512", "prefill-nofa:0:0:512", "chunks7-fa:0:1:7", "decode-fa:0:1:1", "decode-nofa:0:0:1"]


def spec(limit: float) -> dict:
    return {
        "config": {
            "vocab_size": 512,
            "hidden_size": 64,
            "moe_intermediate_size": 64,
            "head_dim": 64,
            "partial_rotary_factor": 16 / 64,
            "index_head_dim": 64,
            "index_n_heads": 8,
            "q_lora_rank": 32,
            "o_lora_rank": 16,
            "num_hidden_layers": 3,
            "layer_types": [mf.CSA, mf.HCA, mf.SLIDING],
            "mlp_layer_types": ["hash_moe", "moe", "moe"],
            "sliding_window": 16,
            "index_topk": 8,
            "hc_sinkhorn_iters": 20,
            "swiglu_limit": limit,
        },
        "n_tokens": 140,
        "seed": 4000,
        "extra_ratio": False,
    }


def copy_field(w: gguf.GGUFWriter, f: gguf.ReaderField) -> None:
    t = f.types[0]
    if t == gguf.GGUFValueType.STRING:
        w.add_string(f.name, bytes(f.parts[f.data[0]]).decode())
    elif t == gguf.GGUFValueType.ARRAY and f.types[1] == gguf.GGUFValueType.STRING:
        w.add_array(f.name, [bytes(f.parts[i]).decode() for i in f.data])
    elif t == gguf.GGUFValueType.ARRAY:
        w.add_key_value(f.name, [f.parts[i].tolist()[0] for i in f.data], t, sub_type=f.types[1])
    else:
        w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], t)


def write_with_vocab(path: Path, model, cfg, sp: dict) -> None:
    """make_fixtures' GGUF plus the tokenizer.* keys of the 512-token reference vocabulary."""
    bare = path.with_suffix(".bare.gguf")
    mf.write_gguf(bare, model, cfg, sp)
    r, v = gguf.GGUFReader(str(bare)), gguf.GGUFReader(str(VOCAB_GGUF))
    w = gguf.GGUFWriter(str(path), "deepseek4")
    for f in r.fields.values():
        if not f.name.startswith("GGUF.") and f.name != "general.architecture":
            copy_field(w, f)
    for f in v.fields.values():
        if f.name.startswith("tokenizer.ggml."):
            copy_field(w, f)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=[int(x) for x in reversed(t.shape)], raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare(ik: np.ndarray, hf: np.ndarray) -> dict:
    rel = np.abs(ik - hf).max(axis=1) / np.abs(hf).max(axis=1)
    finite = bool(np.isfinite(ik).all())
    return {
        "finite": finite,
        "max_rel": float(np.nanmax(rel)) if finite else None,
        "median_rel": float(np.median(rel)) if finite else None,
        "rel_at_position_0": float(rel[0]),
        "argmax_agreement": float((ik.argmax(axis=1) == hf.argmax(axis=1)).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ik-src", default="/root/peers/ik")
    ap.add_argument("--ik-build", default=None, help="default: IK_SRC/build")
    args = ap.parse_args()
    ik_src = Path(args.ik_src)
    ik_build = Path(args.ik_build) if args.ik_build else ik_src / "build"
    commit = subprocess.run(
        ["git", "-C", str(ik_src), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    torch.set_num_threads(1)
    results = {"ik_llama_cpp": commit, "transformers": mf.TRANSFORMERS_VERSION, "modes": MODES, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dump = work / "dump_logits"
        subprocess.run(
            [
                "g++",
                "-std=c++17",
                "-O2",
                f"-I{ik_src}/include",
                f"-I{ik_src}/ggml/include",
                str(mf.REPO / "tools" / "ik-llama" / "dump_logits.cpp"),
                str(ik_build / "src" / "libllama.a"),
                str(ik_build / "ggml" / "src" / "libggml.a"),
                "-fopenmp",
                "-pthread",
                "-ldl",
                "-lm",
                "-o",
                str(dump),
            ],
            check=True,
        )
        for name, limit in (("no-clip", 1e4), ("limit-2", 2.0)):
            sp = spec(limit)
            for seed in range(sp["seed"], sp["seed"] + mf.MAX_TRIES):
                cfg, model, ids, logits, gaps, _ = mf.make_model(name, sp, seed)
                if min(gaps.values()) >= mf.GAP_MIN:
                    break
            path = work / f"{name}.gguf"
            write_with_vocab(path, model, cfg, sp)
            tokens = ",".join(str(int(t)) for t in ids)
            subprocess.run([str(dump), str(path), tokens, str(work / name), *MODES], check=True, capture_output=True)
            case = {"swiglu_limit": limit, "seed": seed, "n_tokens": len(ids), "topk_gap_min": min(gaps.values())}
            for mode in MODES:
                label = mode.split(":")[0]
                ik = np.fromfile(work / f"{name}.{label}.f32", dtype=np.float32).reshape(len(ids), -1)
                case[label] = compare(ik, logits)
            results["cases"][name] = case
            print(name, json.dumps(case, indent=1), file=sys.stderr)
    out = mf.OUT / "ik"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
