"""Tensor formats against gguf-py (PyPI gguf, the official reference), both directions.

(a) Files written by gguf-py's GGUFWriter -- every metadata value type including arrays of
    arrays, tensors of every type gguf-py can quantize, and raw random blocks of the types it can
    only dequantize -- are read by mla.cpp: metadata equal, dequantized values bit-identical to
    gguf.quants.dequantize, unsupported types refused by name.
(b) Files written by mla.cpp (`mla gguf quantize-test-file`) are read by gguf-py: they parse,
    gguf-py's dequantization is bit-identical to ours, and where gguf-py has a quantizer
    (F16, BF16, Q8_0, Q4_0) our quantized bytes equal its bytes.
"""
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

# numpy warns when the special values overflow float16; that overflow is what is being tested.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

QK_K = 256

# Byte offsets of the fp16 scale fields inside one block (d, dmin/m).
HALF_SCALE_OFFSETS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
    QT.IQ4_NL: [0], QT.IQ4_XS: [0], QT.IQ1_S: [0], QT.IQ2_XXS: [0], QT.IQ2_XS: [0], QT.IQ2_S: [0],
    QT.IQ3_XXS: [0], QT.IQ3_S: [0], QT.IQ1_M: [],
}
# Types gguf-py can only dequantize; the test writes random blocks of them.
RAW_TYPES = [QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_NL, QT.IQ4_XS,
             QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S]
# Types gguf-py quantizes (F32 and F16 through numpy casts).
QUANTIZABLE = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.TQ1_0, QT.TQ2_0]
# Valid GGUF types mla.cpp does not decode: it must refuse them by name.
UNSUPPORTED = {QT.TQ1_0, QT.TQ2_0}


def mla_dequant(mla_bin, path: Path, name: str, tmp_path: Path) -> np.ndarray:
    out = tmp_path / f"{name}.f32"
    run_mla(mla_bin, "gguf", "dequant", str(path), name, "-o", str(out))
    return np.fromfile(out, dtype="<f4")


def assert_bits_equal(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    ours = np.ascontiguousarray(ours, dtype=np.float32).ravel()
    ref = np.ascontiguousarray(ref, dtype=np.float32).ravel()
    assert ours.shape == ref.shape, what
    diff = np.nonzero(ours.view(np.uint32) != ref.view(np.uint32))[0]
    assert diff.size == 0, f"{what}: {diff.size} of {ref.size} values differ, first at {diff[0]}: ours {ours[diff[0]]!r} gguf-py {ref[diff[0]]!r}"


def random_raw_blocks(qtype: QT, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random quant bits; fp16 scales random in +-[2^-10, 2^-2], with the first blocks as edge
    cases: zero, subnormal and +-65504 scales, all-zero and all-one quant bits."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    blocks[0, :] = 0x00
    blocks[1, :] = 0xFF
    for off in HALF_SCALE_OFFSETS[qtype]:
        mag = np.exp2(rng.uniform(-10, -2, size=n_blocks)) * rng.choice([-1.0, 1.0], size=n_blocks)
        scales = mag.astype(np.float16)
        scales[2] = 0.0
        scales[3] = np.float16(2.0**-24)  # smallest subnormal
        scales[4] = np.float16(65504.0)
        scales[5] = np.float16(-65504.0)
        scales[0] = np.float16(0.25)
        scales[1] = np.float16(-0.125)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    if qtype == QT.IQ1_M:
        # The fp16 scale is spread over the top nibbles of the four scale words at byte 48.
        mag = np.exp2(rng.uniform(-10, -2, size=n_blocks)) * rng.choice([-1.0, 1.0], size=n_blocks)
        h = mag.astype(np.float16).view(np.uint16)
        words = blocks[:, 48:56].copy().view("<u2").reshape(n_blocks, 4)
        for w in range(4):
            words[:, w] = (words[:, w] & 0x0FFF) | (((h >> (4 * w)) & 0xF) << 12)
        blocks[:, 48:56] = words.view(np.uint8).reshape(n_blocks, 8)
    return blocks


def special_floats() -> np.ndarray:
    """Values that exercise float conversions: zeros, infinities, NaN, fp16 and bf16 subnormals,
    ties and the fp16 overflow boundary."""
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5, 65504.0, 65520.0, 70000.0,
                     2.0**-24, 2.0**-25, 3 * 2.0**-25, 6.0e-5, 1e-40, -1e-38, 3.4e38, 0.1, 1 + 2.0**-11,
                     1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8], dtype=np.float32)


# Metadata of every value type, including arrays of arrays. (key, value, type, array subtype)
METADATA = [
    ("test.u8", 200, VT.UINT8, None),
    ("test.i8", -100, VT.INT8, None),
    ("test.u16", 65000, VT.UINT16, None),
    ("test.i16", -32000, VT.INT16, None),
    ("test.u32", 4_000_000_000, VT.UINT32, None),
    ("test.i32", -2_000_000_000, VT.INT32, None),
    ("test.u64", 18_000_000_000_000_000_000, VT.UINT64, None),
    ("test.i64", -9_000_000_000_000_000_000, VT.INT64, None),
    ("test.f32", 0.1, VT.FLOAT32, None),
    ("test.f64", 1e300, VT.FLOAT64, None),
    ("test.bool_true", True, VT.BOOL, None),
    ("test.bool_false", False, VT.BOOL, None),
    ("test.string", "héllo, wörld ✓ 🙂", VT.STRING, None),
    ("test.arr_u8", [0, 1, 255], VT.ARRAY, VT.UINT8),
    ("test.arr_i16", [-32768, 0, 32767], VT.ARRAY, VT.INT16),
    ("test.arr_u64", [0, 2**64 - 1], VT.ARRAY, VT.UINT64),
    ("test.arr_i64", [-(2**63), 2**63 - 1], VT.ARRAY, VT.INT64),
    ("test.arr_f32", [1.5, -0.0, 3.4e38, 1e-45], VT.ARRAY, VT.FLOAT32),
    ("test.arr_f64", [1e-300, -2.5], VT.ARRAY, VT.FLOAT64),
    ("test.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL),
    ("test.arr_str", ["a", "", "ü∂ß"], VT.ARRAY, VT.STRING),
    ("test.arr_i32", list(range(-5, 300)), VT.ARRAY, VT.INT32),
    ("test.arr_arr_i32", [[1, 2, 3], [4], [-5, 6]], VT.ARRAY, None),
    ("test.arr_arr_str", [["x", "yz"], ["w"]], VT.ARRAY, None),
    ("test.arr_arr_arr", [[[1], [2, 3]], [[4, 5, 6]]], VT.ARRAY, None),
]


def inferred_type(v) -> VT:
    """The element type GGUFWriter picks for an array item it is not told the type of."""
    if isinstance(v, list):
        return VT.ARRAY
    if isinstance(v, bool):
        return VT.BOOL
    if isinstance(v, int):
        return VT.INT32
    if isinstance(v, float):
        return VT.FLOAT32
    return VT.STRING


def values_equal(ours, want, vtype: VT, sub: VT | None) -> bool:
    if vtype == VT.ARRAY:
        if not isinstance(ours, list) or len(ours) != len(want):
            return False
        elem = sub if sub is not None else inferred_type(want[0])
        return all(values_equal(o, w, elem, None) for o, w in zip(ours, want))
    if vtype == VT.FLOAT32:
        return np.float32(ours).tobytes() == np.float32(want).tobytes()
    if vtype == VT.FLOAT64:
        return float(ours) == float(want)
    return ours == want


@pytest.fixture(scope="module")
def gguf_py_file(tmp_path_factory):
    """A file written by gguf-py; returns (path, {tensor name: (type, float source or None)})."""
    path = tmp_path_factory.mktemp("a") / "from_gguf_py.gguf"
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(path), arch="quant-test")
    for key, value, vtype, sub in METADATA:
        w.add_key_value(key, value, vtype, sub_type=sub)
    tensors = {}
    rows, cols = 6, 512
    for qtype in QUANTIZABLE:
        data = (rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-8, 4, size=(rows, 1)))).astype(np.float32)
        if qtype in (QT.F32, QT.F16, QT.BF16):
            data[0, :special_floats().size] = special_floats()
        q = gguf.quants.quantize(data, qtype)
        name = f"{qtype.name.lower()}.from_py"
        w.add_tensor(name, q, raw_dtype=qtype)
        tensors[name] = qtype
    for qtype in RAW_TYPES:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = rows * cols // block_size
        raw = random_raw_blocks(qtype, n_blocks, rng).reshape(rows, cols // block_size * type_size)
        name = f"{qtype.name.lower()}.raw"
        w.add_tensor(name, raw, raw_dtype=qtype)
        tensors[name] = qtype
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def test_a_metadata_read_by_mla_equals_written(mla_bin, gguf_py_file):
    path, _ = gguf_py_file
    ours = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", "--full", str(path)).stdout)
    by_key = {m["key"]: m for m in ours["metadata"]}
    for key, value, vtype, sub in METADATA:
        m = by_key[key]
        assert m["type"] == vtype.name, key
        if vtype == VT.ARRAY:
            assert m["count"] == len(value), key
            assert m["elem_type"] == (sub.name if sub is not None else "ARRAY"), key
        assert values_equal(m["value"], value, vtype, sub), f"{key}: ours {m['value']!r} written {value!r}"


def test_a_tensors_dequantize_bit_identical(mla_bin, gguf_py_file, tmp_path):
    path, tensors = gguf_py_file
    reader = gguf.GGUFReader(str(path))
    checked = 0
    for t in reader.tensors:
        qtype = tensors[t.name]
        if qtype in UNSUPPORTED:
            continue
        ref = gguf.quants.dequantize(t.data, qtype)
        assert_bits_equal(mla_dequant(mla_bin, path, t.name, tmp_path), ref, t.name)
        checked += 1
    assert checked == len(QUANTIZABLE) + len(RAW_TYPES) - len(UNSUPPORTED)


@pytest.mark.parametrize("qtype", sorted(UNSUPPORTED, key=int))
def test_a_unsupported_types_fail_by_name(mla_bin, gguf_py_file, tmp_path, qtype):
    path, _ = gguf_py_file
    name = f"{qtype.name.lower()}.from_py"
    p = run_mla(mla_bin, "gguf", "dequant", str(path), name, "-o", str(tmp_path / "x.f32"), check=False)
    assert p.returncode != 0
    assert f"tensor '{name}': tensor type {qtype.name} is not supported yet" in p.stderr


@pytest.fixture(scope="module")
def mla_file(mla_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("b") / "from_mla.gguf"
    # Every type mla.cpp writes that gguf-py decodes (MXFP4 is not in this gguf-py: its bytes are
    # checked against llama-quantize's in test_quantize_vs_llama.py).
    types = ("f32,f16,bf16,q8_0,q4_0,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,q8_k,iq4_nl,iq4_xs,iq2_xxs,iq2_xs,iq2_s,"
             "iq3_xxs,iq3_s,iq1_s,iq1_m")
    run_mla(mla_bin, "gguf", "quantize-test-file", str(path), "--types", types, "--seed", "7", "--rows", "8",
            "--cols", "1024")
    return path, types.split(",")


def dequantize_q8_k(data: np.ndarray) -> np.ndarray:
    """Q8_K (not in gguf-py): per 292-byte block, fp32 d, 256 int8 quants, 16 int16 sums."""
    blocks = data.view(np.uint8).reshape(-1, 292)
    d = blocks[:, :4].copy().view("<f4")
    qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * qs).reshape(-1)


# Quantization error bounds (RMSE relative to the RMS of the data, per row) far above what the
# formats reach on this data, to catch a broken quantizer without flakiness.
REL_RMSE_BOUND = {"f32": 0.0, "f16": 1e-3, "bf16": 5e-3, "q8_0": 0.02, "q4_0": 0.2, "q5_0": 0.1, "q5_1": 0.08,
                  "q2_k": 0.45, "q3_k": 0.3, "q4_k": 0.15, "q5_k": 0.08, "q6_k": 0.04, "q8_k": 0.05, "iq4_nl": 0.18,
                  "iq4_xs": 0.18, "iq2_xxs": 1.0, "iq2_xs": 0.75, "iq2_s": 0.75, "iq3_xxs": 0.4, "iq3_s": 0.45,
                  "iq1_s": 0.85, "iq1_m": 0.65}


def test_b_mla_file_read_by_gguf_py(mla_bin, mla_file, tmp_path):
    path, types = mla_file
    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    assert reader.fields["general.architecture"].contents() == "quant-test"
    assert len(by_name) == 2 * len(types)
    for name in types:
        src, q = by_name[f"{name}.src"], by_name[f"{name}.q"]
        assert q.tensor_type.name == name.upper()
        assert [int(x) for x in q.shape] == [1024, 8]
        x = np.array(src.data, dtype=np.float32).reshape(8, 1024)
        assert_bits_equal(mla_dequant(mla_bin, path, f"{name}.src", tmp_path), x, f"{name}.src")
        ours = mla_dequant(mla_bin, path, f"{name}.q", tmp_path)
        if q.tensor_type == QT.Q8_K:
            ref = dequantize_q8_k(q.data)
        else:
            ref = gguf.quants.dequantize(q.data, q.tensor_type)
        assert_bits_equal(ours, ref, f"{name}.q")
        y = ours.reshape(8, 1024)
        rel = np.sqrt(np.mean((y - x) ** 2, axis=1)) / np.sqrt(np.mean(x**2, axis=1))
        assert np.all(rel <= REL_RMSE_BOUND[name]), f"{name}: relative RMSE per row {rel}"


@pytest.mark.parametrize("name", ["f16", "bf16", "q8_0", "q4_0", "q5_0", "q5_1"])
def test_b_quantized_bytes_equal_gguf_py(mla_file, name):
    path, _ = mla_file
    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    x = np.array(by_name[f"{name}.src"].data, dtype=np.float32).reshape(8, 1024)
    qtype = QT[name.upper()]
    want = np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).ravel()
    ours = np.ascontiguousarray(by_name[f"{name}.q"].data).view(np.uint8).ravel()
    assert want.size == ours.size
    diff = np.nonzero(want != ours)[0]
    assert diff.size == 0, f"{name}: {diff.size} bytes differ from gguf-py's quantization, first at {diff[0]}"


def test_b_special_values_quantize_like_gguf_py(mla_bin, tmp_path):
    """F16/BF16 conversion of infinities, NaN, subnormals and ties equals numpy / gguf-py."""
    x = np.tile(special_floats(), 1024 // special_floats().size + 1)[:1024].astype(np.float32)
    src = tmp_path / "special.f32"
    x.tofile(src)
    for qtype in (QT.F16, QT.BF16):
        out = tmp_path / f"special.{qtype.name}.f32"
        run_mla(mla_bin, "gguf", "quant-roundtrip", str(src), "--type", qtype.name, "--cols", "1024", "-o", str(out))
        ref = gguf.quants.dequantize(gguf.quants.quantize(x.reshape(1, -1), qtype), qtype)
        assert_bits_equal(np.fromfile(out, dtype="<f4"), ref, qtype.name)


@pytest.mark.parametrize("qtype", ["q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs",
                                   "iq3_s", "iq1_s", "iq1_m"])
def test_synth_writes_every_quantizable_type(mla_bin, tmp_path, qtype):
    """`mla gguf synth --types` takes each type mla.cpp can write; gguf-py reads the tensors back with
    that type and decodes them to finite values."""
    path = tmp_path / "s.gguf"
    run_mla(mla_bin, "gguf", "synth", "-o", str(path), "--n-layer", "2", "--n-embd", "256", "--n-ff", "256",
            "--n-expert", "2", "--n-expert-used", "1", "--n-ff-exp", "256", "--n-vocab", "256", "--types",
            f"ffn_exps={qtype},ffn={qtype},embd={qtype}")
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for name in ("token_embd.weight", "blk.0.ffn_up.weight", "blk.1.ffn_down_exps.weight"):
        assert tensors[name].tensor_type == QT[qtype.upper()], name
        assert np.all(np.isfinite(gguf.quants.dequantize(tensors[name].data, tensors[name].tensor_type)))
