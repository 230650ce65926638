#!/usr/bin/env python3
"""Writes the checked-in corpus of malformed GGUF files (tests/fixtures/gguf-bad/).

Each file is built byte by byte with struct (not with any GGUF library, which would refuse to
write them) and listed in manifest.json with a fragment of the error mla.cpp must report.
Starting points are valid files written with gguf-py, then damaged, so the corpus also seeds
the fuzzer (scripts/run-fuzz.sh). Re-run: .venv/bin/python tools/make_bad_gguf.py
"""
import json
import struct
from pathlib import Path

import numpy as np

import gguf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gguf-bad"
MAGIC = b"GGUF"


def s(x: str | bytes) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return MAGIC + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv_u32(key: str, v: int) -> bytes:
    return s(key) + struct.pack("<II", 4, v)


def tinfo(name: str, ne: list[int], typ: int, off: int) -> bytes:
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", typ, off)


def pad(b: bytes, a: int = 32) -> bytes:
    return b + b"\0" * ((-len(b)) % a)


def valid_file(path: Path) -> bytes:
    w = gguf.GGUFWriter(str(path), "deepseek2")
    w.add_uint32("deepseek2.block_count", 2)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for f in OUT.glob("*.gguf"):
        f.unlink()
    cases: dict[str, tuple[bytes, str]] = {}
    good = valid_file(OUT / "valid.gguf")
    cases["empty"] = (b"", "file is empty")
    cases["magic-only"] = (MAGIC, "truncated")
    cases["bad-magic"] = (b"GGML" + good[4:], "not a GGUF file")
    cases["version-1"] = (MAGIC + struct.pack("<I", 1) + good[8:], "version 1")
    cases["version-99"] = (MAGIC + struct.pack("<I", 99) + good[8:], "unsupported GGUF version 99")
    cases["big-endian"] = (MAGIC + struct.pack(">IQQ", 3, 1, 2) + good[24:], "big-endian")
    cases["kv-count-overflow"] = (header(0, 2**63), "metadata count")
    cases["tensor-count-overflow"] = (header(2**62, 0), "tensor count")
    cases["key-longer-than-file"] = (header(0, 1) + struct.pack("<Q", 2**40) + b"abc" * 8, "exceeds")
    cases["string-value-longer-than-file"] = (header(0, 1) + s("k") + struct.pack("<IQ", 8, 10**6) + b"x" * 20, "exceeds")
    cases["unknown-value-type"] = (header(0, 1) + s("k") + struct.pack("<I", 13) + b"\0" * 16, "unknown metadata value type 13")
    cases["array-count-overflow"] = (header(0, 1) + s("k") + struct.pack("<IIQ", 9, 6, 2**62) + b"\0" * 16, "cannot fit")
    cases["array-unknown-elem"] = (header(0, 1) + s("k") + struct.pack("<IIQ", 9, 77, 1) + b"\0" * 16, "unknown metadata value type 77")
    nested = header(0, 1) + s("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 12 + struct.pack("<IQ", 0, 0)
    cases["arrays-nested-too-deep"] = (nested, "nested deeper")
    cases["bool-not-0-or-1"] = (header(0, 1) + s("k") + struct.pack("<IB", 7, 5), "BOOL value 5")
    cases["duplicate-key"] = (header(0, 2) + kv_u32("k", 1) + kv_u32("k", 2), "duplicate metadata key")
    cases["alignment-not-power-of-two"] = (header(0, 1) + kv_u32("general.alignment", 24), "not a power of two")
    cases["alignment-wrong-type"] = (header(0, 1) + s("general.alignment") + struct.pack("<IQ", 10, 32), "general.alignment has type UINT64")
    cases["truncated-in-kv"] = (good[:40], "truncated")
    cases["truncated-in-tensor-data"] = (good[: len(good) - 100], "runs past the end")
    # Id 37: retired by llama.cpp, never assigned by ik_llama.cpp. Id 31: ik_llama.cpp's Q4_0_4_4, a
    # type mla.cpp does not read (llama.cpp retired the id).
    cases["tensor-unknown-type"] = (
        pad(header(1, 0) + tinfo("w", [32], 37, 0)) + b"\0" * 128,
        "tensor 'w' has unknown type id 37 (neither llama.cpp nor ik_llama.cpp assigns it)",
    )
    cases["tensor-ik-type-unreadable"] = (
        pad(header(1, 0) + tinfo("w", [32], 31, 0)) + b"\0" * 128,
        "type Q4_0_4_4 (ik_llama.cpp id 31), which mla.cpp cannot read",
    )
    cases["tensor-kt-row-past-end"] = (
        pad(header(1, 0) + tinfo("w", [256, 2], 153, 0)) + b"\0" * (2 * 68),
        "runs past the end",
    )
    cases["tensor-too-many-dims"] = (pad(header(1, 0) + tinfo("w", [2, 2, 2, 2, 2], 0, 0)) + b"\0" * 128, "5 dimensions")
    cases["tensor-dim-negative"] = (pad(header(1, 0) + tinfo("w", [2**63 + 5], 0, 0)) + b"\0" * 64, "negative or too large")
    cases["tensor-elements-overflow"] = (pad(header(1, 0) + tinfo("w", [2**32, 2**32, 2**32], 0, 0)), "overflows")
    cases["tensor-row-not-block-multiple"] = (pad(header(1, 0) + tinfo("w", [100], 12, 0)) + b"\0" * 512, "not a multiple of its block size 256")
    # ik_llama.cpp's own ids: one it retired (142, IQ2_TN), an IQ4_KS (144) row that
    # its 256-element blocks do not divide, and two IQ4_KS rows of 256 stored without their 4-byte
    # row scales (2 x 136 bytes where 2 x 140 are needed).
    cases["tensor-unknown-ik-type"] = (pad(header(1, 0) + tinfo("w", [256], 142, 0)) + b"\0" * 256, "unknown type id 142 (neither llama.cpp nor ik_llama.cpp assigns it)")
    cases["tensor-ik-row-not-block-multiple"] = (pad(header(1, 0) + tinfo("w", [100], 144, 0)) + b"\0" * 512, "type IQ4_KS (ik_llama.cpp id 144) has row length 100")
    cases["tensor-ik-rows-without-row-scale"] = (pad(header(1, 0) + tinfo("w", [256, 2], 144, 0)) + b"\0" * 272, "data [0, +280) runs past the end")
    cases["tensor-misaligned"] = (pad(header(1, 0) + tinfo("w", [8], 0, 4)) + b"\0" * 64, "not a multiple of the alignment")
    cases["tensor-past-end"] = (pad(header(1, 0) + tinfo("w", [1024], 0, 0)) + b"\0" * 64, "runs past the end")
    cases["tensor-offset-huge"] = (pad(header(1, 0) + tinfo("w", [8], 0, 2**63)) + b"\0" * 64, "runs past the end")
    cases["tensors-overlap"] = (pad(header(2, 0) + tinfo("a", [32], 0, 0) + tinfo("b", [32], 0, 64)) + b"\0" * 256, "overlaps")
    cases["duplicate-tensor"] = (pad(header(2, 0) + tinfo("a", [8], 0, 0) + tinfo("a", [8], 0, 32)) + b"\0" * 64, "duplicate tensor name")
    manifest = {}
    for name, (data, needle) in cases.items():
        (OUT / f"{name}.gguf").write_bytes(data)
        manifest[f"{name}.gguf"] = needle
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} bad files and valid.gguf to {OUT}")


if __name__ == "__main__":
    main()
