"""`mla gguf quantize` against llama.cpp's llama-quantize, byte for byte.

tests/fixtures/quant/llama-quantize.json holds, for a small deepseek2 model (small-f16.gguf), as
llama-quantize made it without an importance matrix (tools/llama-cpp/make_quant_fixtures.py):
  - "types": per file type it writes so, the type and SHA-256 of every tensor;
  - "plans": per file type it only writes with an importance matrix (the lattice i-quants), the
    type of every tensor (its --dry-run);
  - "overrides": the same under --tensor-type override sets.
mla must choose the same type for every tensor and, where the types agree, write the same bytes.
"""
import hashlib
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "quant"
DATA = json.loads((FIX / "llama-quantize.json").read_text())
REF, PLANS, OVERRIDES = DATA["types"], DATA["plans"], DATA["overrides"]


# ggml type id -> (name, block elements, block bytes): gguf-py's table, plus MXFP4 (id 39), which the
# pinned gguf-py predates.
TYPES = {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType} | {39: ("MXFP4", 32, 17)}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def digests(path: Path) -> dict:
    """Tensor name -> [type name, SHA-256 of its bytes], from the GGUF v3 layout itself (gguf-py's
    reader refuses types it does not know)."""
    b = path.read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def text() -> str:
        nonlocal pos
        n = take("Q")
        pos += n
        return b[pos - n:pos].decode()

    def value(vtype: int):
        if vtype == 8:
            return text()
        if vtype == 9:
            elem, n = take("I"), take("Q")
            return [value(elem) for _ in range(n)]
        return take(SCALAR[vtype])

    assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3
    pos = 8
    n_tensors, n_kv = take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = text()
        v = value(take("I"))
        if key == "general.alignment":
            alignment = v
    infos = []
    for _ in range(n_tensors):
        name = text()
        ne = [take("Q") for _ in range(take("I"))]
        infos.append((name, ne, take("I"), take("Q")))
    data = (pos + alignment - 1) // alignment * alignment
    out = {}
    for name, ne, tid, offset in infos:
        tname, block, size = TYPES[tid]
        n_bytes = int(np.prod(ne)) // block * size
        out[name] = [tname, hashlib.sha256(b[data + offset:data + offset + n_bytes]).hexdigest()]
    return out


def quantize(mla_bin, out: Path, ftype: str, overrides=(), plan_only=False) -> str:
    extra = [a for spec in overrides for a in ("--tensor-type", spec)]
    p = run_mla(mla_bin, "gguf", "quantize", str(FIX / "small-f16.gguf"), str(out), ftype.lower(), "-t", "2",
                *extra, *(["--plan"] if plan_only else []))
    return p.stdout


def plan_types(stdout: str) -> dict:
    """Tensor name -> type from the --plan table ("name  shape  FROM -> TO  reason")."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"(\S+)\s+\{[^}]*\}\s+\S+ -> (\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


@pytest.fixture(scope="module")
def quantized(mla_bin, tmp_path_factory):
    out = {}
    for ftype in REF:
        path = tmp_path_factory.mktemp("quant") / f"{ftype}.gguf"
        quantize(mla_bin, path, ftype)
        out[ftype] = digests(path)
    return out


def assert_same(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want)
    wrong = {n: (got[n][0], want[n][0]) for n in want if got[n][0] != want[n][0]}
    assert not wrong, f"{what}: tensor types (mla, llama-quantize) differ: {wrong}"
    quantized_types = {want[n][0] for n in want} - {"F32", "F16"}
    assert quantized_types, f"{what}: no quantized tensor to compare"
    differ = [n for n in want if got[n][1] != want[n][1]]
    assert not differ, f"{what}: bytes differ from llama-quantize's in {differ}"


@pytest.mark.parametrize("ftype", sorted(REF))
def test_types_and_bytes_match_llama_quantize(quantized, ftype):
    assert_same(quantized[ftype], REF[ftype], ftype)


@pytest.mark.parametrize("ftype", sorted(PLANS))
def test_plan_matches_llama_quantize_dry_run(mla_bin, tmp_path, ftype):
    got = plan_types(quantize(mla_bin, tmp_path / "x.gguf", ftype, plan_only=True))
    want = PLANS[ftype]
    assert sorted(got) == sorted(want)
    wrong = {n: (got[n], want[n]) for n in want if got[n] != want[n]}
    assert not wrong, f"{ftype}: tensor types (mla, llama-quantize) differ: {wrong}"


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_tensor_type_overrides_match_llama_quantize(mla_bin, tmp_path, name):
    o = OVERRIDES[name]
    out = tmp_path / "x.gguf"
    if "tensors" in o:
        quantize(mla_bin, out, o["file_type"], o["tensor_types"])
        assert_same(digests(out), o["tensors"], name)
    else:
        got = plan_types(quantize(mla_bin, out, o["file_type"], o["tensor_types"], plan_only=True))
        wrong = {n: (got.get(n), t) for n, t in o["plan"].items() if got.get(n) != t}
        assert not wrong, f"{name}: tensor types (mla, llama-quantize) differ: {wrong}"


def test_lattice_file_is_written_and_read_back(mla_bin, tmp_path):
    """An IQ2_XXS file (what llama-quantize only writes with an importance matrix) is written whole,
    gguf-py reads it, and every tensor has llama-quantize's type for it."""
    out = tmp_path / "iq2.gguf"
    quantize(mla_bin, out, "IQ2_XXS")
    got = {n: t for n, (t, _) in digests(out).items()}
    assert got == PLANS["IQ2_XXS"]
