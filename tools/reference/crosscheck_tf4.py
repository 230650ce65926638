"""Checks the reference logits against a second, independent DeepSeek implementation:
transformers 4.57.6 (the version llama.cpp's converter pins), whose modeling code differs from
5.x (per-expert modules, rope de-interleaving by view/transpose, 0.0 instead of -inf masking of
dropped expert groups, no YaRN mscale^2 in DeepseekV2Attention).

    bash tools/reference/setup.sh --tf4
    tools/reference/.venv/bin/python tools/reference/make_fixtures.py --out /tmp/ref --keep-work /tmp/ref-hf
    tools/reference/.venv-tf4/bin/python tools/reference/crosscheck_tf4.py /tmp/ref-hf /tmp/ref

(HF checkpoints are not committed; --keep-work writes them.) Prints max |tf4 - tf5| per case.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import transformers


def load_tf4(hf_dir: Path, fix_v2_mscale: bool):
    cfg = json.loads((hf_dir / "config.json").read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    cfg["rope_scaling"] = rope
    arch = cfg["architectures"][0]
    config_cls = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    for k in ("architectures", "transformers_version", "dtype", "model_type"):
        cfg.pop(k, None)
    config = config_cls(**cfg)
    model = getattr(transformers, arch).from_pretrained(hf_dir, config=config, torch_dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    if arch == "DeepseekV2ForCausalLM" and fix_v2_mscale:
        # transformers 4.57.6 DeepseekV2Attention uses qk_head_dim**-0.5 and leaves out the YaRN
        # mscale(factor, mscale_all_dim)**2 that DeepSeek's own code, transformers 5.x and llama.cpp use.
        m = 0.1 * rope["mscale_all_dim"] * math.log(rope["factor"]) + 1.0
        for layer in model.model.layers:
            layer.self_attn.scaling = layer.self_attn.qk_head_dim ** -0.5 * m * m
    return model


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    hf_root, fixtures = Path(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for model_dir in sorted(p.parent for p in fixtures.glob("*/reference.json")):
        index = json.loads((model_dir / "reference.json").read_text())
        variants = [True, False] if index["hf_class"] == "DeepseekV2ForCausalLM" else [True]
        for fix in variants:
            model = load_tf4(hf_root / model_dir.name, fix_v2_mscale=fix)
            diffs = []
            for case, entry in index["cases"].items():
                ref = np.fromfile(model_dir / entry["logits"]["file"], dtype="<f4").reshape(entry["logits"]["shape"])
                with torch.no_grad():
                    got = model(input_ids=torch.tensor([entry["token_ids"]]), use_cache=False).logits[0].numpy()
                diffs.append(f"{case} {np.max(np.abs(got - ref)):.2e}")
            label = "" if len(variants) == 1 else (" (mscale^2 added)" if fix else " (as shipped)")
            print(f"{model_dir.name}{label}: max |tf4 - tf5| logits: " + ", ".join(diffs))


if __name__ == "__main__":
    main()
