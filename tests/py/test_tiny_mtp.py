"""The tiny model's MTP (nextn) layer, read with gguf-py: the trunk of both shipped files is the one
the model had before the layer was added (tensor bytes and keys against hashes recorded from the
previous files, tests/fixtures/tiny-mtp/trunk.json), the MTP block has llama.cpp's names, shapes and
quantization types, and the draft-logit fixture (tests/fixtures/tiny-mtp/) is what
tools/reference/gguf_forward.py's numpy MTP forward computes on the dequantized q8_0 file."""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
import pytest
from conftest import REPO

import gguf

sys.path.insert(0, str(REPO / "tools" / "reference"))
import gguf_forward

FIX = REPO / "tests" / "fixtures" / "tiny-mtp"
FILES = {"q8_0": REPO / "models" / "tiny-q8_0.gguf", "q4_k_m": REPO / "models" / "tiny-q4_k.gguf"}
N_TRUNK = 3
MTP = f"blk.{N_TRUNK}."
# llama.cpp's names for the MTP block's own tensors (gguf-py MODEL_TENSOR.NEXTN_*, "blk.{bid}.nextn.*");
# no shared_head_head / embed_tokens: the block uses the trunk's output and token_embd.
NEXTN = ["nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"]


def field_bytes(field) -> bytes:
    return b"".join(bytes(p.tobytes()) for p in field.parts)


@pytest.fixture(scope="module")
def readers():
    return {q: gguf.GGUFReader(str(p)) for q, p in FILES.items()}


@pytest.mark.parametrize("q", list(FILES))
def test_trunk_and_keys_unchanged(readers, q):
    old = json.loads((FIX / "trunk.json").read_text())[q]
    r = readers[q]
    assert old["n_layer"] == N_TRUNK
    trunk = {t.name: t for t in r.tensors if not t.name.startswith(MTP)}
    assert sorted(trunk) == sorted(old["tensors"])
    for name, rec in old["tensors"].items():
        t = trunk[name]
        assert t.tensor_type.name == rec["type"] and [int(x) for x in t.shape] == rec["ne"], name
        assert hashlib.sha256(bytes(t.data.tobytes())).hexdigest() == rec["sha256"], name
    fields = {f.name: f for f in r.fields.values() if not f.name.startswith("GGUF.")}
    assert set(fields) == set(old["keys"]) | {"deepseek2.nextn_predict_layers"}
    for name, sha in old["keys"].items():
        if name != "deepseek2.block_count":
            assert hashlib.sha256(field_bytes(fields[name])).hexdigest() == sha, name
    assert fields["deepseek2.block_count"].contents() == N_TRUNK + 1
    assert fields["deepseek2.nextn_predict_layers"].contents() == 1


@pytest.mark.parametrize("q", list(FILES))
def test_mtp_block_names_shapes_types(readers, q):
    ts = {t.name: t for t in readers[q].tensors}
    last = {n[len("blk.2."):]: t for n, t in ts.items() if n.startswith("blk.2.")}
    mtp = {n[len(MTP):]: t for n, t in ts.items() if n.startswith(MTP)}
    assert sorted(mtp) == sorted(NEXTN + list(last))
    E = int(ts["token_embd.weight"].shape[0])
    assert [int(x) for x in mtp["nextn.eh_proj.weight"].shape] == [2 * E, E]
    for n in NEXTN[1:]:
        assert [int(x) for x in mtp[n].shape] == [E] and mtp[n].tensor_type == gguf.GGMLQuantizationType.F32
    for n, t in last.items():  # a block of the trunk's last layer's shapes, quantized like it
        assert list(mtp[n].shape) == list(t.shape) and mtp[n].tensor_type == t.tensor_type, n
    # eh_proj: a plain matrix, the file type's default (Q8_0; Q4_K under the Q4_K_M rules)
    want = gguf.GGMLQuantizationType.Q8_0 if q == "q8_0" else gguf.GGMLQuantizationType.Q4_K
    assert mtp["nextn.eh_proj.weight"].tensor_type == want


@pytest.fixture(scope="module")
def q8_dequantized(readers):
    r = readers["q8_0"]
    keys = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}
    w = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64)
         .reshape([int(d) for d in reversed(t.shape)]) for t in r.tensors}
    return keys, w


def test_draft_logit_fixture_matches_numpy_forward(q8_dequantized):
    keys, w = q8_dequantized
    doc = json.loads((FIX / "draft_logits.json").read_text())
    assert len(doc["cases"]) >= 2
    for case in doc["cases"]:
        ids, R, V = case["tokens"], case["rows"], case["vocab"]
        assert R == len(ids) - 1 and V == 4096 and 20 <= len(ids) <= 60
        ref = np.fromfile(FIX / case["file"], dtype="<f4").reshape(R, V)
        trunk, mtp, _ = gguf_forward.mtp_forward(keys, w, ids, "mqa")
        assert np.abs(mtp - ref).max() <= 1e-4, case["file"]
        assert case["mtp_argmax"] == mtp.argmax(-1).tolist()
        assert case["trunk_argmax"] == trunk[1:].argmax(-1).tolist()
        assert case["accepted_k1_teacher_forced"] == int((mtp.argmax(-1) == trunk[1:].argmax(-1)).sum())


def test_fixture_tells_the_concatenation_order(q8_dequantized):
    """eh_proj's input is [enorm(embedding) ; hnorm(h)], embedding first: with the two halves of
    eh_proj swapped the draft logits are far from the fixture's."""
    keys, w = q8_dequantized
    case = json.loads((FIX / "draft_logits.json").read_text())["cases"][0]
    ref = np.fromfile(FIX / case["file"], dtype="<f4").reshape(case["rows"], -1)
    E = w["token_embd.weight"].shape[1]
    swapped = dict(w)
    eh = w[MTP + "nextn.eh_proj.weight"]
    swapped[MTP + "nextn.eh_proj.weight"] = np.concatenate([eh[:, E:], eh[:, :E]], axis=1)
    _, m_swapped, _ = gguf_forward.mtp_forward(keys, swapped, case["tokens"], "mqa")
    assert np.abs(m_swapped - ref).max() > 1.0
