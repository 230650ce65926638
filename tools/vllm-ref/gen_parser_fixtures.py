#!/usr/bin/env python3
"""Runs vLLM's own tool-call and reasoning parsers on model-output strings and writes what they
return as the JSON fixtures that tests/server/parser_fixture_test.cpp compares mla's parsers to.

    tools/vllm-ref/setup.sh                      # once: the venv with PyPI vllm
    ~/.cache/mla/vllm-ref/venv/bin/python tools/vllm-ref/gen_parser_fixtures.py

Per case: the whole output parsed at once (vLLM's Parser.parse, as its chat endpoint does for a
non-streamed response) and the output fed in small pieces (Parser.parse_delta, as for a streamed
one), the deltas joined. Markers are single "tokens" of a stand-in tokenizer, other text comes
in pieces of 3 characters.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_stubs

vllm_stubs.install()

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser.parser_manager import ParserManager

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "fixtures", "parsers", "vllm_parsers.json")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}}}},
    {"type": "function", "function": {
        "name": "set_flag", "description": "Set a flag",
        "parameters": {"type": "object", "properties": {
            "on": {"type": "boolean"}, "ratio": {"type": "number"}}}}},
]

DS_CALLS_B, DS_CALLS_E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_B, DS_CALL_E, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
K_SEC_B, K_SEC_E = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CALL_B, K_CALL_E, K_ARG = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"
DSML = "｜DSML｜"

MARKERS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
    "<arg_value>", "</arg_value>", DS_CALLS_B, DS_CALLS_E, DS_CALL_B, DS_CALL_E, DS_SEP,
    K_SEC_B, K_SEC_E, K_CALL_B, K_CALL_E, K_ARG, "<|im_end|>",
]


def glm_call(name, *pairs):
    return "<tool_call>" + name + "".join(
        f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in pairs) + "</tool_call>"


def ds31_call(name, args):
    return DS_CALL_B + name + DS_SEP + args + DS_CALL_E


def ds3_call(name, args):
    return DS_CALL_B + "function" + DS_SEP + name + "\n```json\n" + args + "\n```" + DS_CALL_E


def kimi_call(name, i, args):
    return K_CALL_B + f"functions.{name}:{i}" + K_ARG + args + K_CALL_E


def dsml_call(name, *params):
    body = "".join(f'<{DSML}parameter name="{k}" string="{s}">{v}</{DSML}parameter>\n'
                   for k, v, s in params)
    return f'<{DSML}invoke name="{name}">\n{body}</{DSML}invoke>\n'


def dsml(*calls):
    return f"\n\n<{DSML}function_calls>\n" + "".join(calls) + f"</{DSML}function_calls>"


def dsml4(*calls, opener=f"<{DSML}tool_calls>"):
    """DeepSeek-V4's section as its encoder writes it (V3.2's calls inside <｜DSML｜tool_calls>)."""
    return f"\n\n{opener}\n" + "".join(calls) + f"</{DSML}tool_calls>"


V4_CALL = dsml_call("get_weather", ("city", "Paris", "true"))


TOOL_CASES = {
    "glm45": [
        "Let me check." + glm_call("get_weather", ("city", "Paris"), ("days", "3")),
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value>\n</tool_call>",
        glm_call("get_weather", ("city", "Tokyo")) + glm_call("set_flag", ("on", "true"), ("ratio", "0.5")),
        glm_call("search", ("query", 'mla "cache"'), ("filters", '{"year": 2024, "tags": ["a", "b"]}')),
        glm_call("search", ("query", "line1\nline2")),
        glm_call("get_weather", ("city", "Oslo")) + "Done.",
        "The weather is fine.",
        "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",
        glm_call("launch_rocket", ("x", "1")),
        glm_call("set_flag", ("on", "maybe"), ("ratio", "abc")),
    ],
    "deepseek_v31": [
        "Sure." + DS_CALLS_B + ds31_call("get_weather", '{"city": "Paris", "days": 3}') + DS_CALLS_E,
        DS_CALLS_B + ds31_call("get_weather", '{"city": "Tokyo"}') +
        ds31_call("search", '{"query": "x", "filters": {"a": [1, 2]}}') + DS_CALLS_E,
        "No tools needed.",
        DS_CALLS_B + DS_CALL_B + "get_weather" + DS_SEP + '{"city": "Pa',
        DS_CALLS_B + ds31_call("get_weather", '{"city": "Paris"}'),
    ],
    "deepseek_v3": [
        "Sure." + DS_CALLS_B + ds3_call("get_weather", '{"city": "Paris", "days": 3}') + DS_CALLS_E,
        DS_CALLS_B + ds3_call("get_weather", '{"city": "Tokyo"}') +
        ds3_call("set_flag", '{"on": true}') + DS_CALLS_E,
        "Plain answer.",
        DS_CALLS_B + DS_CALL_B + "function" + DS_SEP + "get_weather\n```json\n{\"city\"",
    ],
    "deepseek_v32": [
        "Let me look." + dsml(dsml_call("get_weather", ("city", "Paris", "true"), ("days", "3", "false"))),
        dsml(dsml_call("get_weather", ("city", "Tokyo", "true")),
             dsml_call("search", ("query", "q", "true"), ("filters", '{"a": [1, 2]}', "false"))),
        "Nothing to call.",
        f"\n\n<{DSML}function_calls>\n<{DSML}invoke name=\"get_weather\">\n<{DSML}parameter name=\"city\" string=\"true\">Par",
        dsml(dsml_call("get_weather", ("arguments", '{"city": "Oslo"}', "false"))),
    ],
    "deepseek_v4": [
        "Let me look." + dsml4(dsml_call("get_weather", ("city", "Paris", "true"), ("days", "3", "false"))),
        dsml4(dsml_call("get_weather", ("city", "Tokyo", "true")),
              dsml_call("search", ("query", "q", "true"), ("filters", '{"a": [1, 2]}', "false"))),
        "Nothing to call.",
        f"\n\n<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n<{DSML}parameter name=\"city\" string=\"true\">Par",
        dsml4(V4_CALL, opener=f"<{DSML}toolcalls>"),
        dsml4(V4_CALL, opener=f"<{DSML}tool>"),
        dsml4(dsml_call("get_weather", ("arguments", '{"city": "Oslo", "days": 2}', "false"))),
        dsml4(dsml_call("get_weather", ("input", '{"city": "Oslo"}', "true"))),
        dsml4(dsml_call("search", ("arguments", '{"query": "x", "other": 1}', "false"))),
        dsml4(dsml_call("launch_rocket", ("x", "1", "false"))),
        dsml4(f'<{DSML}invoke name="set_flag">\n<{DSML}parameter name="ratio">0.5</{DSML}parameter>\n</{DSML}invoke>\n'),
        dsml4(dsml_call("search", ("query", "line1\nline2 <b>", "true"))),
        "Answer: 2 < 3 and 4 > 1.",
        dsml4(V4_CALL) + "\nDone.",
        f'<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">Rome</{DSML}parameter>\n</{DSML}invoke>',
    ],
    "kimi_k2": [
        "Checking." + K_SEC_B + kimi_call("get_weather", 0, '{"city": "Paris", "days": 3}') + K_SEC_E,
        K_SEC_B + kimi_call("get_weather", 0, '{"city": "Tokyo"}') +
        kimi_call("set_flag", 1, '{"on": false, "ratio": 2.5}') + K_SEC_E,
        "Just text.",
        K_SEC_B + K_CALL_B + "functions.get_weather:0" + K_ARG + '{"city": "Pa',
    ],
    "hermes": [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
        ('I will search.\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "set_flag", "arguments": {"on": true}}\n</tool_call>'),
        "No call here.",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
        '<tool_call>\n{"name": get_weather}\n</tool_call>',
    ],
}

REASONING_TEXTS = [
    "<think>I should greet.</think>Hello!",
    "I should greet.</think>Hello!",
    "Hello!",
    "<think>Unfinished thought",
    "<think></think>Answer",
    "<think>a</think>\n\nAnswer",
    "<think>\n\nStep one. \n</think> Answer",
    "Unfinished thought \n",
]
REASONING_CASES = [
    ("deepseek_r1", {}), ("deepseek_v3", {"thinking": True}), ("deepseek_v3", {}),
    ("glm45", {}), ("glm45", {"enable_thinking": False}), ("kimi_k2", {}), ("qwen3", {}),
    ("qwen3", {"enable_thinking": False}),
    ("deepseek_v4", {}), ("deepseek_v4", {"thinking": True}), ("deepseek_v4", {"thinking": False}),
    ("deepseek_v4", {"enable_thinking": False}), ("deepseek_v4", {"reasoning_effort": "none"}),
]
COMBINED = [
    ("glm45", "glm45", {}, "<think>need the weather</think>" + glm_call("get_weather", ("city", "Paris"))),
    ("deepseek_v31", "deepseek_v3", {"thinking": True},
     "need weather</think>Let me check." + DS_CALLS_B + ds31_call("get_weather", '{"city": "Rome"}') + DS_CALLS_E),
    ("kimi_k2", "kimi_k2", {}, "<think>hmm</think>" + K_SEC_B + kimi_call("search", 0, '{"query": "q"}') + K_SEC_E),
    # A call that starts while the reasoning is still open.
    ("glm45", "glm45", {}, "need the weather" + glm_call("get_weather", ("city", "Paris"))),
    ("kimi_k2", "kimi_k2", {}, "hmm" + K_SEC_B + kimi_call("search", 0, '{"query": "q"}') + K_SEC_E),
    ("deepseek_v31", "deepseek_v3", {"thinking": True},
     "need weather" + DS_CALLS_B + ds31_call("get_weather", '{"city": "Rome"}') + DS_CALLS_E),
    ("hermes", "qwen3", {}, ("<think>plan</think>\n\nOK.\n<tool_call>\n"
     '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')),
    ("hermes", "qwen3", {}, ("plan<tool_call>\n"
     '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')),
    # Whitespace between the reasoning and a call that ends it.
    ("glm45", "glm45", {}, "need the weather \n\n" + glm_call("get_weather", ("city", "Paris"))),
    ("kimi_k2", "kimi_k2", {}, "hmm\n\n" + K_SEC_B + kimi_call("search", 0, '{"query": "q"}') + K_SEC_E),
    ("hermes", "qwen3", {}, ("plan\n\n<tool_call>\n"
     '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')),
    ("deepseek_v4", "deepseek_v4", {}, "need weather</think>Let me check." + dsml4(V4_CALL)),
    ("deepseek_v4", "deepseek_v4", {"thinking": True}, "need weather" + dsml4(V4_CALL)),
    ("deepseek_v4", "deepseek_v4", {}, "<think>plan</think>\n\n" + dsml4(V4_CALL)),
    ("deepseek_v4", "deepseek_v4", {"thinking": False}, "Sure." + dsml4(V4_CALL)),
    ("deepseek_v4", "deepseek_v4", {"reasoning_effort": "none"}, dsml4(V4_CALL)),
]


class FakeTokenizer:
    """What the parsers ask of a tokenizer: a vocabulary with the marker tokens."""

    def __init__(self):
        self._vocab = {m: 100000 + i for i, m in enumerate(MARKERS)}
        self.chat_template = ""
        self.name_or_path = "fake"

    def get_vocab(self):
        return dict(self._vocab)

    @property
    def vocab(self):
        return self._vocab

    def encode(self, text, add_special_tokens=False):
        return [tid for _, tid in pieces(text)]

    def decode(self, ids, skip_special_tokens=False):
        inv = {v: k for k, v in self._vocab.items()}
        return "".join(inv.get(i, "") for i in ids)

    def convert_tokens_to_ids(self, tok):
        return self._vocab.get(tok)

    def __len__(self):
        return 200000


def pieces(text):
    """Splits text into (piece, token id): markers whole, other text 3 characters at a time."""
    out, i, n = [], 0, 1
    while i < len(text):
        m = next((m for m in MARKERS if text.startswith(m, i)), None)
        if m:
            out.append((m, 100000 + MARKERS.index(m)))
            i += len(m)
            continue
        j = i
        while j < len(text) and j - i < 3 and not any(text.startswith(m, j) for m in MARKERS):
            j += 1
        out.append((text[i:j], n))
        n += 1
        i = j
    return out


def call_json(name, args):
    try:
        parsed = json.loads(args) if args else None
    except json.JSONDecodeError:
        parsed = None
    return {"name": name, "arguments": args, "arguments_json": parsed}


def run(tool, reasoning, kwargs, text):
    tok = FakeTokenizer()
    cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                   enable_auto_tools=tool is not None)
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                tools=TOOLS if tool else None, chat_template_kwargs=kwargs or None)
    tools = req.tools
    result = {"tool_parser": tool, "reasoning_parser": reasoning, "chat_template_kwargs": kwargs,
              "output": text}
    try:
        p = cls(tok, tools, chat_template_kwargs=kwargs)
        r, c, calls = p.parse(text, req, enable_auto_tools=tool is not None)
        result["whole"] = {"reasoning": r, "content": c,
                           "tool_calls": [call_json(t.name, t.arguments) for t in (calls or [])]}
    except Exception as e:  # the reference itself failing is recorded, not hidden  # noqa: BLE001 (a parser failure is recorded as the case result)
        result["whole"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        p = cls(tok, tools, chat_template_kwargs=kwargs)
        reasoning_s, content_s, calls_s = "", "", {}
        ps = pieces(text)
        for k, (piece, tid) in enumerate(ps):
            d = p.parse_delta(piece, [tid], req, prompt_token_ids=[1], finished=k == len(ps) - 1)
            if d is None:
                continue
            reasoning_s += d.reasoning or ""
            content_s += d.content or ""
            for tc in d.tool_calls or []:
                e = calls_s.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function is not None:
                    e["name"] += tc.function.name or ""
                    e["arguments"] += tc.function.arguments or ""
        result["streamed"] = {"reasoning": reasoning_s, "content": content_s,
                              "tool_calls": [call_json(v["name"], v["arguments"])
                                             for _, v in sorted(calls_s.items())]}
    except Exception as e:  # noqa: BLE001 (a parser failure is recorded as the case result)
        result["streamed"] = {"error": f"{type(e).__name__}: {e}"}
    return result


def main():
    cases = []
    for fmt, texts in TOOL_CASES.items():
        for t in texts:
            cases.append(run(fmt, None, {}, t))
    for parser, kwargs in REASONING_CASES:
        for t in REASONING_TEXTS:
            cases.append(run(None, parser, kwargs, t))
    for tool, reasoning, kwargs, t in COMBINED:
        cases.append(run(tool, reasoning, kwargs, t))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    import importlib.metadata
    doc = {"source": f"vLLM {importlib.metadata.version('vllm')} (PyPI), its Parser.parse and "
                     "Parser.parse_delta, by tools/vllm-ref/gen_parser_fixtures.py",
           "tools": TOOLS, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c["whole"] or "error" in c["streamed"] for c in cases)
    print(f"{len(cases)} cases written to {os.path.relpath(OUT, REPO)} ({errors} with a parser error)")


if __name__ == "__main__":
    main()
