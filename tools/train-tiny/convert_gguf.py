"""Runs llama.cpp's convert_hf_to_gguf.py, telling it the tokenizer's pre-tokenizer is "gpt-2".

    .venv/bin/python convert_gguf.py LLAMA_CPP_DIR -- <convert_hf_to_gguf.py arguments>

Why: the converter chooses `tokenizer.ggml.pre` by hashing the token ids the model's tokenizer
gives for a fixed test string and looking the hash up in a table of known models; an unknown hash
raises NotImplementedError. The hash depends on the whole vocabulary, so no newly trained vocabulary
can match, however standard its pre-tokenizer. This wrapper replaces that lookup for one case only:
when the model's tokenizer.json has no normalizer and exactly GPT-2's pre-tokenizer (ByteLevel,
add_prefix_space false, trim_offsets true, use_regex true — the GPT-2 regex), it answers "gpt-2",
the name the converter's own table gives GPT-2. Any other tokenizer goes to the unmodified lookup.
Nothing else in the converter is changed.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def has_gpt2_pretokenization(tokenizer_json: Path) -> bool:
    if not tokenizer_json.is_file():
        return False
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    return data.get("normalizer") is None and data.get("pre_tokenizer") == GPT2_PRE_TOKENIZER


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        sys.exit("usage: convert_gguf.py LLAMA_CPP_DIR -- <converter args>")
    llama_cpp_dir = Path(sys.argv[1]).resolve()
    converter_args = sys.argv[3:]
    sys.path.insert(0, str(llama_cpp_dir / "gguf-py"))
    sys.path.insert(0, str(llama_cpp_dir))
    from conversion import base

    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        if has_gpt2_pretokenization(Path(self.dir_model) / "tokenizer.json"):
            base.logger.info("convert_gguf.py: no normalizer, GPT-2 ByteLevel pre-tokenizer -> 'gpt-2'")
            return "gpt-2"
        return original(self, tokenizer)

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    script = llama_cpp_dir / "convert_hf_to_gguf.py"
    sys.argv = [str(script), *converter_args]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
