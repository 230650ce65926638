"""`mla gguf inspect` against gguf-py's reader (the official reference) on real and written files."""
import json
from pathlib import Path

import numpy as np
from conftest import run_mla

import gguf

REPO = Path(__file__).resolve().parents[2]


def gguf_py_value(field: gguf.ReaderField):
    """Decodes a field with gguf-py into plain Python values (arrays fully)."""
    t = field.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    if t == gguf.GGUFValueType.ARRAY:
        sub = field.types[1] if len(field.types) > 1 else None
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        if sub == gguf.GGUFValueType.ARRAY:
            return None  # nested arrays: compared by count only
        return [field.parts[i].tolist()[0] for i in field.data]
    v = field.parts[field.data[0]].tolist()[0]
    return bool(v) if t == gguf.GGUFValueType.BOOL else v


def check_against_gguf_py(mla_bin: str, path: Path) -> None:
    ours = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", "--full", str(path)).stdout)
    ref = gguf.GGUFReader(str(path))
    ref_fields = [f for f in ref.fields.values() if not f.name.startswith("GGUF.")]
    assert [m["key"] for m in ours["metadata"]] == [f.name for f in ref_fields]
    for m, f in zip(ours["metadata"], ref_fields):
        assert m["type"] == f.types[0].name, m["key"]
        want = gguf_py_value(f)
        if m["type"] == "ARRAY":
            # The element type as written (parts: key length, key, type, element type, count, ...);
            # gguf-py lists it in f.types only for a non-empty array.
            assert m["elem_type"] == gguf.GGUFValueType(int(f.parts[3][0])).name, m["key"]
            assert m["count"] == len(f.data), m["key"]
            if want is not None:
                if m["elem_type"] in ("FLOAT32", "FLOAT64"):
                    np.testing.assert_array_equal(np.array(m["value"], dtype=np.float64), np.array(want, dtype=np.float64))
                else:
                    assert m["value"] == want, m["key"]
        elif m["type"] in ("FLOAT32", "FLOAT64"):
            assert np.float64(m["value"]) == np.float64(want), m["key"]
        else:
            assert m["value"] == want, m["key"]
    assert len(ours["tensors"]) == len(ref.tensors)
    for t, r in zip(ours["tensors"], ref.tensors):
        assert t["name"] == r.name
        assert t["type"] == r.tensor_type.name
        assert t["ne"] == [int(x) for x in r.shape]
        assert t["bytes"] == int(r.n_bytes)
        assert ours["data_offset"] + t["offset"] == int(r.data_offset)
    assert ours["totals"]["parameters"] == sum(int(r.n_elements) for r in ref.tensors)


def test_inspect_real_vocab_matches_gguf_py(mla_bin, fixtures_dir):
    for name in ("deepseek-llm", "deepseek-coder", "gpt-2"):
        check_against_gguf_py(mla_bin, fixtures_dir / "vocab" / f"ggml-vocab-{name}.gguf")


def test_inspect_text_output(mla_bin, fixtures_dir):
    out = run_mla(mla_bin, "gguf", "inspect", str(fixtures_dir / "vocab" / "ggml-vocab-deepseek-llm.gguf")).stdout
    assert 'tokenizer.ggml.pre' in out and '"deepseek-llm"' in out
    assert "ARRAY[STRING, 102400]" in out and "(102400 items)" in out  # long arrays abbreviated
    assert "totals:" in out


def test_inspect_file_written_by_gguf_py(mla_bin, tmp_path):
    path = tmp_path / "w.gguf"
    w = gguf.GGUFWriter(str(path), "deepseek2")
    w.add_uint32("deepseek2.block_count", 3)
    w.add_float32("deepseek2.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float64("x.f64", 2.5)
    w.add_int64("x.i64", -(2**40))
    w.add_bool("x.bool", True)
    w.add_string("x.str", "ünïcödé ✓")
    w.add_array("x.floats", [1.5, -2.25])
    w.add_array("x.ints", [1, 2, 3])
    w.add_tensor("a.weight", np.ones((4, 64), dtype=np.float32))
    w.add_tensor("b.weight", np.ones((2, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    check_against_gguf_py(mla_bin, path)


def test_bad_files_give_one_line_error(mla_bin):
    manifest = json.loads((REPO / "tests/fixtures/gguf-bad/manifest.json").read_text())
    for name, needle in manifest.items():
        p = run_mla(mla_bin, "gguf", "inspect", str(REPO / "tests/fixtures/gguf-bad" / name), check=False)
        assert p.returncode == 1, name
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, (name, p.stderr)
        assert needle in lines[0] and "at byte" in lines[0], (name, lines[0])


def test_missing_file(mla_bin, tmp_path):
    p = run_mla(mla_bin, "gguf", "inspect", str(tmp_path / "nope.gguf"), check=False)
    assert p.returncode == 1 and "cannot open" in p.stderr


def test_inspect_deepseek4_schedule(mla_bin, fixtures_dir):
    """A deepseek4 file (tools/deepseek4): gguf-py agrees on every key and tensor, and the text
    output shows the derived layer schedule (attention kind, hash routing) and the compressed
    layers' YaRN."""
    for name in ("mixed", "yarn"):
        check_against_gguf_py(mla_bin, fixtures_dir / "deepseek4" / name / "model-f32.gguf")
    out = run_mla(mla_bin, "gguf", "inspect", str(fixtures_dir / "deepseek4" / "mixed" / "model-f32.gguf")).stdout
    assert "derived hyper-parameters (deepseek4):" in out
    assert "layers: sliding+hash csa+hash hca csa" in out
    out = run_mla(mla_bin, "gguf", "inspect", str(fixtures_dir / "deepseek4" / "yarn" / "model-f32.gguf")).stdout
    assert "3 layers (+0 MTP)" in out and "compressed 160000 (yarn)" in out
