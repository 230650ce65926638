"""Tool calls and reasoning content through the official `openai` client, for each tool-call
format, with real chat templates: the model's output is scripted (mla serve --scripted-output)
as the template itself writes an assistant turn with tool calls (rendered by jinja2), so the
test is a round trip: calls → template text → mla's parser → the same calls, whole and
streamed. (deepseek_v3's fenced format has no template here; the vLLM fixtures cover it.) With
tool_choice "required" / a named function the output is constrained by a grammar in the same
syntax: the template's own calls pass it unchanged (a grammar that refused any of their tokens
would turn the scripted output into something else)."""
import json
import pathlib

import openai
import pytest
import requests
from agent_util import TOOLS, rendered_reply, scripted_server

from server_util import MODEL_NAME

CALLS = [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},
    {"id": "call_2", "type": "function",
     "function": {"name": "search", "arguments": {"query": "mla \"cache\"\nlines", "filters": {"year": 2024}}}},
]
USER = "What is the weather in Paris?"
# Prompts whose scripted replies are calls only (tool_choice required / named allow no text).
USER_CALLS = "Call both tools."
USER_SEARCH = "Call search."

# template, template kwargs, whether the template writes the reasoning back.
FORMATS = {
    "glm45": ("GLM-5.2.jinja", {}, True),
    "deepseek_v31": ("deepseek-ai-DeepSeek-V3.1.jinja", {"thinking": True}, False),
    "deepseek_v32": ("deepseek-ai-DeepSeek-V3.2.jinja", {"thinking": True}, True),
    # mla's own (DeepSeek ships V4's format as Python only); V4 thinks unless told not to.
    "deepseek_v4": (str(pathlib.Path(__file__).resolve().parents[2] / "models" / "templates" / "deepseek-v4.jinja"),
                    {}, True),
    "kimi_k2": ("moonshotai-Kimi-K2.jinja", {}, False),
    "hermes": ("Qwen-Qwen3-0.6B.jinja", {}, True),
}


def client_for(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module", params=sorted(FORMATS))
def fmt(request, tmp_path_factory):
    template, kwargs, writes_reasoning = FORMATS[request.param]
    assistant = {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the weather.",
                 "tool_calls": CALLS}
    reply = rendered_reply(template, USER, assistant, tools=TOOLS, **kwargs)
    calls_only = rendered_reply(template, USER_CALLS, dict(assistant, content=""), tools=TOOLS, **kwargs)
    search_only = rendered_reply(template, USER_SEARCH, dict(assistant, content="", tool_calls=CALLS[1:]),
                                 tools=TOOLS, **kwargs)
    script = [{"trigger": USER_CALLS, "output": calls_only}, {"trigger": USER_SEARCH, "output": search_only},
              {"trigger": "", "output": reply}]
    server = scripted_server(tmp_path_factory.mktemp("tools"), template, script)
    yield request.param, server, kwargs, writes_reasoning, reply
    assert server.stop() == 0, server.log


def ask(client, kwargs, user=USER, max_tokens=400, **extra):
    return client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": user}], tools=TOOLS, temperature=0,
        max_tokens=max_tokens, extra_body={"chat_template_kwargs": kwargs} if kwargs else None, **extra)


def collect_stream(chunks):
    """A streamed chat completion put together: content, reasoning, calls, finish reasons. Checks
    the OpenAI delta shape of each call piece on the way."""
    content, reasoning, calls, finish = "", "", {}, []
    for c in chunks:
        if not c.choices:
            continue
        d = c.choices[0].delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:  # the first piece of a call: id and name
                assert tc.id and tc.function.name and tc.type == "function"
                calls[tc.index] = {"name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and not tc.function.name
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        if c.choices[0].finish_reason:
            finish.append(c.choices[0].finish_reason)
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


def test_round_trip_whole(fmt):
    _name, server, kwargs, writes_reasoning, reply = fmt
    assert "Checking." in reply
    r = ask(client_for(server), kwargs)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", server.log
    msg = choice.message
    assert [c.function.name for c in msg.tool_calls] == ["get_weather", "search"]
    assert [json.loads(c.function.arguments) for c in msg.tool_calls] == \
        [c["function"]["arguments"] for c in CALLS]
    assert all(c.type == "function" and c.id for c in msg.tool_calls)
    assert len({c.id for c in msg.tool_calls}) == 2
    assert msg.content.strip() == "Checking."
    reasoning = getattr(msg, "reasoning_content", None)
    assert reasoning == getattr(msg, "reasoning", None)
    if writes_reasoning:
        assert reasoning.strip() == "Need the weather."
    else:
        assert not reasoning


def test_round_trip_streamed(fmt):
    _name, server, kwargs, writes_reasoning, _reply = fmt
    content, reasoning, calls, finish = collect_stream(ask(client_for(server), kwargs, stream=True))
    assert finish == ["tool_calls"]
    assert [c["name"] for c in calls] == ["get_weather", "search"]
    assert [json.loads(c["arguments"]) for c in calls] == [c["function"]["arguments"] for c in CALLS]
    assert content.strip() == "Checking."
    assert reasoning.strip() == ("Need the weather." if writes_reasoning else "")


def test_tool_choice_none_leaves_the_text(fmt):
    _name, server, kwargs, _, _reply = fmt
    r = ask(client_for(server), kwargs, tool_choice="none")
    assert r.choices[0].finish_reason == "stop"
    assert not r.choices[0].message.tool_calls
    # The markers stay in the content (reasoning is still split where the parser has it).
    assert "get_weather" in r.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required_passes_the_templates_calls(fmt, stream):
    """finish_reason "tool_calls" for required, as vLLM and OpenAI; the reasoning (free text up to
    </think> under the grammar) still split out."""
    _name, server, kwargs, writes_reasoning, _ = fmt
    r = ask(client_for(server), kwargs, user=USER_CALLS, tool_choice="required", stream=stream)
    if stream:
        content, reasoning, calls, finish = collect_stream(r)
    else:
        msg = r.choices[0].message
        content, reasoning, finish = msg.content, getattr(msg, "reasoning_content", None), [r.choices[0].finish_reason]
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls or []]
    assert finish == ["tool_calls"], server.log
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in CALLS]
    assert not (content or "").strip()
    if writes_reasoning:
        assert reasoning.strip() == "Need the weather."


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_named_passes_the_templates_call(fmt, stream):
    """finish_reason "stop" for a named function, as OpenAI and vLLM (since vllm#25054)."""
    _name, server, kwargs, _, _ = fmt
    choice = {"type": "function", "function": {"name": "search"}}
    r = ask(client_for(server), kwargs, user=USER_SEARCH, tool_choice=choice, stream=stream)
    if stream:
        _content, _reasoning, calls, finish = collect_stream(r)
    else:
        finish = [r.choices[0].finish_reason]
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in r.choices[0].message.tool_calls]
    assert finish == ["stop"], server.log
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("search", CALLS[1]["function"]["arguments"])]


def test_tool_choice_required_refuses_the_text_before_the_calls(fmt):
    """The reply to USER opens its answer with "Checking." before the calls: under "required" the
    grammar takes the calls only, so that text cannot be written (the constraint is applied)."""
    _name, server, kwargs, _, _ = fmt
    auto = ask(client_for(server), kwargs)
    assert auto.choices[0].message.content.strip() == "Checking."
    r = ask(client_for(server), kwargs, tool_choice="required")
    assert "Checking." not in (r.choices[0].message.content or ""), r.choices[0].message


def test_tool_choice_errors_are_400(fmt):
    _name, server, kwargs, _, _ = fmt
    client = client_for(server)
    with pytest.raises(openai.BadRequestError, match="needs a non-empty"):
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}],
                                       tools=[], tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        ask(client, kwargs, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]"):
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {}}])
    assert "ready" in server.log


def test_multi_turn_with_tool_results(fmt):
    """An assistant turn with tool_calls (arguments as JSON text, as clients send them) and the
    tool results render through the template and generate."""
    _name, server, kwargs, _, _ = fmt
    calls = [dict(c, function=dict(c["function"], arguments=json.dumps(c["function"]["arguments"])))
             for c in CALLS]
    messages = [{"role": "user", "content": USER},
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "no results"}]
    r = client_for(server).chat.completions.create(
        model=MODEL_NAME, messages=messages, tools=TOOLS, max_tokens=5, temperature=0,
        extra_body={"chat_template_kwargs": kwargs} if kwargs else None)
    assert r.usage.prompt_tokens > 0
    # /tokenize renders the same messages the same way.
    t = requests.post(server.url + "/tokenize", json={"messages": messages, "tools": TOOLS,
                                                      "chat_template_kwargs": kwargs})
    assert t.status_code == 200 and t.json()["count"] == r.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError, match="not a JSON object"):
        bad = [dict(calls[0], function=dict(calls[0]["function"], arguments="{oops"))]
        client_for(server).chat.completions.create(
            model=MODEL_NAME, messages=messages[:1] + [{"role": "assistant", "tool_calls": bad}],
            max_tokens=2)


def test_n_choices_each_parsed(fmt):
    _name, server, kwargs, _, _ = fmt
    r = ask(client_for(server), kwargs, n=2)
    assert [c.finish_reason for c in r.choices] == ["tool_calls", "tool_calls"]
    for c in r.choices:
        assert [json.loads(t.function.arguments) for t in c.message.tool_calls] == \
            [c["function"]["arguments"] for c in CALLS]
