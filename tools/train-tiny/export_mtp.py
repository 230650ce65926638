"""Adds a trained MTP (nextn) layer to the shipped tiny GGUFs without touching their trunk.

    .venv/bin/python export_mtp.py --run NAME [--mla build/mla] [--models models]
    .venv/bin/python export_mtp.py --record-trunk OUT.json   (before the first export: the trunk's
                                                              tensor and key hashes, for the test)

Steps:
 1. the MTP module of runs/NAME/mtp.pt as float32 tensors under their GGUF names (blk.3.*);
 2. runs/NAME/mtp-export/full-f32.gguf: every trunk tensor of tiny-q8_0.gguf dequantized to
    float32 (gguf-py) plus the MTP tensors, the keys of tiny-q8_0.gguf with block_count 4 and
    nextn_predict_layers 1;
 3. `mla gguf quantize` of that file to q8_0 and to q4_k_m (llama-quantize's Q4_K_M role rules,
    applied to the 4-block file: the MTP tensors get the types of their roles);
 4. tiny-q8_0.gguf and tiny-q4_k.gguf rewritten: their own keys in their own order (block_count 3
    -> 4, deepseek2.nextn_predict_layers = 1 added after it), their trunk tensors' bytes copied
    unchanged, then the MTP block's tensors copied from the quantized file of step 3. A file that
    already has an MTP block has it replaced (the trunk is the first block_count -
    nextn_predict_layers blocks).
 5. checks: the rewritten files' trunk tensors (type, shape, bytes) and keys equal the input files'.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch

from common import RUNS
from mtp_model import MTP, Config, import_gguf, load_gguf, mtp_state, mtp_tensors_from_layer

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ARCH = "deepseek2"


def field_bytes(field) -> bytes:
    """A key's whole serialized record (name, type, value) as gguf-py read it."""
    return b"".join(bytes(p.tobytes()) for p in field.parts)


def trunk_layers(reader) -> int:
    f = {x.name: x.contents() for x in reader.fields.values()}
    return f[f"{ARCH}.block_count"] - f.get(f"{ARCH}.nextn_predict_layers", 0)


def is_trunk(name: str, n_layer: int) -> bool:
    return not name.startswith("blk.") or int(name.split(".")[1]) < n_layer


def trunk_record(path: Path) -> dict:
    """sha256 of every trunk tensor's bytes (with its type and shape) and of every key's record."""
    gguf = import_gguf()
    r = gguf.GGUFReader(str(path))
    n_layer = trunk_layers(r)
    tensors = {t.name: {"type": t.tensor_type.name, "ne": [int(x) for x in t.shape],
                        "sha256": hashlib.sha256(bytes(t.data.tobytes())).hexdigest()}
               for t in r.tensors if is_trunk(t.name, n_layer)}
    keys = {f.name: hashlib.sha256(field_bytes(f)).hexdigest() for f in r.fields.values()
            if not f.name.startswith("GGUF.")}
    return {"file": path.name, "n_layer": n_layer, "tensors": tensors, "keys": keys}


def copy_keys(reader, writer, gguf, new_block_count: int) -> None:
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes the architecture first itself
        if field.name == f"{ARCH}.nextn_predict_layers":
            continue  # re-added after block_count
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        if field.name == f"{ARCH}.block_count":
            writer.add_key_value(field.name, new_block_count, vtype)
            writer.add_key_value(f"{ARCH}.nextn_predict_layers", 1, gguf.GGUFValueType.UINT32)
            continue
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)


def write_gguf(path: Path, key_src, parts: list[tuple[str, object]], gguf, n_layer: int) -> None:
    """parts: (name, reader tensor or float32 numpy array) in file order."""
    w = gguf.GGUFWriter(str(path), ARCH, endianess=key_src.endianess)
    copy_keys(key_src, w, gguf, n_layer + 1)
    for name, t in parts:
        if isinstance(t, np.ndarray):
            w.add_tensor_info(name, t.shape, t.dtype, t.nbytes, gguf.GGMLQuantizationType.F32)
        else:
            w.add_tensor_info(name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, t in parts:
        w.write_tensor_data(t if isinstance(t, np.ndarray) else t.data)
    w.close()


def mtp_order(names: list[str], layer: int, template_layer: int, template: list[str]) -> list[str]:
    """The MTP block's tensor names: nextn.* first, then in the order of the template layer's."""
    gguf = import_gguf()
    own = [gguf.MODEL_TENSOR.NEXTN_EH_PROJ, gguf.MODEL_TENSOR.NEXTN_ENORM, gguf.MODEL_TENSOR.NEXTN_HNORM,
           gguf.MODEL_TENSOR.NEXTN_SHARED_HEAD_NORM]
    assert all(t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.DEEPSEEK2] for t in own), "gguf-py: no nextn in deepseek2"
    order = [gguf.TENSOR_NAMES[t].format(bid=layer) + ".weight" for t in own]  # llama.cpp's names
    order += [f"blk.{layer}." + n[len(f"blk.{template_layer}."):] for n in template if n.startswith(f"blk.{template_layer}.")]
    assert sorted(order) == sorted(names), sorted(set(order) ^ set(names))
    return order


def check(old: dict, new_path: Path) -> None:
    new = trunk_record(new_path)
    if new["tensors"] != old["tensors"]:
        bad = [n for n in old["tensors"] if new["tensors"].get(n) != old["tensors"][n]]
        raise SystemExit(f"export_mtp: {new_path.name}: trunk tensors changed: {bad[:5]}")
    changed = [k for k in old["keys"] if new["keys"].get(k) != old["keys"][k] and k != f"{ARCH}.block_count"]
    if changed:
        raise SystemExit(f"export_mtp: {new_path.name}: keys changed: {changed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="mtp")
    ap.add_argument("--mla", type=Path, default=REPO / "build" / "mla")
    ap.add_argument("--models", type=Path, default=REPO / "models")
    ap.add_argument("--record-trunk", type=Path, help="write the trunk record of both files and exit")
    args = ap.parse_args()
    gguf = import_gguf()
    files = {"q8_0": args.models / "tiny-q8_0.gguf", "q4_k_m": args.models / "tiny-q4_k.gguf"}

    if args.record_trunk:
        rec = {q: trunk_record(p) for q, p in files.items()}
        args.record_trunk.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        print(f"export_mtp: wrote {args.record_trunk}")
        return

    out = RUNS / args.run / "mtp-export"
    out.mkdir(parents=True, exist_ok=True)
    ck = torch.load(RUNS / args.run / "mtp.pt", weights_only=False)
    print(f"export_mtp: runs/{args.run}/mtp.pt at step {ck['step']}", flush=True)
    keys, tensors = load_gguf(files["q8_0"])
    cfg = Config(keys)
    layer = cfg.n_layer
    assert ck["layer"] == layer, (ck["layer"], layer)
    # the module's shapes from trunk layer n_layer-1 (as train_mtp.py built it), then the trained values
    mtp = MTP(cfg, mtp_tensors_from_layer(tensors, layer - 1, layer, cfg.n_embd, 1.0), f"blk.{layer}.")
    mtp.load_state_dict(ck["mtp"])
    mtp_t = mtp_state(mtp, layer)
    np.savez(out / "mtp-f32.npz", **mtp_t)

    readers = {q: gguf.GGUFReader(str(p)) for q, p in files.items()}
    records = {q: trunk_record(p) for q, p in files.items()}
    q8 = readers["q8_0"]
    trunk_names = [t.name for t in q8.tensors if is_trunk(t.name, layer)]
    order = mtp_order(list(mtp_t), layer, layer - 1, trunk_names)

    full = out / "full-f32.gguf"
    write_gguf(full, q8, [(n, tensors[n]) for n in trunk_names] + [(n, mtp_t[n]) for n in order], gguf, layer)
    done = []
    for q, path in files.items():
        qfile = out / f"full-{q}.gguf"
        log = subprocess.run([str(args.mla), "gguf", "quantize", str(full), str(qfile), q],
                             check=True, capture_output=True, text=True).stdout
        (out / f"quantize-{q}.txt").write_text(log)
        qt = {t.name: t for t in gguf.GGUFReader(str(qfile)).tensors}
        src = readers[q]
        parts = [(t.name, t) for t in src.tensors if is_trunk(t.name, layer)] + [(n, qt[n]) for n in order]
        tmp = out / f"new-{path.name}"
        write_gguf(tmp, src, parts, gguf, layer)
        check(records[q], tmp)
        types = {n: qt[n].tensor_type.name for n in order}
        print(f"export_mtp: {path.name}: trunk unchanged; MTP tensor types {json.dumps(types)}")
        done.append((tmp, path))
    del readers, q8, src
    for tmp, path in done:  # replaced only when both files were written and checked
        shutil.copy(tmp, path.with_name(path.name + ".new"))
        os.replace(path.with_name(path.name + ".new"), path)
    print("export_mtp: done: " + ", ".join(f"{p.name} {p.stat().st_size} bytes" for p in files.values()))


if __name__ == "__main__":
    main()
