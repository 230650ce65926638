"""POST /v1/responses (the OpenAI Responses API) through the official `openai` client's
`client.responses.create` and an `openai-agents` agent: input items rendered as chat messages,
reasoning / message / function_call output items, usage, the streamed event sequence, tool_choice
"required", text.format json_schema, a tool round trip, and 400s naming the field while other
requests run on. The model output is scripted (mla serve --scripted-output) with the GLM-5.2 chat
template, whose generation prompt opens <think>; the json_schema test runs the embedded tiny model
itself through the grammar."""
import asyncio
import json
import threading

import jsonschema
import openai
import pytest
import requests
from agent_util import VOCAB_MODEL, scripted_server

from server_util import Server

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]

CALL = ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>")
SCRIPT = [
    {"trigger": "sunny, 21 C", "output": "Done.</think>It is sunny in Paris."},
    {"trigger": "forecast", "output": "Must call.</think>" + CALL},
    {"trigger": "weather", "output": "The user wants the weather.</think>Let me look." + CALL},
    {"trigger": "long story", "output": "Once upon a time. " * 400},
    {"trigger": "", "output": "No thinking here."},
]
WEATHER = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = scripted_server(tmp_path_factory.mktemp("responses"), "GLM-5.2.jinja", SCRIPT)
    yield s
    assert s.stop() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_plain_text(client):
    r = client.responses.create(model="any-model", input="Say something.", reasoning={"effort": "none"},
                                max_output_tokens=100)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert [o.type for o in r.output] == ["message"]
    assert r.output_text == "No thinking here."
    assert r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text"
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.max_output_tokens == 100 and r.store is False and r.previous_response_id is None
    # Thinking on (the template's default): the whole output is reasoning.
    r = client.responses.create(model="m", input="Say something.", instructions="Be brief.", max_output_tokens=100)
    assert [o.type for o in r.output] == ["reasoning"] and r.instructions == "Be brief."
    assert r.output[0].model_dump()["content"][0]["text"] == "No thinking here."
    # All of it is reasoning: the reasoning text's tokens (re-tokenized) are the output's, less the EOS.
    assert r.usage.output_tokens_details.reasoning_tokens == r.usage.output_tokens - 1


def test_usage_counts_cached_and_reasoning_tokens(client):
    first = client.responses.create(model="m", input=WEATHER, tools=TOOLS, max_output_tokens=300)
    again = client.responses.create(model="m", input=WEATHER, tools=TOOLS, max_output_tokens=300)
    # The same prompt again: all of it but the last partial block and token comes from the prefix cache
    # (the first took only what earlier tests' prompts share with it).
    assert first.usage.input_tokens_details.cached_tokens < again.usage.input_tokens_details.cached_tokens
    assert again.usage.input_tokens_details.cached_tokens >= again.usage.input_tokens - 16
    reasoning = again.output[0].model_dump()["content"][0]["text"]
    assert reasoning == "The user wants the weather."
    assert 0 < again.usage.output_tokens_details.reasoning_tokens < again.usage.output_tokens


def test_function_call(client):
    r = client.responses.create(model="m", input=WEATHER, tools=TOOLS, max_output_tokens=300)
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"]
    assert r.output[1].content[0].text == "Let me look."
    call = r.output[2]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert call.call_id and call.id.startswith("fc_") and call.status == "completed"
    assert r.tools[0].name == "get_weather"


def collect(stream):
    events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def test_streamed(client):
    events = collect(client.responses.create(model="m", input=WEATHER, tools=TOOLS, max_output_tokens=300,
                                             stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert types.count("response.output_item.added") == types.count("response.output_item.done") == 3
    assert "response.output_text.delta" in types and "response.function_call_arguments.delta" in types
    assert "response.reasoning_text.delta" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert text == "Let me look." and json.loads(args) == {"city": "Paris", "days": 3}
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[2].arguments == args and final.output[1].content[0].text == text
    assert final.usage.output_tokens > 0
    # Text only, streamed.
    events = collect(client.responses.create(model="m", input="Say something.", reasoning={"effort": "none"},
                                             max_output_tokens=100, stream=True))
    types = [e.type for e in events]
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * (types.count(
                         "response.output_text.delta")) + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    assert events[-1].response.output_text == "No thinking here."


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required(client, stream):
    r = client.responses.create(model="m", input="Get the forecast for Paris.", tools=TOOLS,
                                tool_choice="required", max_output_tokens=300, stream=stream)
    if stream:
        r = collect(r)[-1].response
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert json.loads(r.output[1].arguments) == {"city": "Paris", "days": 3}
    r = client.responses.create(model="m", input="Get the forecast for Paris.", tools=TOOLS,
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=300)
    assert r.output[-1].name == "get_weather"


def test_tool_round_trip_items(client):
    first = client.responses.create(model="m", input=WEATHER, tools=TOOLS, max_output_tokens=300)
    call = first.output[-1]
    items = [{"role": "user", "content": WEATHER}] + [o.model_dump(exclude_none=True) for o in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"})
    r = client.responses.create(model="m", input=items, tools=TOOLS, max_output_tokens=300)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output_text == "It is sunny in Paris."


def test_max_output_tokens_incomplete(client):
    r = client.responses.create(model="m", input="Tell a long story.", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_agents_sdk_tool_round_trip(server):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str, days: int) -> str:
        """Weather for a city."""
        calls.append((city, days))
        return "sunny, 21 C"

    model = agents.OpenAIResponsesModel(
        model="any-model", openai_client=openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused",
                                                            max_retries=0, timeout=60))
    agent = agents.Agent(name="weather", instructions="Answer weather questions.", tools=[get_weather],
                         model=model, model_settings=agents.ModelSettings(max_tokens=300))
    result = asyncio.run(agents.Runner.run(agent, WEATHER, max_turns=3))
    assert calls == [("Paris", 3)]
    assert result.final_output == "It is sunny in Paris."


def test_errors_name_the_field_and_leave_others_running(client, server):
    done = {}

    def long_request():
        r = client.responses.create(model="m", input="Tell a long story.", max_output_tokens=200,
                                    reasoning={"effort": "none"}, stream=True)
        done["final"] = collect(r)[-1].response

    t = threading.Thread(target=long_request)
    t.start()
    bad = [
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input", "web_search_call"),
        ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "resp_nope"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "item_reference"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools", "web_search"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "max_output_tokens"),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "schema"),
        ({"input": "hi", "tool_choice": "required"}, "tool_choice", "tool"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input",
         "input_image"),
        ({}, "input", "input"),
    ]
    for body, param, word in bad:
        r = requests.post(server.url + "/v1/responses", json=dict(model="m", **body), timeout=30)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["param"] == param and word in err["message"], (body, err)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="m", input="hi", previous_response_id="resp_missing")
    t.join(60)
    final = done["final"]
    assert final.status == "incomplete" and final.usage.output_tokens == 200
    assert final.output_text.startswith("Once upon a time.")


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "version": {"type": "integer"}},
          "required": ["name", "version"], "additionalProperties": False}


def test_text_format_json_schema():
    s = Server(VOCAB_MODEL, "--json-max-whitespace", "2")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        fmt = {"format": {"type": "json_schema", "name": "pkg", "schema": SCHEMA, "strict": True}}
        r = c.responses.create(model="m", input="Describe a Python package as JSON.", text=fmt, temperature=0,
                               max_output_tokens=200)
        assert r.status == "completed" and r.text.format.type == "json_schema"
        jsonschema.validate(json.loads(r.output_text), SCHEMA)
        events = collect(c.responses.create(model="m", input="Describe a Python package as JSON.", text=fmt,
                                            temperature=0, max_output_tokens=200, stream=True))
        assert events[-1].response.output_text == r.output_text
    finally:
        assert s.stop() == 0, s.log
