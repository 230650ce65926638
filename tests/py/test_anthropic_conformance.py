"""/v1/messages, its stream, count_tokens, the error bodies and GET /v1/models (as the `anthropic`
client's models.list() and models.retrieve() send it, with an `anthropic-version` header) checked
against the pinned `anthropic` client's own pydantic types, in strict mode: every body and every
streamed event is validated from its raw JSON (model_validate_json(strict=True)), so a missing
required field, a wrong type or a value outside a Literal fails, where the client itself would
build the object without checks. The model output is scripted (mla serve --scripted-output) with
the GLM-5.2 chat template, whose generation prompt opens <think>."""
import json
import re
from datetime import UTC, datetime

import anthropic
import pydantic
import pytest
import requests
from agent_util import scripted_server
from anthropic.pagination import SyncPage
from anthropic.types import Message, MessageTokensCount, ModelInfo, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse

from server_util import MODEL_NAME

TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {
              "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]
SCRIPT = [
    {"trigger": "weather", "output": "The user wants the weather.</think>Let me look."
                                     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
                                     "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"},
    {"trigger": "greet", "output": "Greeting.</think>Hello there! STOP and more"},
    {"trigger": "long story", "output": "Once upon a time. " * 100},
    {"trigger": "", "output": "No thinking here."},
]
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
STREAM_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = scripted_server(tmp_path_factory.mktemp("anthropic-conformance"), "GLM-5.2.jinja", SCRIPT,
                        "--api-key", "sk-test")
    yield s
    assert s.stop() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0, timeout=60)


def post(server, path: str, body: dict, status: int = 200) -> requests.Response:
    r = requests.post(server.url + path, json=body, headers=HEADERS, timeout=120)
    assert r.status_code == status, r.text
    return r


def stream_events(r: requests.Response) -> list:
    """The stream's events, each `event: NAME` + `data: {json}` with NAME the payload's type, each
    validated as a RawMessageStreamEvent."""
    out = []
    for block in r.content.decode("utf-8").split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = lines[1][len("data: "):]
        event = STREAM_EVENT.validate_json(data, strict=True)
        assert event.type == lines[0][len("event: "):] == json.loads(data)["type"]
        out.append(event)
    return out


MESSAGES = [
    ({"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS}, "tool_use"),
    ({"messages": [{"role": "user", "content": "greet me"}], "stop_sequences": ["STOP"]}, "stop_sequence"),
    ({"messages": [{"role": "user", "content": "a long story"}], "max_tokens": 20}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "Hi"}], "system": "Be brief.",
      "thinking": {"type": "disabled"}}, "end_turn"),
    ({"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS,
      "tool_choice": {"type": "tool", "name": "get_weather"}}, None),
]


@pytest.mark.parametrize("extra,stop_reason", MESSAGES)
def test_message_and_its_stream(server, extra, stop_reason):
    body = {"model": "claude-any", "max_tokens": 300, **extra}
    m = Message.model_validate_json(post(server, "/v1/messages", body).content, strict=True)
    if stop_reason:
        assert m.stop_reason == stop_reason
    events = stream_events(post(server, "/v1/messages", {**body, "stream": True}))
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert events[-2].type == "message_delta" and events[-2].delta.stop_reason == m.stop_reason
    # The blocks the stream opens are the message's, in order.
    started = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert started == [b.type for b in m.content]


def test_tool_result_round_trip(server):
    first = Message.model_validate_json(post(server, "/v1/messages", {
        "model": "m", "max_tokens": 300, "tools": TOOLS,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}).content, strict=True)
    call = first.content[-1]
    assert call.type == "tool_use"
    messages = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}]
    Message.model_validate_json(post(server, "/v1/messages", {"model": "m", "max_tokens": 50, "tools": TOOLS,
                                                              "messages": messages}).content, strict=True)


def test_count_tokens(server):
    r = post(server, "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    assert MessageTokensCount.model_validate_json(r.content, strict=True).input_tokens > 0


def test_models_list_and_retrieve_in_anthropic_shape(server, client):
    r = requests.get(server.url + "/v1/models", headers=HEADERS, timeout=10)
    assert r.status_code == 200
    raw = r.json()
    # The page's fields the client pages with are all there (the SDK types them optional).
    assert raw["has_more"] is False and raw["first_id"] == raw["last_id"] == MODEL_NAME
    page = SyncPage[ModelInfo].model_validate_json(r.content, strict=True)
    assert [m.id for m in page.data] == [MODEL_NAME]
    info = raw["data"][0]
    assert info["type"] == "model" and info["display_name"] == MODEL_NAME
    assert RFC3339.match(info["created_at"]), info["created_at"]
    created = datetime.fromisoformat(info["created_at"])
    assert abs((datetime.now(UTC) - created).total_seconds()) < 3600  # the server's start
    # Through the client, as a user calls it.
    models = list(client.models.list())
    assert [m.id for m in models] == [MODEL_NAME] and models[0].created_at == created
    one = client.models.retrieve(MODEL_NAME)
    assert one.id == MODEL_NAME and one.display_name == MODEL_NAME and one.type == "model"
    ModelInfo.model_validate_json(requests.get(server.url + "/v1/models/" + MODEL_NAME, headers=HEADERS,
                                               timeout=10).content, strict=True)
    # The page after the only model is empty.
    after = requests.get(server.url + "/v1/models?after_id=" + MODEL_NAME, headers=HEADERS, timeout=10).json()
    assert after == {"data": [], "has_more": False, "first_id": None, "last_id": None}
    # Without the header: the OpenAI shape.
    openai_shape = requests.get(server.url + "/v1/models", headers={"x-api-key": "sk-test"}, timeout=10).json()
    assert openai_shape["object"] == "list" and openai_shape["data"][0]["object"] == "model"


def test_error_bodies(server, client):
    for body in ({"model": "m", "messages": []},
                 {"model": "m", "max_tokens": 10},
                 {"model": "m", "max_tokens": -1, "messages": [{"role": "user", "content": "x"}]},
                 {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                  "tool_choice": {"type": "tool", "name": "nope"}, "tools": TOOLS}):
        err = ErrorResponse.model_validate_json(post(server, "/v1/messages", body, 400).content, strict=True)
        assert err.error.type == "invalid_request_error" and err.error.message
    r = requests.get(server.url + "/v1/models/other-model", headers=HEADERS, timeout=10)
    assert r.status_code == 404
    assert ErrorResponse.model_validate_json(r.content, strict=True).error.type == "not_found_error"
    with pytest.raises(anthropic.NotFoundError, match="other-model"):
        client.models.retrieve("other-model")


def test_strict_types_catch_violations(server):
    """The checks can fail: a real message passes; without its usage, with a number as a string or
    a stop_reason outside the Literal it does not (the client's own parsing would take all three)."""
    raw = post(server, "/v1/messages", {"model": "m", "max_tokens": 5,
                                        "messages": [{"role": "user", "content": "Hi"}]}).json()
    Message.model_validate_json(json.dumps(raw), strict=True)
    broken = [{k: v for k, v in raw.items() if k != "usage"},
              {**raw, "usage": {**raw["usage"], "output_tokens": str(raw["usage"]["output_tokens"])}},
              {**raw, "stop_reason": "finished"}]
    for body in broken:
        with pytest.raises(pydantic.ValidationError):
            Message.model_validate_json(json.dumps(body), strict=True)
    info = requests.get(server.url + "/v1/models/" + MODEL_NAME, headers=HEADERS, timeout=10).json()
    with pytest.raises(pydantic.ValidationError):
        ModelInfo.model_validate_json(json.dumps({k: v for k, v in info.items() if k != "lifecycle"}), strict=True)
