"""Builds the forward-pass reference fixtures under tests/fixtures/reference/.

    bash tools/reference/setup.sh && tools/reference/.venv/bin/python tools/reference/make_fixtures.py

Steps (all seeded; a re-run rewrites byte-identical files):
 1. trains a small byte-level BPE vocabulary on tools/reference/corpus.txt with the normalizer,
    pre-tokenizer, post-processor and decoder of the real DeepSeek-V3 tokenizer
    (tests/fixtures/tokenizers/deepseek-v3), and DeepSeek-V3's special/chat tokens;
 2. builds two tiny random models with transformers' own classes (see MODELS), saves them as HF
    checkpoints (safetensors + config.json + tokenizer) in a scratch dir, and converts each with
    llama.cpp's convert_hf_to_gguf.py --outtype f32 (through convert_gguf.py);
 3. reloads each checkpoint from disk and runs it in float32 (eager attention, no_grad, 1 thread) on
    fixed token sequences; writes logits for every position, a 32-token greedy continuation (manual
    loop, full recompute each step, EOS not treated as a stop), per-step logits of that loop, hidden
    states per layer (short and one-token cases), and the routed experts per MoE layer;
 4. self-check: gguf_forward.py (numpy, reads only the GGUF) must reproduce the logits.

Output per model, in tests/fixtures/reference/<model>/:
  model-f32.gguf          the converter's output
  reference.json          index: config, token ids, shapes, file names, continuations, routing
  *.f32                   raw little-endian float32 arrays, shapes in reference.json (row-major)
  gguf-dump.md            keys (with values) and tensors (name, type, shape) of model-f32.gguf
Shared: tests/fixtures/reference/tokenizer/{tokenizer.json,tokenizer_config.json}.
See tools/reference/NOTES.md for what the C++ forward pass must match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "reference"
DEFAULT_DSV3_TOKENIZER = REPO / "tests" / "fixtures" / "tokenizers" / "deepseek-v3"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
DEFAULT_LLAMA_CPP = (Path(os.environ.get("REFERENCE_CACHE_DIR", Path.home() / ".cache" / "mla"))
                     / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp")

SEED = 20240517
VOCAB_SIZE = 512
N_GENERATE = 32
HIDDEN_CASES = ("short", "one")  # hidden states are written for these cases only (size)

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
# The chat/tool tokens of DeepSeek-V3's chat template, appended after the trained vocabulary (as in
# the real tokenizer, where they sit after the BPE vocabulary), with the real tokenizer's flags.
CHAT_TOKENS = [
    "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>", "<｜tool▁sep｜>",
]

# Prompts. Each is BOS + the encoding of the text; "one" is the BOS token alone.
CASES = {
    "short": "The model reads tokens.",
    "long": ("Multi-head latent attention keeps one small latent row per token. A router picks a few "
             "experts for every token, and the shared expert always runs. Numbers like 2048 and 3.14 "
             "and words in other scripts, 你好 and Привет, are split by the pre-tokenizer first."),
    "one": None,
}

# (A) DeepSeek-V3 style: q_lora, sigmoid routing with score-correction bias, 2 groups of 4 experts
# with 1 group kept, routed scaling 2.5, normalised top-k, 1 shared expert, YaRN.
# (B) DeepSeek-V2-Lite style: no q_lora, softmax routing, greedy top-k (n_group 1), no top-k
# normalisation, routed scaling 1.0, 2 shared experts, YaRN as in V2-Lite (factor 40, mscale 0.707);
# v_head_dim != qk_nope_head_dim and a different kv_lora_rank/rope dim to catch mixed-up sizes.
MODELS = {
    "deepseek-v3-tiny": {
        "cls": "DeepseekV3ForCausalLM", "config_cls": "DeepseekV3Config",
        "config": {
            "vocab_size": VOCAB_SIZE, "hidden_size": 256, "intermediate_size": 256, "moe_intermediate_size": 32,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
            "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 16384, "rope_interleave": True,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                 "original_max_position_embeddings": 4096, "mscale": 1.0,
                                 "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0},
            "num_nextn_predict_layers": 0, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
            "hidden_act": "silu", "attention_bias": False,
        },
        # keys that real DeepSeek-V3 config.json files carry and the converter reads, but this
        # transformers config class does not define (its router is always sigmoid + noaux_tc)
        "extra_config": {"scoring_func": "sigmoid", "topk_method": "noaux_tc"},
    },
    "deepseek-v2-lite-tiny": {
        "cls": "DeepseekV2ForCausalLM", "config_cls": "DeepseekV2Config",
        "config": {
            "vocab_size": VOCAB_SIZE, "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 32,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": None, "kv_lora_rank": 96, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 48,
            "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 2, "n_group": 1, "topk_group": 1,
            "topk_method": "greedy", "first_k_dense_replace": 1, "routed_scaling_factor": 1.0,
            "norm_topk_prob": False, "rms_norm_eps": 1e-6, "max_position_embeddings": 163840,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                 "original_max_position_embeddings": 4096, "mscale": 0.707,
                                 "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0},
            "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False,
        },
        "extra_config": {"scoring_func": "softmax"},
    },
}


# ---------------------------------------------------------------------------------------------
# tokenizer

def build_tokenizer(dsv3_dir: Path, out_dir: Path) -> Tokenizer:
    """Trains the fixture vocabulary; writes tokenizer.json and tokenizer_config.json to out_dir."""
    with open(dsv3_dir / "tokenizer.json", encoding="utf-8") as f:
        dsv3 = json.load(f)
    with open(dsv3_dir / "tokenizer_config.json", encoding="utf-8") as f:
        dsv3_config = json.load(f)
    real_added = {t["content"]: t for t in dsv3["added_tokens"]}

    skeleton = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": dsv3["normalizer"], "pre_tokenizer": dsv3["pre_tokenizer"],
        "post_processor": dsv3["post_processor"], "decoder": dsv3["decoder"],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {}, "merges": []},
    }
    tok = Tokenizer.from_str(json.dumps(skeleton))

    def added(content: str) -> AddedToken:
        r = real_added[content]
        return AddedToken(content, single_word=r["single_word"], lstrip=r["lstrip"], rstrip=r["rstrip"],
                          normalized=r["normalized"], special=r["special"])

    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(CHAT_TOKENS), min_frequency=2, show_progress=False,
        special_tokens=[added(t) for t in (BOS, EOS, PAD)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(HERE / "corpus.txt")], trainer)
    if tok.get_vocab_size() != VOCAB_SIZE - len(CHAT_TOKENS):
        raise SystemExit(f"tokenizer: trained {tok.get_vocab_size()} tokens, expected "
                         f"{VOCAB_SIZE - len(CHAT_TOKENS)} (corpus too small?)")
    chat = [added(t) for t in CHAT_TOKENS]
    tok.add_tokens([t for t in chat if not t.special])
    tok.add_special_tokens([t for t in chat if t.special])
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"tokenizer: {tok.get_vocab_size()} tokens after adding chat tokens, expected {VOCAB_SIZE}")
    for i, t in enumerate((BOS, EOS, PAD)):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))

    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"), pretty=True)
    config = {k: dsv3_config[k] for k in ("add_bos_token", "add_eos_token", "bos_token", "eos_token",
                                          "pad_token", "clean_up_tokenization_spaces", "legacy",
                                          "unk_token", "tokenizer_class", "chat_template")}
    config["model_max_length"] = 16384
    with open(out_dir / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return tok


def encode_case(tok: Tokenizer, text: str | None) -> list[int]:
    """BOS + the text's ids. The DeepSeek-V3 tokenizer.json adds no BOS itself (its post-processor is
    ByteLevel); transformers 4.x adds one (LlamaTokenizerFast, add_bos_token=true), 5.x does not, and
    the converted GGUF says add_bos_token=false (see NOTES.md). The fixtures give explicit ids."""
    ids = [tok.token_to_id(BOS)]
    if text is not None:
        ids += tok.encode(text, add_special_tokens=False).ids
    return ids


# ---------------------------------------------------------------------------------------------
# models

def init_weights(model: torch.nn.Module, cfg: dict, seed: int) -> dict:
    """Overwrites every parameter and persistent buffer with seeded values (numpy PCG64, in sorted
    name order, independent of transformers' own init). Scales keep activations O(1): linear
    weights N(0, 1/fan_in), embeddings N(0, 1), RMSNorm weights U(0.5, 1.5), lm_head N(0, 4/H) so
    greedy picks have clear margins, router score-correction bias U(0.05, 0.35) (non-zero,
    positive: see NOTES.md on masking). Returns a summary for reference.json."""
    rng = np.random.default_rng(seed)
    hidden = cfg["hidden_size"]
    state = model.state_dict()
    summary = {}
    for name in sorted(state):
        t = state[name]
        shape = tuple(t.shape)
        if name.endswith("e_score_correction_bias"):
            values = rng.uniform(0.05, 0.35, size=shape)
            rule = "U(0.05,0.35)"
        elif name.endswith(("layernorm.weight", "norm.weight")):
            values = rng.uniform(0.5, 1.5, size=shape)
            rule = "U(0.5,1.5)"
        elif name.endswith("embed_tokens.weight"):
            values = rng.standard_normal(size=shape)
            rule = "N(0,1)"
        elif name == "lm_head.weight":
            values = rng.standard_normal(size=shape) * (2.0 / math.sqrt(hidden))
            rule = "N(0,4/H)"
        elif t.dim() >= 2:
            fan_in = shape[-1]  # [out, in] or [experts, out, in]
            values = rng.standard_normal(size=shape) / math.sqrt(fan_in)
            rule = "N(0,1/fan_in)"
        else:
            raise SystemExit(f"init_weights: no rule for {name} {shape}")
        with torch.no_grad():
            t.copy_(torch.from_numpy(values.astype(np.float32)))
        summary[name] = rule
    return summary


def build_model(name: str, spec: dict, seed: int) -> tuple[torch.nn.Module, dict]:
    config_cls = getattr(transformers, spec["config_cls"])
    model_cls = getattr(transformers, spec["cls"])
    config = config_cls(**spec["config"], **spec["extra_config"])
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    init_summary = init_weights(model, spec["config"], seed)
    return model, init_summary


def routing_hooks(model: torch.nn.Module, records: dict):
    """Records router logits and the experts/weights each MoE layer picks (hooks on the routers)."""
    handles = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is None:
            continue

        def hook(_module, _inputs, output, layer_index=i):
            # transformers 5.x routers return (router_logits, topk_weights, topk_indices); top-k is
            # unsorted, so store sorted by expert id
            router_logits, weights, indices = output
            order = torch.argsort(indices, dim=-1)
            records[layer_index] = (router_logits.to(torch.float32).numpy(),
                                    torch.gather(indices, -1, order).numpy(),
                                    torch.gather(weights, -1, order).to(torch.float32).numpy())

        handles.append(gate.register_forward_hook(hook))
    return handles


def select_experts(router_logits: np.ndarray, cfg: dict, bias: np.ndarray | None) -> np.ndarray:
    """Independent numpy restatement of the routers' expert choice (sorted ids per token), used to
    check the recorded choice and to measure how often the score-correction bias matters."""
    logits = router_logits.astype(np.float64)
    k = cfg["num_experts_per_tok"]
    if cfg.get("scoring_func") == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-logits))
        choice = scores + (bias if bias is not None else 0.0)
        n_tok, n_exp = choice.shape
        groups = choice.reshape(n_tok, cfg["n_group"], n_exp // cfg["n_group"])
        group_score = np.sort(groups, axis=-1)[..., -2:].sum(-1)
        keep = np.argsort(-group_score, axis=-1)[:, :cfg["topk_group"]]
        mask = np.full_like(group_score, -np.inf)
        np.put_along_axis(mask, keep, 0.0, axis=-1)
        choice = (groups + mask[..., None]).reshape(n_tok, n_exp)
    else:
        choice = logits  # softmax is monotonic: greedy top-k of probabilities = top-k of logits
    return np.sort(np.argsort(-choice, axis=-1)[:, :k], axis=-1)


@torch.no_grad()
def forward_logits(model, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Logits [T, vocab] and hidden states [n_layer + 2, T, hidden]: token embeddings, the residual
    stream after each decoder layer, and the final RMSNorm output (what lm_head multiplies)."""
    captured = []
    mods = [model.model.embed_tokens, *model.model.layers, model.model.norm]
    handles = [m.register_forward_hook(
        lambda _m, _i, o: captured.append((o[0] if isinstance(o, tuple) else o)[0].to(torch.float32).numpy()))
        for m in mods]
    try:
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    if len(captured) != len(mods):
        raise SystemExit(f"forward_logits: captured {len(captured)} hidden states, expected {len(mods)}")
    return out.logits[0].to(torch.float32).numpy(), np.stack(captured)


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], np.ndarray, list[float]]:
    """Manual greedy loop: full forward over the whole sequence each step (no KV cache), argmax of
    the last position. Returns new ids, their step logits [n, vocab], and top1-top2 margins."""
    seq = list(ids)
    step_logits, margins = [], []
    for _ in range(n):
        last = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].to(torch.float32)
        top2 = torch.topk(last, 2)
        nxt = int(top2.indices[0])
        margins.append(float(top2.values[0] - top2.values[1]))
        step_logits.append(last.numpy())
        seq.append(nxt)
    return seq[len(ids):], np.stack(step_logits), margins


def write_f32(path: Path, array: np.ndarray) -> dict:
    a = np.ascontiguousarray(array, dtype="<f4")
    path.write_bytes(a.tobytes())
    return {"file": path.name, "shape": list(a.shape), "dtype": "f32", "sha256": sha256(path)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------
# GGUF

def convert(llama_cpp: Path, dsv3_dir: Path, hf_dir: Path, out_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(llama_cpp / "gguf-py"), str(llama_cpp)])
    env["NO_LOCAL_GGUF"] = "1"  # we put the vendored gguf-py on PYTHONPATH ourselves
    cmd = [sys.executable, str(HERE / "convert_gguf.py"), str(llama_cpp), str(dsv3_dir / "tokenizer.json"),
           "--", str(hf_dir), "--outtype", "f32", "--outfile", str(out_path)]
    result = subprocess.run(cmd, env=env, capture_output=True, check=False, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"convert_hf_to_gguf.py failed for {hf_dir} (exit {result.returncode})")
    (hf_dir / "convert.log").write_text(result.stdout + result.stderr)


def dump_gguf(llama_cpp: Path, gguf_path: Path) -> str:
    """Markdown listing of keys and tensors, read with the vendored gguf-py (an outside reader)."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    try:
        import gguf
    finally:
        sys.path.remove(str(llama_cpp / "gguf-py"))

    reader = gguf.GGUFReader(str(gguf_path))
    lines = [f"# {gguf_path.parent.name}/{gguf_path.name}", "",
             (f"Written by convert_hf_to_gguf.py --outtype f32 (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} "
              "sdist, vendored llama.cpp), listed with its gguf-py. Generated by make_fixtures.py."), "",
             "## Keys", "", "| key | type | value |", "| --- | --- | --- |"]
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            ftype = f"ARRAY[{field.types[-1].name}]"
            shown = (json.dumps(value, ensure_ascii=False) if len(value) <= 8 else
                     f"{len(value)} items, first 4: {json.dumps(value[:4], ensure_ascii=False)}")
        else:
            ftype = field.types[0].name
            shown = json.dumps(value, ensure_ascii=False)
            if field.types[0] == gguf.GGUFValueType.FLOAT32:
                shown = f"{value!r} (float32 of {float(np.float32(value)):.7g})"
            if len(shown) > 120:
                shown = shown[:100] + f"... ({len(value)} chars)"
        shown = shown.replace("|", "\\|").replace("\n", "\\n")
        lines.append(f"| {field.name} | {ftype} | {shown} |")
    lines += ["", "## Tensors", "", "ne in GGUF order: ne[0] is the contiguous row length.", "",
              "| name | type | ne |", "| --- | --- | --- |"]
    for t in reader.tensors:
        lines.append(f"| {t.name} | {t.tensor_type.name} | {[int(x) for x in t.shape]} |")
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def make_model_fixture(name: str, spec: dict, tok: Tokenizer, tok_dir: Path, work: Path, out_root: Path,
                       llama_cpp: Path, dsv3_dir: Path) -> None:
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = {**spec["config"], **spec["extra_config"]}
    seed = SEED + sum(map(ord, name))

    model, init_summary = build_model(name, spec, seed)
    hf_dir = work / name
    if hf_dir.exists():
        shutil.rmtree(hf_dir)
    model.save_pretrained(hf_dir)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, hf_dir / f)
    del model

    gguf_path = out / "model-f32.gguf"
    convert(llama_cpp, dsv3_dir, hf_dir, gguf_path)
    (out / "gguf-dump.md").write_text(dump_gguf(llama_cpp, gguf_path), encoding="utf-8")

    # The reference runs on the checkpoint as saved (what the converter read), not on the in-memory
    # model, so a save/load asymmetry would show up here.
    model_cls = getattr(transformers, spec["cls"])
    model = model_cls.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    biases = {}
    for n, buf in model.named_buffers():
        if n.endswith("e_score_correction_bias"):
            if not torch.any(buf != 0):
                raise SystemExit(f"{name}: {n} is zero after reload: the bias did not survive save/load")
            biases[int(n.split(".")[2])] = buf.to(torch.float64).numpy()

    index = {
        "model": name,
        "hf_class": spec["cls"],
        "hf_config": cfg,
        "gguf": {"file": gguf_path.name, "sha256": sha256(gguf_path), "bytes": gguf_path.stat().st_size},
        "seed": seed,
        "init": sorted(set(init_summary.values())),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION},
        "layout": ("*.f32: raw little-endian float32, row-major, shapes given. logits[t] = next-token "
                   "logits after position t (all positions). hidden[0] = token embeddings, hidden[l] "
                   "(1 <= l <= n_layer) = residual stream after decoder layer l-1, hidden[n_layer+1] = "
                   "final RMSNorm output (input of lm_head). gen_logits[i] = logits that chose greedy "
                   "token i. routing[layer].experts[t] = chosen expert ids of token t (sorted), "
                   "weights[t] = their final weights (after normalisation and routed scaling), same "
                   "order."),
        "cases": {},
    }
    for case, text in CASES.items():
        ids = encode_case(tok, text)
        records: dict = {}
        handles = routing_hooks(model, records)
        try:
            logits, hidden = forward_logits(model, ids)
        finally:
            for h in handles:
                h.remove()
        new_ids, step_logits, margins = greedy(model, ids, N_GENERATE)
        # model.generate (KV cache, greedy) must agree with the manual loop: a check on the
        # reference itself.
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N_GENERATE,
                                 min_new_tokens=N_GENERATE, eos_token_id=None, pad_token_id=None)
        gen_ids = gen[0, len(ids):].tolist()
        if gen_ids != new_ids:
            raise SystemExit(f"{name}/{case}: model.generate {gen_ids} != manual greedy {new_ids}")

        routing, stats = {}, {}
        for layer, (router_logits, experts, weights) in sorted(records.items()):
            mine = select_experts(router_logits, cfg, biases.get(layer))
            if not np.array_equal(mine, experts):
                raise SystemExit(f"{name}/{case}: layer {layer} routing differs from the numpy restatement")
            routing[str(layer)] = {"experts": experts.tolist(), "weights": weights.tolist()}
            stats[str(layer)] = {"distinct_expert_sets": len({tuple(r) for r in experts.tolist()})}
            if layer in biases:
                unbiased = select_experts(router_logits, cfg, None)
                stats[str(layer)]["tokens_where_bias_changes_choice"] = int(
                    np.sum(np.any(unbiased != experts, axis=-1)))

        entry = {
            "text": text,
            "token_ids": ids,
            "logits": write_f32(out / f"logits_{case}.f32", logits),
        }
        if case in HIDDEN_CASES:
            entry["hidden"] = write_f32(out / f"hidden_{case}.f32", hidden)
        entry["greedy"] = {
            "method": "manual loop, full recompute per step (no KV cache), argmax of the last position; "
                      "EOS is not a stop; model.generate(do_sample=False) with KV cache gives the same ids",
            "new_token_ids": new_ids,
            "text": tok.decode(new_ids, skip_special_tokens=False),
            "contains_eos": tok.token_to_id(EOS) in new_ids,
            "step_logits": write_f32(out / f"gen_logits_{case}.f32", step_logits),
            "top1_top2_margin_min": round(min(margins), 6),
            "top1_top2_margins": [round(m, 6) for m in margins],
        }
        entry["routing"] = routing
        entry["routing_stats"] = stats
        index["cases"][case] = entry
        print(f"{name}/{case}: {len(ids)} tokens, greedy margin min {min(margins):.4f}, "
              f"logits std {logits.std():.3f}, routing {stats}")
    with open(out / "reference.json", "w", encoding="utf-8") as f:
        json.dump(index, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dsv3-tokenizer", type=Path, default=DEFAULT_DSV3_TOKENIZER,
                    help="dir with the real DeepSeek-V3 tokenizer.json/tokenizer_config.json")
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP,
                    help="vendor/llama.cpp of the unpacked llama-cpp-python sdist (setup.sh)")
    ap.add_argument("--keep-work", type=Path, default=None,
                    help="keep the HF checkpoints here instead of a temporary dir")
    args = ap.parse_args()

    if not (args.llama_cpp / "convert_hf_to_gguf.py").is_file():
        raise SystemExit(f"converter not found under {args.llama_cpp}: run tools/reference/setup.sh")
    if not (args.dsv3_tokenizer / "tokenizer.json").is_file():
        raise SystemExit(f"DeepSeek-V3 tokenizer not found in {args.dsv3_tokenizer}")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    args.out.mkdir(parents=True, exist_ok=True)
    tok_dir = args.out / "tokenizer"
    tok = build_tokenizer(args.dsv3_tokenizer, tok_dir)

    with tempfile.TemporaryDirectory(prefix="mla-reference-") as tmp:
        work = args.keep_work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name, spec in MODELS.items():
            make_model_fixture(name, spec, tok, tok_dir, work, args.out, args.llama_cpp, args.dsv3_tokenizer)

    # Self-check: the GGUF alone, read as NOTES.md describes (gguf_forward.py), must reproduce the
    # transformers logits on both MLA paths.
    import gguf_forward
    for name in MODELS:
        diffs = gguf_forward.check(args.out / name, args.llama_cpp)
        print(f"{name}: numpy forward from the GGUF vs transformers, max |diff| {max(diffs.values()):.2e}")
        if max(diffs.values()) > 1e-3:
            raise SystemExit(f"{name}: GGUF forward disagrees with transformers: {diffs}")


if __name__ == "__main__":
    main()
