"""Structured outputs (response_format json_object / json_schema, vLLM's structured_outputs json /
regex / choice / grammar) on the embedded tiny model through the official openai client: every
output parses and validates against its schema with `jsonschema`, a choice is one of the choices,
a regex holds over the whole output, an EBNF grammar is followed; bad constraints are 400s naming
the problem and the server keeps serving; a constrained request leaves a free one's tokens alone."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from server_util import MODEL_NAME as NAME
from server_util import REPO, Server

MODEL = REPO / "models" / "tiny-q8_0.gguf"

# Schemas the tiny model (trained on the Python docs, context 256) must be forced through.
SCHEMAS = {
    "nested_object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "meta": {
                "type": "object",
                "properties": {
                    "version": {"type": "integer"},
                    "stable": {"type": "boolean"},
                },
                "required": ["version", "stable"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "meta"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {
            "kind": {"enum": ["list", "dict", "tuple", "set"]},
            "mutable": {"type": "boolean"},
            "level": {"type": "string", "enum": ["low", "high"]},
        },
        "required": ["kind", "mutable", "level"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 8},
                "minItems": 1,
                "maxItems": 3,
            },
            "matrix": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
                "maxItems": 2,
            },
        },
        "required": ["tags", "matrix"],
        "additionalProperties": False,
    },
    "bounded_numbers": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 3, "maximum": 7},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
            "offset": {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 5},
        },
        "required": ["count", "ratio", "offset"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def server():
    # The tiny model favours newlines (the Python docs): two whitespace characters per gap at
    # most, so its JSON closes within its 256-token context.
    s = Server(MODEL, "--json-max-whitespace", "2")
    yield s
    assert s.stop() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, content, **kw):
    return client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": content}], **kw)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_validate(client, name):
    schema = SCHEMAS[name]
    r = chat(client, "Describe a Python object as JSON.", temperature=0, max_tokens=200,
             response_format={"type": "json_schema",
                              "json_schema": {"name": name, "schema": schema, "strict": True}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    value = json.loads(choice.message.content)
    jsonschema.validate(value, schema)
    # Properties come in the schema's order (the request's, not sorted).
    assert list(value) == [k for k in schema["properties"] if k in value], value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_structured_outputs_json_sampled_and_on_completions(client, name):
    """vLLM's structured_outputs.json on /v1/completions, sampled (temperature 1, three seeds)."""
    schema = SCHEMAS[name]
    for seed in (1, 2, 3):
        r = client.completions.create(
            model=NAME, prompt="The configuration is", max_tokens=200, temperature=1, seed=seed,
            extra_body={"structured_outputs": {"json": schema, "disable_any_whitespace": True}})
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.text), schema)


def test_json_object(client):
    # Free-form keys and strings: the tiny model closes them on these prompts (greedy); on a chat
    # prompt it writes Python-docs prose into a string until max_tokens.
    texts = []
    for prompt in ("The result is", "x = "):
        r = client.completions.create(model=NAME, prompt=prompt, temperature=0, max_tokens=200,
                                      extra_body={"response_format": {"type": "json_object"}})
        assert r.choices[0].finish_reason == "stop"
        texts.append(r.choices[0].text)
        assert isinstance(json.loads(texts[-1]), dict), texts[-1]
    assert any(json.loads(t) for t in texts), texts  # not only {}


def test_choice_returns_one_of_the_choices(client):
    choices = ["list", "tuple", "dict \"literal\"", "None"]
    seen = set()
    for seed in range(6):
        r = chat(client, "Which type?", temperature=1, seed=seed, max_tokens=20,
                 extra_body={"structured_outputs": {"choice": choices}})
        assert r.choices[0].finish_reason == "stop"
        assert r.choices[0].message.content in choices
        seen.add(r.choices[0].message.content)
    assert seen, seen


def test_regex_holds(client):
    pattern = r"(0|[1-9][0-9]{0,3})\.[0-9]{2} (ms|s)"
    r = client.completions.create(model=NAME, prompt="The call took", max_tokens=30,
                                  temperature=1, seed=4, n=3,
                                  extra_body={"structured_outputs": {"regex": pattern}})
    for c in r.choices:
        assert c.finish_reason == "stop"
        assert re.fullmatch(pattern, c.text), c.text


def test_ebnf_grammar_and_streaming(client):
    grammar = 'root ::= "def " name "(" name? "):"\nname ::= [a-z_] [a-z_0-9]{0,10}'
    stream = chat(client, "Write a function header.", temperature=0, max_tokens=40, stream=True,
                  extra_body={"structured_outputs": {"grammar": grammar}})
    text, finish = "", None
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert finish == "stop"
    assert re.fullmatch(r"def [a-z_][a-z_0-9]{0,10}\(([a-z_][a-z_0-9]{0,10})?\):", text), text


@pytest.mark.parametrize("body, needle", [
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "object", "properties": 5}}}},
     "json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "yaml"),
    ({"extra_body": {"structured_outputs": {"regex": "[a-"}}}, "regex"),
    ({"extra_body": {"structured_outputs": {"grammar": "root ::= ("}}}, "grammar"),
    ({"extra_body": {"structured_outputs": {"choice": []}}}, "choice"),
    ({"extra_body": {"structured_outputs": {"regex": "a", "choice": ["a"]}}}, "exactly one"),
    ({"extra_body": {"structured_outputs": {"json": "{not json"}}}, "json_schema"),
])
def test_invalid_constraints_are_400s_naming_the_problem(client, body, needle):
    kw = dict(body)
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, "hi", max_tokens=5, **kw)
    assert e.value.status_code == 400
    assert needle in e.value.message, e.value.message
    # The server keeps serving.
    assert chat(client, "hi", max_tokens=2).choices[0].message.content is not None


def test_constrained_request_leaves_free_requests_bit_identical(client):
    def free():
        r = client.completions.create(model=NAME, prompt="A list is", max_tokens=24, temperature=0,
                                      logprobs=1, extra_body={"ignore_eos": True})
        return r.choices[0].text, r.choices[0].logprobs.token_logprobs

    def constrained(seed):
        return client.completions.create(
            model=NAME, prompt="The value is", max_tokens=60, temperature=1, seed=seed,
            extra_body={"structured_outputs": {"json": SCHEMAS["enums"]}})

    alone = free()
    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(constrained, s) for s in range(3)]
        mixed = ex.submit(free)
        for f in futs:
            jsonschema.validate(json.loads(f.result().choices[0].text), SCHEMAS["enums"])
        assert mixed.result() == alone
