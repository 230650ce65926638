"""The official OpenAI OpenAPI document (tests/fixtures/openai-openapi, pinned) as a JSON-schema
validator for the server's response bodies and streamed events.

The document is OpenAPI 3.1 (JSON Schema 2020-12), but a few of its schemas still mark a null
value with OpenAPI 3.0's `nullable: true`, which 2020-12 ignores (the chat stream chunk's
`finish_reason` and `logprobs`, for instance, are typed `string` / `object` with `nullable: true`).
Those are read as the document means them: `{"anyOf": [schema, {"type": "null"}]}`. Nothing else
in the document is changed.

The server's deliberate deviations from it are DEVIATIONS below, each a row of docs/API.md's
table with the reason: one JSON path in one kind of body where the spec wants a value and mla
sends null, or wants a property and mla leaves it out. check() lets exactly those through and
reports every other violation; SEEN records which deviations a run met, so a test can insist
that none is stale.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "openai-openapi" / "openapi.yaml"
SPEC_URI = "urn:openai-openapi"


@dataclass(frozen=True)
class Deviation:
    bodies: tuple  # the kinds of body it applies to (the `body` argument of check())
    path: str     # the JSON path in that body, "*" for any list index
    rule: str     # "null": null where the spec wants a value; "missing": a required property left out
    reason: str


DEVIATIONS = (
    Deviation(("completion chunk",), "choices/*/finish_reason", "null",
              "a streamed /v1/completions chunk has finish_reason null until the choice ends: the spec "
              "gives streamed and whole completions one schema, whose finish_reason is never null; "
              "OpenAI's own stream and vLLM's send null"),
    Deviation(("completion", "completion chunk"), "choices/*/logprobs/token_logprobs/0", "null",
              "echo with logprobs: the first prompt token has no log-probability (nothing precedes "
              "it); OpenAI's legacy API and vLLM send null there"),
    Deviation(("completion", "completion chunk"), "choices/*/logprobs/top_logprobs/0", "null",
              "the same token's top_logprobs entry"),
    Deviation(("response",), "usage/input_tokens_details/cache_write_tokens", "missing",
              "mla does not count the tokens a request adds to the prefix cache; vLLM leaves the field "
              "out too"),
)

SEEN: set[Deviation] = set()


def _nullable_to_anyof(node):
    """OpenAPI 3.0's `nullable: true` rewritten as JSON Schema, everywhere in `node`."""
    if isinstance(node, list):
        return [_nullable_to_anyof(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable_to_anyof(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@functools.cache
def spec() -> dict:
    with open(SPEC_PATH, encoding="utf-8") as f:
        doc = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    doc["components"]["schemas"] = _nullable_to_anyof(doc["components"]["schemas"])
    return doc


@functools.cache
def _registry() -> Registry:
    return Registry().with_resource(SPEC_URI, Resource.from_contents(spec(), default_specification=DRAFT202012))


@functools.cache
def validator(schema_name: str) -> jsonschema.Draft202012Validator:
    assert schema_name in spec()["components"]["schemas"], f"no schema {schema_name} in the spec"
    ref = {"$ref": f"{SPEC_URI}#/components/schemas/{schema_name}"}
    return jsonschema.Draft202012Validator(ref, registry=_registry())


def _is_other_kind(errs: list, at: list) -> bool:
    """Whether a failed anyOf / oneOf branch describes another kind of value than the instance at
    `at`: its own type is wrong, or its `type` discriminator property does not match."""
    for e in errs:
        rel = list(e.absolute_path)
        if rel == at and e.validator == "type":
            return True
        if rel == [*at, "type"] and e.validator in ("enum", "const"):
            return True
    return False


def _leaf_errors(error: jsonschema.ValidationError) -> list:
    """The errors that explain a failed anyOf / oneOf: those of the one branch describing the
    instance's kind of value (by type, or by the `type` property the spec discriminates on), found
    recursively; the anyOf error itself when no single branch does."""
    if not error.context:
        return [error]
    at = list(error.absolute_path)
    by_branch: dict[int, list] = {}
    for sub in error.context:
        by_branch.setdefault(sub.schema_path[0], []).append(sub)
    same_kind = [errs for errs in by_branch.values() if not _is_other_kind(errs, at)]
    if len(same_kind) != 1:
        return [error]
    return [leaf for e in same_kind[0] for leaf in _leaf_errors(e)]


def _violations(error: jsonschema.ValidationError) -> list[tuple[str, str, str]]:
    """(path, rule, message) of one leaf error; rule as in Deviation, or "" for any other kind."""
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [p for p in error.validator_value if p not in error.instance]
        return [("/".join([*path, m]), "missing", f"'{m}' is a required property") for m in missing]
    rule = "null" if error.instance is None and error.validator in ("type", "enum", "const", "anyOf", "oneOf") else ""
    return [("/".join(path), rule, error.message[:300])]


def _matches(pattern: str, path: str) -> bool:
    return re.fullmatch("/".join(r"\d+" if part == "*" else re.escape(part) for part in pattern.split("/")),
                        path) is not None


def _applies(d: Deviation, body: str, path: str) -> bool:
    """A deviation of a body applies to that body, and to the same body carried in a Responses
    stream event's `response` field."""
    if body in d.bodies:
        return _matches(d.path, path)
    return body == "response event" and "response" in d.bodies and _matches("response/" + d.path, path)


def errors(schema_name: str, instance, body: str = "") -> list[str]:
    """Every violation of the named schema, one line each (the JSON path and the message), less
    the listed deviations for this kind of body (which are added to SEEN)."""
    out = []
    for e in validator(schema_name).iter_errors(instance):
        for leaf in _leaf_errors(e):
            for path, rule, message in _violations(leaf):
                allowed = [d for d in DEVIATIONS if d.rule == rule and _applies(d, body, path)]
                if allowed:
                    SEEN.update(allowed)
                else:
                    out.append(f"{schema_name}: at {path or '(root)'}: {message}")
    # Violations reported twice (a null fails both `type` and `enum`) are one.
    return list(dict.fromkeys(out))


def check(schema_name: str, instance, body: str = "") -> None:
    errs = errors(schema_name, instance, body)
    assert not errs, "\n".join(errs)


@functools.cache
def stream_event_schemas() -> dict[str, str]:
    """Responses stream event type (e.g. "response.output_text.delta") -> its schema's name, from
    the spec's ResponseStreamEvent union."""
    schemas = spec()["components"]["schemas"]
    out = {}
    for branch in schemas["ResponseStreamEvent"]["anyOf"]:
        name = branch["$ref"].rsplit("/", 1)[1]
        for event_type in schemas[name]["properties"]["type"]["enum"]:
            out[event_type] = name
    return out


def check_response_event(event: dict) -> None:
    """A Responses stream event, against the schema of its own type."""
    name = stream_event_schemas().get(event.get("type"))
    assert name, f"event type {event.get('type')!r} is not in the spec's ResponseStreamEvent"
    check(name, event, body="response event")

