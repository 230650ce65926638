"""POST /v1/messages and /v1/messages/count_tokens through the official `anthropic` client:
text, thinking and tool_use blocks, stop reasons, usage, the streaming event sequence, tool
results, errors in Anthropic's shape. The model output is scripted (mla serve --scripted-output)
with the GLM-5.2 chat template, whose generation prompt opens <think>. (The client has no
temperature parameter; the scripted logits make sampling at the default temperature 1 pick the
scripted token with probability 1 - 4096 e^-60.)"""
import time

import anthropic
import pytest
import requests
from agent_util import scripted_server

from server_util import metric

TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {
              "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]

SCRIPT = [
    {"trigger": "sunny, 21 C", "output": "Done.</think>It is sunny in Paris."},
    {"trigger": "weather", "output": "The user wants the weather.</think>Let me look."
                                      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
                                      "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value>"
                                      "</tool_call>"},
    {"trigger": "greet", "output": "Greeting.</think>Hello there! STOP and more"},
    {"trigger": "long story", "output": "Once upon a time. " * 400},
    {"trigger": "", "output": "No thinking here."},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = scripted_server(tmp_path_factory.mktemp("anthropic"), "GLM-5.2.jinja", SCRIPT,
                        "--api-key", "sk-test")
    yield s
    assert s.stop() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0, timeout=60)


WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_use_message(client):
    m = client.messages.create(model="claude-any", max_tokens=300, messages=WEATHER, tools=TOOLS,
                               system="You are terse.")
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
    assert m.content[0].thinking == "The user wants the weather."
    assert m.content[1].text == "Let me look."
    tool = m.content[2]
    assert tool.name == "get_weather" and tool.input == {"city": "Paris", "days": 3} and tool.id
    assert m.stop_reason == "tool_use" and m.stop_sequence is None
    counted = client.messages.count_tokens(model="claude-any", messages=WEATHER, tools=TOOLS,
                                           system="You are terse.")
    assert m.usage.input_tokens == counted.input_tokens > 0
    assert m.usage.output_tokens > 0


def test_tool_use_streamed(client):
    with client.messages.stream(model="claude-any", max_tokens=300, messages=WEATHER, tools=TOOLS) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "message_delta" in events
    assert events.count("content_block_start") == events.count("content_block_stop") == 3
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "The user wants the weather."
    assert final.content[1].text == "Let me look."
    assert final.content[2].input == {"city": "Paris", "days": 3}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 0


def test_tool_result_turn(client):
    first = client.messages.create(model="m", max_tokens=300, messages=WEATHER, tools=TOOLS)
    tool = first.content[-1]
    messages = WEATHER + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id,
                                      "content": [{"type": "text", "text": "sunny, 21 C"}]}]},
    ]
    m = client.messages.create(model="m", max_tokens=300, messages=messages, tools=TOOLS)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[1].text == "It is sunny in Paris."
    assert m.stop_reason == "end_turn"


def test_stop_sequence_and_max_tokens(client):
    greet = [{"role": "user", "content": "Please greet me."}]
    m = client.messages.create(model="m", max_tokens=300, messages=greet, stop_sequences=["STOP"])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP"
    assert m.content[-1].text == "Hello there! "
    with client.messages.stream(model="m", max_tokens=300, messages=greet, stop_sequences=["STOP"]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "STOP"
    assert final.content[-1].text == "Hello there! "
    m = client.messages.create(model="m", max_tokens=2, messages=greet)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 2


def test_thinking_switch(client):
    plain = [{"role": "user", "content": "Say something."}]
    # GLM's prompt opens <think> unless thinking is off: with no </think>, all of it is thinking.
    m = client.messages.create(model="m", max_tokens=100, messages=plain)
    assert [b.type for b in m.content] == ["thinking"]
    assert m.content[0].thinking == "No thinking here."
    m = client.messages.create(model="m", max_tokens=100, messages=plain,
                               thinking={"type": "disabled"})
    assert [(b.type, b.text) for b in m.content] == [("text", "No thinking here.")]
    m = client.messages.create(model="m", max_tokens=100, messages=plain,
                               thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in m.content] == ["thinking"]


def test_errors_have_anthropics_shape(client, server):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="m", max_tokens=0, messages=WEATHER)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="not supported"):
        client.messages.create(model="m", max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    with pytest.raises(anthropic.BadRequestError, match="'nope'") as e:
        client.messages.create(model="m", max_tokens=10, messages=WEATHER, tools=TOOLS,
                               tool_choice={"type": "tool", "name": "nope"})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model="m", max_tokens=10, messages=WEATHER)
    assert e.value.body["error"]["type"] == "authentication_error"
    r = requests.post(server.url + "/v1/messages", data="{not json",
                      headers={"x-api-key": "sk-test"})
    assert r.status_code == 400 and r.json()["type"] == "error"
    # The server keeps serving.
    assert client.messages.create(model="m", max_tokens=5, messages=WEATHER).content


def test_stream_disconnect_aborts(client, server):
    aborted = metric(server.metrics(), "mla:request_success_total", finished_reason="abort")
    r = requests.post(server.url + "/v1/messages", stream=True, timeout=30,
                      headers={"x-api-key": "sk-test"},
                      json={"model": "m", "max_tokens": 4000, "stream": True,
                            "messages": [{"role": "user", "content": "Tell a long story."}]})
    first = next(r.iter_lines())
    assert first == b"event: message_start"
    r.close()
    deadline = time.time() + 20
    while metric(server.metrics(), "mla:request_success_total", finished_reason="abort") == aborted:
        assert time.time() < deadline, server.log
        time.sleep(0.02)
    assert metric(server.metrics(), "mla:num_requests_running") == 0
    assert client.messages.create(model="m", max_tokens=5, messages=WEATHER).content


def test_latency_metrics_count_messages(client, server):
    names = ["mla:time_to_first_token_seconds_count", "mla:e2e_request_latency_seconds_count"]
    before = [metric(server.metrics(), n) for n in names]
    client.messages.create(model="m", max_tokens=5, messages=WEATHER)
    assert [metric(server.metrics(), n) for n in names] == [b + 1 for b in before]
