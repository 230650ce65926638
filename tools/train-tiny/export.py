"""Exports a training checkpoint as a HF DeepseekV3ForCausalLM checkpoint and a GGUF.

    .venv/bin/python export.py --run NAME [--out DIR] [--outtype f16]

Steps:
 1. loads runs/NAME/ckpt.pt into the training module (train.build_model: transformers'
    DeepseekV3ForCausalLM with SDPA attention);
 2. saves DIR/hf: config.json (+ the converter's scoring_func/topk_method keys), safetensors
    weights (e_score_correction_bias included), tokenizer.json, tokenizer_config.json (chat template);
 3. reloads DIR/hf with from_pretrained (float32, eager attention) and checks its logits equal the
    training module's on held-out windows (max |diff| <= 1e-5 x max |logit|; writes
    DIR/export-check.json);
 4. converts DIR/hf with llama.cpp's convert_hf_to_gguf.py (through convert_gguf.py) to
    DIR/model-<outtype>.gguf.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from common import BOS_ID, CONTEXT, DATA, EXTRA_CONFIG, HERE, RUNS, encode_split, load_tokenizer

MODEL_NAME = "mla.cpp tiny DeepSeek-V3-style"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
DEFAULT_LLAMA_CPP = (Path(os.environ.get("REFERENCE_CACHE_DIR", Path.home() / ".cache" / "mla"))
                     / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp")


def load_training_model(run: str):
    from train import build_model
    ck = torch.load(RUNS / run / "ckpt.pt", weights_only=False)
    model = build_model(ck["args"]["seed"])
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck["step"]


def save_hf(model, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(EXTRA_CONFIG)
    cfg.pop("_attn_implementation_autoset", None)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DATA / "tokenizer" / name, out / name)


def check_logits(model, hf_dir: Path, n_windows: int = 4) -> dict:
    import transformers
    ref = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    sd_a, sd_b = model.state_dict(), ref.state_dict()
    missing = sorted(set(sd_a) ^ set(sd_b))
    if missing:
        raise SystemExit(f"export: state dict keys differ after reload: {missing[:8]}")
    for k in sd_a:
        if not torch.equal(sd_a[k], sd_b[k]):
            raise SystemExit(f"export: tensor {k} changed in save/reload")
    test = encode_split(load_tokenizer(), "test")
    ids = torch.from_numpy(np.stack([np.concatenate([[BOS_ID], test[i * CONTEXT:(i + 1) * CONTEXT - 1]])
                                     for i in range(n_windows)]).astype(np.int64))
    with torch.no_grad():
        a = model(input_ids=ids).logits
        b = ref(input_ids=ids).logits
    diff = (a - b).abs().max().item()
    scale = a.abs().max().item()
    result = {"windows": n_windows, "tokens_per_window": CONTEXT, "max_abs_diff": diff, "max_abs_logit": scale,
              "argmax_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean())}
    # SDPA (training) and eager (reference) attention round differently: allow float32 noise
    # relative to the logits' magnitude, nothing more.
    if diff > 1e-5 * max(1.0, scale):
        raise SystemExit(f"export: training module and reloaded transformers model differ: max |diff| {diff} "
                         f"(max |logit| {scale})")
    return result


def convert(hf_dir: Path, outfile: Path, outtype: str, llama_cpp: Path) -> None:
    if not (llama_cpp / "convert_hf_to_gguf.py").is_file():
        raise SystemExit(f"export: {llama_cpp}/convert_hf_to_gguf.py not found (run tools/train-tiny/setup.sh)")
    env = dict(os.environ, PYTHONPATH=str(llama_cpp / "gguf-py"))
    subprocess.run([sys.executable, str(HERE / "convert_gguf.py"), str(llama_cpp), "--", str(hf_dir),
                    "--outtype", outtype, "--outfile", str(outfile), "--model-name", MODEL_NAME], check=True, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="main")
    ap.add_argument("--out", type=Path, help="default: runs/RUN/export")
    ap.add_argument("--outtype", default="f16", choices=["f16", "f32", "bf16"])
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = args.out or RUNS / args.run / "export"
    out.mkdir(parents=True, exist_ok=True)

    model, step = load_training_model(args.run)
    save_hf(model, out / "hf")
    check = check_logits(model, out / "hf") | {"step": step}
    (out / "export-check.json").write_text(json.dumps(check, indent=1) + "\n")
    print(f"export: step {step}; transformers reload matches the training module: {check}", flush=True)
    convert(out / "hf", out / f"model-{args.outtype}.gguf", args.outtype, args.llama_cpp)
    print(f"export: wrote {out / f'model-{args.outtype}.gguf'}")


if __name__ == "__main__":
    main()
