"""tool_choice "required" and a named function on real forward passes, through the official
`openai` and `anthropic` clients: the embedded tiny model (whose chat template knows no tools, so
calls are written in the JSON-in-tags fallback syntax), a synthetic model served with GLM-5.2's
template (GLM's own <arg_key> syntax), and DeepSeek-V3's real vocabulary, where the tool-call
markers are CONTROL tokens. Neither model was trained to call tools: the grammar alone makes the
output a call, whose arguments must validate against the tool's schema (jsonschema)."""
import json
import subprocess

import anthropic
import jsonschema
import openai
import pytest
import requests
from agent_util import TEMPLATES, rendered_reply

from server_util import MODEL_NAME, REPO, SYNTH_CONFIG, Server, mla_bin

TINY = REPO / "models" / "tiny-q8_0.gguf"
DS3_DIR = REPO / "tests" / "fixtures" / "tokenizers" / "deepseek-v3"

# Schemas a small untrained model cannot run away in: enums, bounded numbers, short strings and
# arrays (an unbounded string or integer could fill max_tokens before it closes).
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Rome"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "days"], "additionalProperties": False}
NOTE = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 12},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
    "urgent": {"type": "boolean"}},
    "required": ["title", "urgent"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add_note", "description": "Save a note",
                                           "parameters": NOTE}}]
SCHEMAS = {"get_weather": WEATHER, "add_note": NOTE}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "add_note"}}


def run_mla(*args):
    p = subprocess.run([mla_bin(), *map(str, args)], capture_output=True, check=False, text=True)
    assert p.returncode == 0, f"mla {args} failed: {p.stderr}"


def client_for(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tiny():
    s = Server(TINY, "--max-model-len", "1024")
    yield s
    assert s.stop() == 0, s.log


def synth_with_template(path, template: str, vocab) -> Server:
    cfg = dict(SYNTH_CONFIG, vocab=str(vocab), chat_template=str(TEMPLATES / template))
    (path / "cfg.json").write_text(json.dumps(cfg))
    run_mla("gguf", "synth", "-o", path / "model.gguf", "--config", path / "cfg.json")
    return Server(path / "model.gguf", "--max-model-len", "1024")


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    s = synth_with_template(tmp_path_factory.mktemp("glm"), "GLM-5.2.jinja",
                            REPO / "tests" / "fixtures" / "vocab" / "ggml-vocab-deepseek-llm.gguf")
    yield s
    assert s.stop() == 0, s.log


def ask(server, stream=False, **extra):
    extra.setdefault("max_tokens", 300)
    return client_for(server).chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS,
                                                      temperature=0, stream=stream, **extra)


def calls_of(server, stream, **extra):
    """(calls as (name, arguments text), finish reasons, content) of one request."""
    r = ask(server, stream=stream, **extra)
    if not stream:
        m = r.choices[0].message
        return [(c.function.name, c.function.arguments) for c in m.tool_calls or []], \
            [r.choices[0].finish_reason], m.content
    calls, finish, content = {}, [], ""
    for c in r:
        if not c.choices:
            continue
        d = c.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            calls.setdefault(tc.index, [tc.function.name, ""])[1] += tc.function.arguments or ""
        if c.choices[0].finish_reason:
            finish.append(c.choices[0].finish_reason)
    return [tuple(calls[i]) for i in sorted(calls)], finish, content


def check_valid(calls):
    assert calls
    for name, args in calls:
        jsonschema.validate(json.loads(args), SCHEMAS[name])


def server_of(request, name):
    return request.getfixturevalue(name)


@pytest.mark.parametrize("model", ["tiny", "glm"])
@pytest.mark.parametrize("stream", [False, True])
def test_named_function_is_called_with_valid_arguments(request, model, stream):
    server = server_of(request, model)
    kw = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}} if model == "glm" else {}
    calls, finish, content = calls_of(server, stream, tool_choice=NAMED, **kw)
    assert [n for n, _ in calls] == ["add_note"], (calls, content, server.log[-2000:])
    check_valid(calls)
    assert finish == ["stop"]
    assert not (content or "").strip()


@pytest.mark.parametrize("model", ["tiny", "glm"])
@pytest.mark.parametrize("stream", [False, True])
def test_required_calls_one_of_the_tools_with_valid_arguments(request, model, stream):
    server = server_of(request, model)
    kw = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}} if model == "glm" else {}
    calls, finish, content = calls_of(server, stream, tool_choice="required", parallel_tool_calls=False, **kw)
    assert len(calls) == 1, (calls, content)
    check_valid(calls)
    assert finish == ["tool_calls"]


def test_streamed_and_whole_calls_agree(tiny):
    whole, _, _ = calls_of(tiny, False, tool_choice=NAMED)
    streamed, _, _ = calls_of(tiny, True, tool_choice=NAMED)
    assert [(n, json.loads(a)) for n, a in whole] == [(n, json.loads(a)) for n, a in streamed]


def test_tool_choice_none_and_auto_still_free_text(tiny):
    for choice in ["none", "auto"]:
        r = ask(tiny, tool_choice=choice, max_tokens=8, extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length"
        assert not r.choices[0].message.tool_calls
        assert r.usage.completion_tokens == 8


def test_errors_are_one_line_400s(tiny):
    def error(**extra):
        r = requests.post(tiny.url + "/v1/chat/completions",
                          json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 4} | extra)
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert "\n" not in e["message"]
        return e
    e = error(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert "'get_time'" in e["message"] and e["param"] == "tool_choice"
    assert "needs a non-empty 'tools'" in error(tools=[], tool_choice="required")["message"]
    assert "needs a non-empty 'tools'" in error(tool_choice="required")["message"]
    e = error(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})
    assert "cannot be combined" in e["message"]
    assert "parallel_tool_calls" in error(tools=TOOLS, tool_choice="required", parallel_tool_calls=1)["message"]
    # The server is still serving.
    assert ask(tiny, max_tokens=2).usage.completion_tokens >= 1


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_any_and_tool(tiny, stream):
    client = anthropic.Anthropic(base_url=tiny.url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice, names in [({"type": "tool", "name": "get_weather"}, {"get_weather"}),
                          ({"type": "any", "disable_parallel_tool_use": True}, set(SCHEMAS))]:
        args = {"model": MODEL_NAME, "max_tokens": 300, "messages": MESSAGES, "tools": tools, "tool_choice": choice}
        if stream:
            with client.messages.stream(**args) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**args)
        uses = [b for b in msg.content if b.type == "tool_use"]
        assert len(uses) == 1 and uses[0].name in names, msg
        jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])
        assert msg.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError, match="get_time"):
        client.messages.create(model=MODEL_NAME, max_tokens=8, messages=MESSAGES, tools=tools,
                               tool_choice={"type": "tool", "name": "get_time"})


def test_control_token_markers(tmp_path):
    """DeepSeek-V3's tool-call markers are CONTROL tokens in its GGUF vocabulary (as llama.cpp's
    converter types them). A scripted server on that vocabulary writes the call the V3.1 template
    renders, token for token, markers as single tokens: with tool_choice "required" the grammar
    must allow those tokens, or the scripted output could not be written."""
    vocab = tmp_path / "ds3.gguf"
    run_mla("gguf", "vocab-from-hf", DS3_DIR, "-o", vocab)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                            "arguments": {"city": "Oslo", "days": 2}}}
    reply = rendered_reply("deepseek-ai-DeepSeek-V3.1.jinja", "hi",
                           {"role": "assistant", "content": "", "tool_calls": [call]}, tools=TOOLS)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"trigger": "", "output": reply}], ensure_ascii=False), encoding="utf-8")
    s = Server(vocab, "--chat-template", str(TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja"),
               "--scripted-output", str(script))
    try:
        tok = requests.post(s.url + "/tokenize", json={"prompt": reply, "add_special_tokens": False}).json()["tokens"]
        assert 128806 in tok and 128814 in tok  # <｜tool▁calls▁begin｜>, <｜tool▁sep｜> as single tokens
        for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
            r = ask(s, tool_choice=choice)
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in r.choices[0].message.tool_calls]
            assert calls == [("get_weather", {"city": "Oslo", "days": 2})], s.log[-2000:]
            assert r.usage.completion_tokens == len(tok) + 1  # the reply's tokens and EOS
    finally:
        assert s.stop() == 0, s.log
