"""Runs llama.cpp's convert_hf_to_gguf.py with one documented adjustment.

Usage (make_fixtures.py calls it; the llama.cpp dir comes from setup.sh):
  .venv/bin/python convert_gguf.py LLAMA_CPP_DIR REFERENCE_TOKENIZER_JSON -- <convert_hf_to_gguf.py args>

Why the adjustment: the converter picks `tokenizer.ggml.pre` by hashing the token ids that the
model's tokenizer produces for a fixed test string, and raises NotImplementedError for a hash it
does not list. The hash depends on the whole vocabulary, so the fixtures' small BPE vocabulary can
never match it, even though its pre-tokenizer is the DeepSeek-V3 one. Before the hash lookup we
compare the fixture tokenizer.json's normalizer + pre_tokenizer with those of the real DeepSeek-V3
tokenizer.json (REFERENCE_TOKENIZER_JSON) and, only if they are identical, answer "deepseek-v3"
(the name the unmodified converter gives the real DeepSeek-V3 tokenizer under transformers 4.57.6).
Anything else goes to the converter's own lookup unchanged.

Second adjustment, for DeepSeek-V3.2 only: DeepseekV32Model.set_vocab asserts that the
transformers tokenizer has add_bos_token set. transformers 5.x drops add_bos_token/add_eos_token from
tokenizer_config.json whenever a tokenizer.json exists (tokenization_utils_base.from_pretrained), so
under 5.24 that assertion fails for every tokenizer.json model, the real DeepSeek-V3.2 included (the
converter pins transformers 4.57.6). The replacement checks the same fact in tokenizer_config.json
itself and then runs the converter's own _set_vocab_gpt2, as the original does after its assertion.
Nothing else is patched.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path


def _pretokenization_config(tokenizer_json: Path) -> dict:
    with open(tokenizer_json, encoding="utf-8") as f:
        data = json.load(f)
    return {"normalizer": data.get("normalizer"), "pre_tokenizer": data.get("pre_tokenizer")}


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[3] != "--":
        sys.exit("usage: convert_gguf.py LLAMA_CPP_DIR REFERENCE_TOKENIZER_JSON -- <converter args>")
    llama_cpp_dir = Path(sys.argv[1]).resolve()
    reference_tokenizer_json = Path(sys.argv[2])
    converter_args = sys.argv[4:]

    sys.path.insert(0, str(llama_cpp_dir / "gguf-py"))
    sys.path.insert(0, str(llama_cpp_dir))
    from conversion import base

    deepseek_v3_config = _pretokenization_config(reference_tokenizer_json)
    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        fixture_json = Path(self.dir_model) / "tokenizer.json"
        if fixture_json.is_file() and _pretokenization_config(fixture_json) == deepseek_v3_config:
            base.logger.info("convert_gguf.py: normalizer/pre_tokenizer identical to DeepSeek-V3 -> 'deepseek-v3'")
            return "deepseek-v3"
        return original(self, tokenizer)

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre

    from conversion import deepseek

    def set_vocab_v32(self) -> None:
        with open(Path(self.dir_model) / "tokenizer_config.json", encoding="utf-8") as f:
            if not json.load(f).get("add_bos_token", False):
                raise AssertionError("Change value of add_bos_token to true in tokenizer_config.json file.")
        self._set_vocab_gpt2()

    deepseek.DeepseekV32Model.set_vocab = set_vocab_v32

    script = llama_cpp_dir / "convert_hf_to_gguf.py"
    sys.argv = [str(script), *converter_args]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
