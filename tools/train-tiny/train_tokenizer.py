"""Trains the byte-level BPE vocabulary of the tiny model on data/train.txt.

    tools/train-tiny/.venv/bin/python tools/train-tiny/train_tokenizer.py

Pre-tokenization is exactly GPT-2's (tokenizers' ByteLevel pre-tokenizer with the GPT-2 regex,
no prefix space, no normalizer), so the GGUF gets tokenizer.ggml.pre = "gpt-2" (see
convert_gguf.py for how the converter is told). Special tokens: ids 0..4 = <|bos|> <|end|>
<|user|> <|assistant|> <|system|>. BOS is added by the post-processor (and add_bos_token=true in
tokenizer_config.json); END is the end-of-text / end-of-turn token (EOS).
Writes data/tokenizer/{tokenizer.json,tokenizer_config.json}. Deterministic for a given corpus.
"""

from __future__ import annotations

import json

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from common import BOS, BOS_ID, CHAT_TEMPLATE, CONTEXT, DATA, END, SPECIALS, VOCAB_SIZE

# GPT-2's tokenizer.json has exactly this pre-tokenizer and no normalizer.
GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def main() -> None:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIALS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(DATA / "train.txt")], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B:1", special_tokens=[(BOS, BOS_ID)])
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"train_tokenizer: {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    for i, t in enumerate(SPECIALS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    saved = json.loads(tok.to_str())
    assert saved["normalizer"] is None and saved["pre_tokenizer"] == GPT2_PRE_TOKENIZER, saved["pre_tokenizer"]

    out = DATA / "tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "add_eos_token": False,
        "bos_token": BOS, "eos_token": END, "pad_token": END, "unk_token": None,
        "clean_up_tokenization_spaces": False, "model_max_length": CONTEXT,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    sample = "The json module can serialize Python objects."
    print(f"vocab {tok.get_vocab_size()}; {sample!r} -> {tok.encode(sample).tokens}")


if __name__ == "__main__":
    main()
