"""NVFP4 reference fixture from gguf-py's own dequantization (gguf >= 0.19.0, the first PyPI
release with NVFP4; the project venv pins an older gguf, so run this with a 0.19.0 install on
PYTHONPATH). Writes tests/fixtures/quant/nvfp4/NVFP4.bin in the MLAQFIX1 layout of
tools/ik-llama/dump_trellis.cpp:
  "MLAQFIX1" | u32 type id | u32 rows | u32 cols | u32 row_bytes | rows*row_bytes bytes | rows*cols f32

Rows 0-15: random blocks whose 256 sub-block scale bytes are every byte value once (0x7F, 0x80,
0xFF included). Rows 16-19: real-shaped rows (gguf 0.19.0 has no NVFP4 quantizer: scale bytes from its
fp32_to_ue4m3 of amax / 6, codes by nearest value, as ggml's reference quantizer chooses them).
"""

import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "quant" / "nvfp4" / "NVFP4.bin"
COLS = 256


def quantize_rows(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 16)
    ue = quants.NVFP4.fp32_to_ue4m3(np.abs(sub).max(axis=1) / 6.0).astype(np.uint8)
    d = quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    values = np.array(quants.NVFP4.kvalues, dtype=np.float32)
    codes = np.abs(values[None, None, :] * d[:, None, None] - sub[:, :, None]).argmin(axis=2).astype(np.uint8)
    packed = codes[:, :8] | (codes[:, 8:] << 4)  # byte j: element j low, element j + 8 high
    blocks = np.concatenate([ue.reshape(-1, 4), packed.reshape(-1, 32)], axis=1)
    return blocks.reshape(x.shape[0], -1)


def main() -> int:
    if not hasattr(T, "NVFP4"):
        print(f"gguf {gguf.__file__} has no NVFP4 (need gguf >= 0.19.0)", file=sys.stderr)
        return 1
    rng = np.random.default_rng(20260405)
    blocks_per_row = COLS // 64
    row_bytes = blocks_per_row * 36
    # Random rows: scale bytes 0..255 in order, nibbles random.
    random_rows = rng.integers(0, 256, size=(16, blocks_per_row, 36), dtype=np.uint8)
    random_rows[:, :, :4] = np.arange(256, dtype=np.uint8).reshape(16, blocks_per_row, 4)
    # Real-shaped rows: Gaussian bodies of different scales, a few outliers.
    x = rng.standard_normal((4, COLS)).astype(np.float32) * np.array([[0.01], [0.05], [0.3], [2.0]], np.float32)
    x[3, ::37] *= 20.0
    real_rows = quantize_rows(x).reshape(4, blocks_per_row, 36)
    q = np.concatenate([random_rows, real_rows]).reshape(-1, row_bytes)
    y = quants.dequantize(q, T.NVFP4).astype(np.float32).reshape(q.shape[0], COLS)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    head = np.array([int(T.NVFP4), q.shape[0], COLS, row_bytes], dtype="<u4")
    OUT.write_bytes(b"MLAQFIX1" + head.tobytes() + q.tobytes() + y.astype("<f4").tobytes())
    print(f"{OUT}: {q.shape[0]} x {COLS} from gguf {gguf.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
