"""Copies of a deepseek2 GGUF broken on purpose, one way each, for the `mla doctor` tests.

Written with gguf-py (the reference reader/writer), never with mla itself, so a bug in mla's
writer cannot hide a bug in its doctor. Every tensor is copied byte for byte unless the break
changes it.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import gguf

# name, reader tensor -> (data, raw ggml type or None for a float32 array)
TensorEdit = Callable[[str, "gguf.ReaderTensor"], "tuple[np.ndarray, gguf.GGMLQuantizationType | None] | None"]


def _as_f32(t) -> np.ndarray:
    """The tensor's values as float32 in numpy order (ne reversed)."""
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return np.array(t.data, dtype=np.float32)
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)


def copy_gguf(src: Path, dst: Path, *, drop_keys=(), set_keys: dict | None = None,
              edit: TensorEdit | None = None, rename: dict | None = None, add: dict | None = None) -> Path:
    """add: extra tensors (name -> float32 array) written after the copied ones."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    set_keys = set_keys or {}
    rename = rename or {}
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop_keys:
            continue
        if name in set_keys:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub)
    for name, (value, vtype) in set_keys.items():
        w.add_key_value(name, value, vtype)
    for t in r.tensors:
        out_name = rename.get(t.name, t.name)
        changed = edit(t.name, t) if edit else None
        if changed is None:
            w.add_tensor(out_name, np.array(t.data), raw_dtype=t.tensor_type)
        else:
            data, raw = changed
            w.add_tensor(out_name, data, raw_dtype=raw)
    for name, data in (add or {}).items():
        w.add_tensor(name, np.asarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def heads_reversed(src: Path, dst: Path) -> Path:
    """attn_k_b with its heads in reverse order (every layer): wrong the same way on every path."""
    def edit(name, t):
        if not name.endswith("attn_k_b.weight"):
            return None
        # numpy order {n_head, kv_lora_rank, row bytes or qk_nope}: whole rows move, any type.
        return np.ascontiguousarray(np.array(t.data)[::-1]), t.tensor_type
    return copy_gguf(src, dst, edit=edit)


def kb_vb_exchanged(src: Path, dst: Path) -> Path:
    """attn_k_b and attn_v_b exchanged by name (each keeps its own data and shape)."""
    rename = {}
    r = gguf.GGUFReader(src)
    for t in r.tensors:
        if t.name.endswith("attn_k_b.weight"):
            rename[t.name] = t.name.replace("attn_k_b", "attn_v_b")
        elif t.name.endswith("attn_v_b.weight"):
            rename[t.name] = t.name.replace("attn_v_b", "attn_k_b")
    return copy_gguf(src, dst, rename=rename)


def absorbed_scaled(src: Path, dst: Path, scale: float = 2.0 ** 12) -> Path:
    """W_UK and W_UV times `scale`, the latent norm (attn_kv_a_norm) divided by it: the model's
    function is unchanged in exact arithmetic (k = W_UK c_kv, v = W_UV c_kv), but the absorbed
    query W_UKᵀ q grows by `scale` and would overflow F16."""
    def edit(name, t):
        if name.endswith(("attn_k_b.weight", "attn_v_b.weight")):
            return _as_f32(t) * np.float32(scale), None
        if name.endswith("attn_kv_a_norm.weight"):
            return _as_f32(t) / np.float32(scale), None
        return None
    return copy_gguf(src, dst, edit=edit)


def wrong_kv_lora_rank(src: Path, dst: Path) -> Path:
    """attention.kv_lora_rank half of what the tensors say."""
    r = gguf.GGUFReader(src)
    key = "deepseek2.attention.kv_lora_rank"
    rank = int(r.fields[key].contents())
    return copy_gguf(src, dst, set_keys={key: (rank // 2, gguf.GGUFValueType.UINT32)})


def drop_key(src: Path, dst: Path, key: str) -> Path:
    """The file without one metadata key (e.g. rope.scaling.type of a YaRN model)."""
    r = gguf.GGUFReader(src)
    assert key in r.fields, f"{src} has no key {key}"
    return copy_gguf(src, dst, drop_keys=(key,))
