"""The two MLA paths give the same model on files of every weight type we load.

For each type, a small random-weight file (mla gguf synth, or a synth F32 file re-encoded by
gguf-py for the types mla cannot quantize: Q2_K, Q3_K, IQ4_XS and two lattice i-quants, as random
blocks scaled to the synth weights' size), MoE and all-dense, goes through `mla doctor --json`
with an F32 latent cache. Its path section runs the canaries down MHA (whole prompt), MQA (whole
prompt), 1-token prefill, chunked prefill (3 tokens) and both paths again on the file converted to
the other MLA layout. Every variant must agree with MHA to 1e-4 relative on the logits and on every
layer's attention output, with the same greedy tokens.

The widths (hidden 512, 16 heads of v 64, 3 layers) are the smallest at which the F32 attention
kernels, whose paths differ by an ulp, part at layer 1 on the Q4_K file: the ulp flips one
rounding of the next matmul's Q8_K activations (--attention-precision f32 shows it, checked below).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla
from gguf_f32 import writer_with_keys

import gguf

QT = gguf.GGMLQuantizationType
SHAPE = ["--n-embd", "512", "--n-head", "16", "--v-head", "64", "--qk-nope", "64", "--kv-lora-rank", "256",
         "--n-layer", "3"]
SYNTH_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"]
# Types without a quantizer in mla or gguf-py: random blocks; byte offsets of the fp16 scales.
RANDOM_TYPES = {"q2_k": (QT.Q2_K, [80, 82]), "q3_k": (QT.Q3_K, [108]), "iq4_xs": (QT.IQ4_XS, [0]),
                "iq3_s": (QT.IQ3_S, [0]), "iq2_xxs": (QT.IQ2_XXS, [0])}
TOL = 1e-4


def random_blocks_like(x: np.ndarray, qtype: QT, scale_offsets: list[int], rng: np.random.Generator) -> np.ndarray:
    """Random quant bits of qtype for a matrix shaped like x (rows of x.shape[-1]), every fp16 scale
    field set so that the dequantized matrix has x's root mean square."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = x.size // block
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)

    def set_scales(v: float) -> None:
        for off in scale_offsets:
            blocks[:, off:off + 2] = np.full(n_blocks, v, dtype=np.float16).view(np.uint8).reshape(n_blocks, 2)

    set_scales(1.0)
    rms = float(np.sqrt(np.mean(gguf.quants.dequantize(blocks.reshape(-1), qtype).astype(np.float64) ** 2)))
    set_scales(float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) / rms)
    return blocks.reshape(*x.shape[:-1], x.shape[-1] // block * size)


def retyped_copy(src: Path, dst: Path, name: str, seed: int) -> None:
    """src (an F32 synth file) with every matrix in RANDOM_TYPES[name]: rows the block does not
    divide fall back to Q8_0 (as mla gguf synth and llama-quantize do); norms stay F32."""
    qtype, offsets = RANDOM_TYPES[name]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    rng = np.random.default_rng(seed)
    reader = gguf.GGUFReader(str(src))
    writer = writer_with_keys(reader, dst)
    for t in reader.tensors:
        x = np.asarray(t.data, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])
        if x.ndim < 2:
            writer.add_tensor(t.name, x)
        elif x.shape[-1] % block == 0:
            writer.add_tensor(t.name, random_blocks_like(x, qtype, offsets, rng), raw_dtype=qtype)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def model_file(mla_bin: str, tmp: Path, name: str, dense: bool) -> Path:
    out = tmp / f"{name}-{'dense' if dense else 'moe'}.gguf"
    extra = ["--n-layer-dense-lead", "3"] if dense else []
    if name in SYNTH_TYPES:
        run_mla(mla_bin, "gguf", "synth", "-o", out, "--type", name, *SHAPE, *extra)
    else:
        f32 = tmp / f"{out.stem}-f32.gguf"
        run_mla(mla_bin, "gguf", "synth", "-o", f32, "--type", "f32", *SHAPE, *extra)
        retyped_copy(f32, out, name, seed=len(name) + (7 if dense else 0))
        f32.unlink()
    return out


def doctor_paths(mla_bin: str, path: Path, precision: str = "exact") -> dict:
    p = run_mla(mla_bin, "doctor", path, "--json", "--kv-cache-dtype", "f32", "-t", "2", "--attention-precision",
                precision, check=False)
    assert p.stdout, f"mla doctor printed nothing: {p.stderr}"
    report = json.loads(p.stdout)
    return {v["name"]: v for v in report["paths"] if v["status"] != "n/a"}


def assert_agree(paths: dict, what: str) -> None:
    want = {"mqa", "1-token prefill", "chunked prefill (3)", "fused layout, mha", "fused layout, mqa"}
    assert want <= set(paths), f"{what}: the doctor ran {sorted(paths)}"
    for name, v in paths.items():
        worst_layer = max(v["layer_rel"], default=0.0)
        assert v["greedy_agree"], f"{what}: {name}: greedy tokens differ from mha"
        assert v["logits_rel"] <= TOL, f"{what}: {name}: logits {v['logits_rel']:.2e} from mha (want <= {TOL})"
        assert worst_layer <= TOL, f"{what}: {name}: layers {v['layer_rel']} (want <= {TOL})"


@pytest.mark.parametrize("dense", [False, True], ids=["moe", "dense"])
@pytest.mark.parametrize("name", SYNTH_TYPES + list(RANDOM_TYPES))
def test_paths_agree(mla_bin, tmp_path, name, dense):
    path = model_file(mla_bin, tmp_path, name, dense)
    assert_agree(doctor_paths(mla_bin, path), f"{name} {'dense' if dense else 'moe'}")


# ik_llama.cpp's types in the shape of a published GLM-5 / V3 recipe (attn_k_b / attn_v_b q6_0, the
# other attention and dense matrices iq4_k, attn_output iq5_ks, experts iq4_ks), written by
# `mla gguf quantize` from an F32 synth file (rows their blocks do not divide fall back as in
# ik_llama.cpp's llama-quantize).
IK_RECIPE = ["--tensor-type", "attn_(k|v)_b=q6_0", "--tensor-type", "attn_output=iq5_ks",
             "--tensor-type", "_exps=iq4_ks",
             "--tensor-type", r"(attn_q|attn_kv_a_mqa|ffn_(gate|up|down)(_shexp)?\.weight)=iq4_k"]


@pytest.mark.parametrize("dense", [False, True], ids=["moe", "dense"])
def test_paths_agree_on_ik_llama_types(mla_bin, tmp_path, dense):
    extra = ["--n-layer-dense-lead", "3"] if dense else []
    f32 = tmp_path / "f32.gguf"
    out = tmp_path / "ik.gguf"
    run_mla(mla_bin, "gguf", "synth", "-o", f32, "--type", "f32", *SHAPE, *extra)
    run_mla(mla_bin, "gguf", "quantize", f32, out, "q8_0", *IK_RECIPE)
    inspect = run_mla(mla_bin, "gguf", "inspect", out).stdout
    for name in ("Q6_0", "IQ4_K", "IQ5_KS") + (() if dense else ("IQ4_KS",)):
        assert name in inspect, f"no {name} tensor in the recipe file:\n{inspect}"
    assert_agree(doctor_paths(mla_bin, out), f"ik recipe {'dense' if dense else 'moe'}")


def test_the_f32_kernels_part_on_q4_k(mla_bin, tmp_path):
    """The check above can fail: with the F32 attention kernels (the old default) the same Q4_K
    file's paths part by far more than the tolerance."""
    path = model_file(mla_bin, tmp_path, "q4_k", dense=False)
    paths = doctor_paths(mla_bin, path, precision="f32")
    assert paths["mqa"]["logits_rel"] > 100 * TOL, paths["mqa"]
