#!/usr/bin/env python3
"""Renders chat conversations as vLLM renders them for DeepSeek-V4 and writes the prompts as the
fixture tests/py/test_deepseek_v4_template.py compares models/templates/deepseek-v4.jinja to.

    tools/vllm-ref/setup.sh                      # once: the venv with PyPI vllm (pinned there)
    ~/.cache/mla/vllm-ref/venv/bin/python tools/vllm-ref/gen_dsv4_prompts.py

The code that runs is vLLM's own: tokenizers/deepseek_v4.py (its apply_chat_template: the
thinking / reasoning_effort / drop_thinking switches, request tools put on the system message)
over tokenizers/deepseek_v4_encoding.py (vLLM's copy of DeepSeek's encoding_dsv4.py). Only the
tokenizer underneath is a stand-in, since the prompt is asked for as text (tokenize=False).

Each conversation is given as mla's server passes it to a template (assistant tool-call
arguments as objects, the reasoning as reasoning_content); each case is a conversation, the
chat_template_kwargs and vLLM's prompt. vLLM is given the same messages with
the reasoning under "reasoning", the name its chat parser gives it.
"""
import copy
import importlib.metadata
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_stubs

vllm_stubs.install()

from vllm.tokenizers.deepseek_v4 import get_deepseek_v4_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "fixtures", "chat", "deepseek-v4-prompts.json")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — any language",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}, "exact": {"type": "boolean"}}}}},
]

CALLS = [
    {"id": "call_a", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}}},
    {"id": "call_b", "type": "function",
     "function": {"name": "search", "arguments": {"query": "mla \"cache\"\nline 2", "filters": {"year": 2024,
                                                  "tags": ["a", "b"]}, "exact": True}}},
]
USER = {"role": "user", "content": "What is the weather in Zürich?"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

CONVERSATIONS = {
    "single_user": [USER],
    "system_user": [SYSTEM, USER],
    "multi_turn_with_reasoning": [
        SYSTEM, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?", "reasoning_content": "Greet back."},
        {"role": "user", "content": "2 + 2?"}],
    "reasoning_after_last_user": [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Add them."}],
    "tools_no_system": ("tools", [USER]),
    "tools_with_system": ("tools", [SYSTEM, USER]),
    "tool_round_trip": ("tools", [
        SYSTEM, USER,
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "Need weather and news.",
         "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_b", "content": "Top result: mla.cpp"},
        {"role": "tool", "tool_call_id": "call_a", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 °C, and mla.cpp is the top result.", "reasoning_content": "Done."},
        {"role": "user", "content": "Thanks. Again tomorrow?"}]),
    "tool_results_then_user_text": ("tools", [
        USER,
        {"role": "assistant", "content": "", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "part 1"},
                                                               {"type": "text", "text": "part 2"}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "user", "content": "Summarize."}]),
    "pending_tool_results": ("tools", [
        USER,
        {"role": "assistant", "content": "", "reasoning_content": "Call it.", "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "call_a", "content": "rain"}]),
    "developer_before_last_user": [
        {"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Bonjour", "reasoning_content": "French."},
        {"role": "user", "content": "Bye"}],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]},
        {"role": "user", "content": [{"type": "text", "text": "First."}, {"type": "text", "text": "Second."}]}],
    "consecutive_users": [{"role": "user", "content": "One"}, {"role": "user", "content": "Two"}],
    "ends_with_system": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                         {"role": "system", "content": "Now be terse."}],
    "unicode": [{"role": "user", "content": "日本語で答えて 🙂 <think> tags & \"quotes\""}],
}

KWARGS = [
    {},
    {"thinking": False},
    {"thinking": True, "reasoning_effort": "max"},
    {"enable_thinking": True, "reasoning_effort": "low"},
    {"reasoning_effort": "none"},
    {"reasoning_effort": "medium"},
    {"thinking": True, "drop_thinking": False},
]


def vllm_messages(messages):
    out = copy.deepcopy(messages)
    for m in out:
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
    return out


class StandInTokenizer:
    """All vLLM's DeepSeek-V4 tokenizer wrapper asks of the tokenizer under it when tokenize=False."""

    def get_added_vocab(self):
        return {}


def main():
    tok = get_deepseek_v4_tokenizer(StandInTokenizer())
    conversations, cases = {}, []
    for name, conv in CONVERSATIONS.items():
        tools, messages = (TOOLS, conv[1]) if isinstance(conv, tuple) else (None, conv)
        conversations[name] = {"messages": messages, "tools": tools}
        for kwargs in KWARGS:
            prompt = tok.apply_chat_template(vllm_messages(messages), tools=tools, tokenize=False, **kwargs)
            cases.append({"conversation": name, "chat_template_kwargs": kwargs, "prompt": prompt})
    doc = {"source": f"vLLM {importlib.metadata.version('vllm')} (PyPI): tokenizers/deepseek_v4.py "
                     "apply_chat_template(tokenize=False), by tools/vllm-ref/gen_dsv4_prompts.py",
           "conversations": conversations, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} prompts written to {os.path.relpath(OUT, REPO)}")


if __name__ == "__main__":
    main()
