"""Shared definitions of the tiny model: tokenizer layout, chat template, model config, data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"      # prepare_corpus.py output (gitignored, rebuilt from python3.11-doc)
RUNS = HERE / "runs"      # checkpoints and logs (gitignored)

VOCAB_SIZE = 4096
BOS, END, USER, ASSISTANT, SYSTEM = "<|bos|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"
SPECIALS = [BOS, END, USER, ASSISTANT, SYSTEM]  # ids 0..4, in this order
BOS_ID, END_ID = 0, 1

# The chat template stored in tokenizer_config.json (and by the converter in the GGUF). BOS is not
# part of it: tokenizer_config.json has add_bos_token=true, so tokenizing the rendered prompt with
# special tokens adds it (transformers, llama.cpp and mla.cpp alike).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

CONTEXT = 256  # training window; also max_position_embeddings (the GGUF context_length)

# DeepSeek-V3 semantics at toy size. Row lengths of every matrix a K-quant applies to are multiples
# of 256: hidden 256, q_lora 256, kv_lora 256, n_head*v_head 256, intermediate 768, moe 256.
# (attn_k_b rows are qk_nope = 32 long, as in real DeepSeek they are 128: they fall back.)
# Sized by measured CPU throughput (~350 tokens/s for training on one contended core): 3 layers
# (1 dense + 2 MoE), 4 heads, context 256.
MODEL_CONFIG = {
    "vocab_size": VOCAB_SIZE, "hidden_size": 256, "intermediate_size": 768, "moe_intermediate_size": 256,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": 256, "kv_lora_rank": 256, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 64,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 4, "topk_group": 2,
    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
    "rms_norm_eps": 1e-6, "max_position_embeddings": CONTEXT, "rope_interleave": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "num_nextn_predict_layers": 0, "bos_token_id": BOS_ID, "eos_token_id": END_ID, "pad_token_id": END_ID,
    "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "initializer_range": 0.02,
}
# Keys real DeepSeek-V3 config.json files carry that the converter reads but the transformers
# config class does not define (its router is always sigmoid + noaux_tc).
EXTRA_CONFIG = {"scoring_func": "sigmoid", "topk_method": "noaux_tc"}


def render_chat(messages: list[dict], add_generation_prompt: bool = False) -> str:
    """Python twin of CHAT_TEMPLATE (no BOS)."""
    s = "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)
    return s + ("<|assistant|>\n" if add_generation_prompt else "")


def load_tokenizer(path: Path | None = None):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path or DATA / "tokenizer" / "tokenizer.json"))


def encode_split(tok, split: str) -> np.ndarray:
    """The split's documents as one uint16 token stream, each document followed by END. Cached
    next to the text (data/{split}.ids.npy)."""
    cache = DATA / f"{split}.ids.npy"
    text_path = DATA / f"{split}.txt"
    if cache.exists() and cache.stat().st_mtime > text_path.stat().st_mtime:
        return np.load(cache)
    docs = text_path.read_text(encoding="utf-8").split("\n\n")
    ids: list[int] = []
    for enc in tok.encode_batch([d.strip() for d in docs if d.strip()], add_special_tokens=False):
        ids += enc.ids + [END_ID]
    arr = np.asarray(ids, dtype=np.uint16)
    np.save(cache, arr)
    return arr


def encode_chats(tok, split: str) -> list[np.ndarray]:
    """Each synthetic chat of the split, rendered with the template and tokenized with BOS."""
    rows = [json.loads(line) for line in (DATA / f"chat_{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = [render_chat([{"role": "user", "content": r["user"]},
                          {"role": "assistant", "content": r["assistant"]}]) for r in rows]
    return [np.asarray([BOS_ID] + e.ids, dtype=np.int64)
            for e in tok.encode_batch(texts, add_special_tokens=False)]
