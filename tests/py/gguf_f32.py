"""Writes a copy of a GGUF with every tensor dequantized to F32 by gguf-py: same keys (general.file_type
set to 0, ALL_F32), same tensor names, shapes and order. The MTP draft-logit fixture
(tests/fixtures/tiny-mtp/) is computed on the F32 copy of models/tiny-q8_0.gguf, so an engine that
runs F32 weights exactly can be compared with it at 1e-4 without quantization noise.

    .venv/bin/python tests/py/gguf_f32.py models/tiny-q8_0.gguf OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import gguf


def writer_with_keys(reader: gguf.GGUFReader, path: Path, file_type: int | None = None) -> gguf.GGUFWriter:
    """A GGUFWriter at path holding every key of reader's file (general.file_type replaced when given)."""
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(path), arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE and file_type is not None:
            value = file_type
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    return writer


def write_f32_copy(src: Path, dst: Path) -> None:
    reader = gguf.GGUFReader(str(src))
    tmp = dst.with_name(dst.name + ".tmp")
    writer = writer_with_keys(reader, tmp, int(gguf.LlamaFileType.ALL_F32))
    arrays = []
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # numpy order: ne reversed
        a = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        writer.add_tensor_info(t.name, a.shape, a.dtype, a.nbytes, gguf.GGMLQuantizationType.F32)
        arrays.append(a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for a in arrays:
        writer.write_tensor_data(a)
    writer.close()
    tmp.replace(dst)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_f32.py IN.gguf OUT.gguf")
    write_f32_copy(Path(sys.argv[1]), Path(sys.argv[2]))


if __name__ == "__main__":
    main()
