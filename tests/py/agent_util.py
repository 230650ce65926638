"""Helpers for the tool-call / reasoning / Anthropic API tests: a `mla serve` whose outputs are
scripted (--scripted-output: the model's forward pass replaced, everything above it real) with a
real chat template, and the outputs a model would write for a given assistant message, rendered
by jinja2 through that template."""
from __future__ import annotations

import json
from pathlib import Path

from server_util import REPO, Server
from test_chat_templates import reference_env

TEMPLATES = REPO / "tests" / "fixtures" / "chat-templates"
# The vocabulary the scripted outputs are tokenized with: the embedded tiny model's.
VOCAB_MODEL = REPO / "models" / "tiny-q8_0.gguf"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}}}},
]


def scripted_server(tmp_dir: Path, template: str, script: list[dict], *extra: str) -> Server:
    """script: [{"trigger": text in the prompt, "output": what the model writes}]."""
    path = Path(tmp_dir) / f"script-{abs(hash(json.dumps(script)))}.json"
    path.write_text(json.dumps(script, ensure_ascii=False), encoding="utf-8")
    return Server(VOCAB_MODEL, "--chat-template", str(TEMPLATES / template),
                  "--scripted-output", str(path), *extra)


# What the model writes after the generation prompt, at the end of its turn (the engine stops at
# EOS before these).
_TURN_ENDS = ["<｜end▁of▁sentence｜>", "<|im_end|>", "<|user|>", "<|observation|>"]


def rendered_reply(template: str, user: str, assistant: dict, tools=None, **kwargs) -> str:
    """The text of `assistant` as the template writes it after the generation prompt (jinja2,
    configured as transformers does)."""
    t = reference_env().from_string((TEMPLATES / template).read_text(encoding="utf-8"))
    ctx = dict(bos_token="", eos_token="", tools=tools, **kwargs)
    prompt = t.render(messages=[{"role": "user", "content": user}], add_generation_prompt=True, **ctx)
    full = t.render(messages=[{"role": "user", "content": user}, assistant],
                    add_generation_prompt=False, **ctx)
    assert full.startswith(prompt), (prompt, full)
    reply = full[len(prompt):].rstrip()
    for end in _TURN_ENDS:
        if reply.endswith(end):
            reply = reply[: -len(end)].rstrip()
    return reply
