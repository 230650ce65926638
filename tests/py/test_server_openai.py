"""`mla serve` through the official `openai` Python client, unmodified: completions and chat,
streaming and not, n = 2, stop strings, seed reproducibility, logprobs shapes, models.list."""
import math
from pathlib import Path

import openai
import pytest
import requests

from server_util import MODEL_NAME, Server, synth_model
from test_chat_templates import reference_env


@pytest.fixture(scope="module")
def server():
    s = Server(synth_model(), "--max-model-len", "512")
    yield s
    assert s.stop() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert models.data[0].owned_by == "mla.cpp"
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME


def test_completion_and_stream_agree(client):
    full = client.completions.create(model=MODEL_NAME, prompt="The meaning of life is", max_tokens=16, **GREEDY)
    assert full.object == "text_completion"
    assert full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 16
    assert full.usage.total_tokens == full.usage.prompt_tokens + 16
    stream = client.completions.create(model=MODEL_NAME, prompt="The meaning of life is", max_tokens=16,
                                       stream=True, stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_chat_and_stream_agree(client):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    full = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=10, **GREEDY)
    assert full.object == "chat.completion"
    msg = full.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str)
    assert full.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_completion_tokens=10,
                                            stream=True, stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].usage.completion_tokens == 10
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]


QWEN3_TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "chat-templates" / "Qwen-Qwen3-0.6B.jinja"


@pytest.mark.parametrize("with_tools", [False, True])
def test_chat_with_parts_tool_messages_and_template_kwargs(with_tools):
    """The prompt a chat request is run on equals jinja2's rendering (configured as transformers
    configures it) of the same messages, tools and template kwargs, with text content parts
    joined into a string as vLLM does for templates that expect string content. A real template
    that reads a kwarg (Qwen3's enable_thinking) and renders tool calls, tool results and tools.
    Objects keep the request's key order (each tool's keys and the call's arguments are not in
    sorted order here), as jinja2's tojson prints them."""
    s = Server(synth_model(), "--max-model-len", "1024", "--chat-template", str(QWEN3_TEMPLATE))
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "What is the weather"},
                                         {"type": "text", "text": "in Paris?"}]},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"unit": "C", "city": "Paris"}'}}]},
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
            {"role": "user", "content": "Thanks"},
        ]
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        if not with_tools:
            tools = None
        kwargs = {"enable_thinking": False}
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=tools or openai.NOT_GIVEN,
                                           max_tokens=3,
                                           extra_body={"chat_template_kwargs": kwargs, "ignore_eos": True},
                                           temperature=0)
        assert r.usage.completion_tokens == 3
        body = {"messages": messages, "chat_template_kwargs": kwargs} | ({"tools": tools} if tools else {})
        tok = requests.post(s.url + "/tokenize", json=body).json()
        assert tok["count"] == r.usage.prompt_tokens
        got = requests.post(s.url + "/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"]

        def as_string(content):
            return content if isinstance(content, str) else "\n".join(p["text"] for p in content)

        ref_messages = [dict(m, content=as_string(m["content"])) for m in messages]
        want = reference_env().from_string(QWEN3_TEMPLATE.read_text(encoding="utf-8")).render(
            messages=ref_messages, tools=tools, add_generation_prompt=True, **kwargs)
        assert "<tool_response>\nsunny\n</tool_response>" in want and "<think>\n\n</think>" in want
        assert '{"unit": "C", "city": "Paris"}' in want
        if tools:
            assert '{"type": "function", "function": {"name": "get_weather", "description"' in want
        # The template writes no BOS; the server adds DeepSeek-LLM's, as the vocabulary asks.
        assert got == "<｜begin▁of▁sentence｜>" + want
    finally:
        assert s.stop() == 0, s.log


def token_bytes(token: str) -> bytes:
    """A logprobs token string as bytes: `bytes:\\xNN...` for a token that is not UTF-8 alone."""
    if token.startswith("bytes:"):
        return bytes(int(h, 16) for h in token[len("bytes:"):].split("\\x")[1:])
    return token.encode("utf-8")


def test_stream_with_logprobs_never_splits_a_character(client):
    """'é' is two byte tokens in this vocabulary (0xC3 = id 125, 0xA9 = id 102); a logit bias makes
    the model emit only those. Streamed with logprobs, the text deltas must concatenate to the
    full response's text, which must be Python's UTF-8 decoding (U+FFFD for each maximal invalid
    subpart) of the tokens' bytes; every chunk's text is whole characters and the streamed
    logprobs tokens equal the full response's."""
    bias = {"125": 100, "102": 100}
    split_seen = False
    for prompt in ["Numbers:", "Hello", "The weather"]:
        args = dict(model=MODEL_NAME, prompt=prompt, max_tokens=12, logprobs=1, logit_bias=bias, **GREEDY)
        full = client.completions.create(**args).choices[0]
        tokens = full.logprobs.tokens
        assert len(tokens) == 12 and all(t in ("bytes:\\xc3", "bytes:\\xa9") for t in tokens), tokens
        want = b"".join(token_bytes(t) for t in tokens).decode("utf-8", errors="replace")
        assert full.text == want
        split_seen |= "é" in want
        chunks = [c.choices[0] for c in client.completions.create(stream=True, **args) if c.choices]
        assert "".join(c.text for c in chunks) == want
        assert [t for c in chunks if c.logprobs for t in c.logprobs.tokens] == tokens
        assert all("\ud800" > ch or ch > "\udfff" for c in chunks for ch in c.text)  # no lone surrogates
    assert split_seen, "no prompt produced 0xC3 0xA9 in a row: pick another prompt"


def test_n_choices(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Pick a number:", max_tokens=6, n=2, seed=11,
                                  temperature=1.0, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 12
    g = client.completions.create(model=MODEL_NAME, prompt="Pick a number:", max_tokens=6, n=2, **GREEDY)
    assert g.choices[0].text == g.choices[1].text  # greedy: both sequences agree
    c = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4, n=2, **GREEDY)
    assert sorted(ch.index for ch in c.choices) == [0, 1]
    stream = client.completions.create(model=MODEL_NAME, prompt="Pick a number:", max_tokens=6, n=2,
                                       stream=True, **GREEDY)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.text
    assert texts[0] == texts[1] == g.choices[0].text


def test_seed_reproducibility(client):
    kw = {"model": MODEL_NAME, "prompt": "Random words:", "max_tokens": 12, "temperature": 1.0, "top_p": 0.95,
              "extra_body": {"ignore_eos": True}}
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    assert a == b
    others = {client.completions.create(seed=s, **kw).choices[0].text for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds should not all give the same text"


def test_stop_strings(client):
    kw = {"model": MODEL_NAME, "prompt": "A B C", "max_tokens": 6, "temperature": 0,
              "extra_body": {"ignore_eos": True, "logit_bias": {"17464": 100}}}
    r = client.completions.create(stop=["oHel"], **kw)
    assert r.choices[0].text == "Hell"
    assert r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(stop="oHel", stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hell"


def test_completion_logprobs_shape(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=5, logprobs=3, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    for i, (tok, val, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        assert val <= 0 and math.isfinite(val)
        assert 1 <= len(top) <= 3
        # Greedy: the sampled token is the most likely one.
        assert max(top.values()) == pytest.approx(val, abs=1e-5)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-4
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0


def test_chat_logprobs_shape(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4, logprobs=True, top_logprobs=2, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)
        assert bytes(e.bytes).decode("utf-8", errors="replace") == e.token or e.token.startswith("bytes:")
    assert "".join(e.token for e in content) == r.choices[0].message.content
    none = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=2, **GREEDY)
    assert none.choices[0].logprobs is None


def test_client_errors_are_typed(client, server):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1, temperature=-1)
    assert "temperature" in str(e.value)
    assert requests.get(server.url + "/health").status_code == 200
