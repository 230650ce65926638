"""mla.cpp's Jinja engine against Python jinja2 configured as transformers configures it.

Every real chat template in tests/fixtures/chat-templates (plus DeepSeek-V3's, from its
tokenizer_config.json, and mla's own DeepSeek-V4 template in models/templates) is rendered with every conversation in tests/fixtures/chat/conversations.json
by `mla template render --batch`, and by jinja2; outputs must be byte-identical, and a template
that jinja2 rejects for a conversation (raises) must be rejected by mla.cpp too, and vice versa.
A second set of small templates (tests/fixtures/chat/snippets.json) exercises the language
features one by one the same way.
"""
import concurrent.futures
import datetime
import json
import os
import pathlib
import re
import subprocess
import tempfile

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE_DIR = ROOT / "tests" / "fixtures" / "chat-templates"
DSV3_CONFIG = ROOT / "tests" / "fixtures" / "tokenizers" / "deepseek-v3" / "tokenizer_config.json"
DSV4_OURS = ROOT / "models" / "templates" / "deepseek-v4.jinja"  # mla's own (test_deepseek_v4_template.py)
FIXTURES = ROOT / "tests" / "fixtures" / "chat"
FIXED_NOW = datetime.datetime(2025, 1, 31, 12, 34, 56)  # noqa: DTZ001 - local time, as strftime_now renders it


def mla_bin():
    path = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
    if not os.path.exists(path):
        pytest.fail(f"mla binary not found at {path} (set MLA_BIN or build first)")
    return path


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker as seen by rendering: {% generation %} renders its body."""

    tags = {"generation"}  # noqa: RUF012 - jinja2 reads the tags as this class attribute

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def reference_env():
    """transformers.utils.chat_template_utils._compile_jinja_template, with a fixed clock."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference_compile(env, source):
    """The compiled template, or ('error', message) if jinja2 rejects the source."""
    try:
        return env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any compile error counts as rejection, like render errors
        return "error", f"{type(e).__name__}: {e}"


def reference_render(template, context):
    """('ok', text) or ('error', message) as jinja2 renders it."""
    if isinstance(template, tuple):
        return template
    try:
        return "ok", template.render(**context)
    except Exception as e:  # noqa: BLE001 - whatever jinja2 raises is a rejection to compare
        return "error", f"{type(e).__name__}: {e}"


def mla_render_batch(source, contexts):
    """Renders every context with one `mla template render --batch` call."""
    with tempfile.TemporaryDirectory() as d:
        tpath = pathlib.Path(d) / "t.jinja"
        cpath = pathlib.Path(d) / "c.json"
        tpath.write_bytes(source.encode("utf-8"))
        cpath.write_text(json.dumps(contexts, ensure_ascii=False), encoding="utf-8")
        proc = subprocess.run(
            [mla_bin(), "template", "render", "--template", str(tpath), "--context", str(cpath), "--batch",
             "--now", FIXED_NOW.strftime("%Y-%m-%dT%H:%M:%S")],
            capture_output=True, check=False, timeout=120,
        )
    assert proc.returncode == 0, f"mla template render --batch failed: {proc.stderr.decode(errors='replace')}"
    results = json.loads(proc.stdout.decode("utf-8"))
    assert len(results) == len(contexts)
    return [("ok", r["output"]) if "output" in r else ("error", r["error"]) for r in results]


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"first difference at char {i}: jinja2 {a[max(0, i - 40):i + 40]!r} vs mla {b[max(0, i - 40):i + 40]!r}"


def compare(label, expected, actual):
    """A mismatch description, or None when both agree."""
    if expected[0] != actual[0]:
        return f"{label}: jinja2 {expected[0]} ({expected[1][:200]!r}) but mla {actual[0]} ({actual[1][:200]!r})"
    if expected[0] == "ok" and expected[1] != actual[1]:
        return f"{label}: output differs; {first_difference(expected[1], actual[1])}"
    return None


def load_templates():
    if not TEMPLATE_DIR.is_dir():
        pytest.fail(f"chat templates not found at {TEMPLATE_DIR}")
    templates = {p.name: p.read_text(encoding="utf-8") for p in sorted(TEMPLATE_DIR.glob("*.jinja"))}
    if not templates:
        pytest.fail(f"no *.jinja files in {TEMPLATE_DIR.resolve()}")
    config = json.loads(DSV3_CONFIG.read_text(encoding="utf-8"))
    templates["deepseek-v3/tokenizer_config.json"] = config["chat_template"]
    templates["models/templates/deepseek-v4.jinja"] = DSV4_OURS.read_text(encoding="utf-8")
    return templates


# Floors measured with today's fixtures, so that a test that agrees with jinja2 by rendering less
# (templates or conversations dropped, or both engines rejecting what they used to render) fails:
# 13 templates x 21 conversations, 242 pairs rendered identically, every template renders at
# least 15 of the conversations (Kimi-K2-Instruct; most render 17 to 21), 193 snippets.
MIN_TEMPLATES = 13
MIN_CONVERSATIONS = 21
MIN_PAIRS_RENDERED = 242
MIN_RENDERED_PER_TEMPLATE = 15
MIN_SNIPPETS = 193


def test_real_templates_match_jinja2():
    conversations = json.loads((FIXTURES / "conversations.json").read_text(encoding="utf-8"))
    assert len(conversations) >= MIN_CONVERSATIONS
    contexts = [c["context"] for c in conversations]
    env = reference_env()
    templates = load_templates()
    assert len(templates) >= MIN_TEMPLATES, f"{len(templates)} templates, want at least {MIN_TEMPLATES}"
    mismatches, n_pairs, n_ok, n_err, too_few = [], 0, 0, 0, []
    for name, source in templates.items():
        actual = mla_render_batch(source, contexts)
        compiled = reference_compile(env, source)
        n_ok_here = 0
        for conv, ctx, got in zip(conversations, contexts, actual):
            want = reference_render(compiled, ctx)
            n_pairs += 1
            problem = compare(f"{name} x {conv['name']}", want, got)
            if problem:
                mismatches.append(problem)
            else:
                n_ok_here += want[0] == "ok"
                n_err += want[0] == "error"
        n_ok += n_ok_here
        if n_ok_here < MIN_RENDERED_PER_TEMPLATE:
            too_few.append(f"{name}: {n_ok_here} of {len(contexts)}")
    print(f"\n{n_pairs} template x conversation pairs: {n_ok} rendered identically, {n_err} rejected by both")
    assert not mismatches, f"{len(mismatches)} of {n_pairs} pairs differ:\n" + "\n".join(mismatches)
    assert n_ok >= MIN_PAIRS_RENDERED, f"{n_ok} pairs rendered, want at least {MIN_PAIRS_RENDERED}"
    assert not too_few, f"templates rendering fewer than {MIN_RENDERED_PER_TEMPLATE} conversations: {too_few}"


SNIPPET_CONTEXT = {
    "s": "Hello World",
    "u": "  Ünïcödé ß straße  ",
    "n": None,
    "i": 7,
    "f": 2.5,
    "t": True,
    "l": [3, 1, 2],
    "words": ["b", "A", "c", "a"],
    "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}},
    "people": [{"name": "Ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25}, {"name": "Cid", "age": 31}],
    "text": "line one\nline two\n\nline four",
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "yo"}],
}


# jinja2 prints these objects with a memory address; mla.cpp refuses to print them instead.
UNPRINTABLE = re.compile(r"<(generator|built-in method|function|list_reverseiterator|dict_\w*iterator)\b.* at 0x")

# Where mla.cpp knowingly differs from jinja2 it must fail loudly, never render something else.
KNOWN_DIVERGENCES = {
    "{{ 99999999999999999999 }}": "integers are 64-bit",
    "{{ 9223372036854775807 + 1 }}": "integers are 64-bit",
    "{{ 10 ** 20 }}": "integers are 64-bit",
    "{{ lipsum() }}": "random text generator not provided",
    "{{ l | random }}": "random choice not provided (non-deterministic)",
    "{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}": "self-containing objects are not printed",
}


def test_snippets_match_jinja2():
    snippets = json.loads((FIXTURES / "snippets.json").read_text(encoding="utf-8"))
    assert len(snippets) >= MIN_SNIPPETS, f"{len(snippets)} snippets, want at least {MIN_SNIPPETS}"
    env = reference_env()
    mismatches = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:  # one mla process per snippet
        results = list(pool.map(lambda src: mla_render_batch(src, [SNIPPET_CONTEXT])[0], snippets))
    for source, got in zip(snippets, results):
        want = reference_render(reference_compile(env, source), SNIPPET_CONTEXT)
        if source in KNOWN_DIVERGENCES or (want[0] == "ok" and UNPRINTABLE.search(want[1])):
            if got[0] != "error":
                mismatches.append(f"{source!r}: mla.cpp should refuse ({KNOWN_DIVERGENCES.get(source, 'unprintable object')}) "
                                  f"but rendered {got[1][:200]!r}")
            continue
        problem = compare(repr(source), want, got)
        if problem:
            mismatches.append(problem)
    print(f"\n{len(snippets)} snippets compared")
    assert not mismatches, f"{len(mismatches)} of {len(snippets)} snippets differ:\n" + "\n".join(mismatches)


def test_cli_plain_mode_prints_exactly_and_fails_with_one_line():
    with tempfile.TemporaryDirectory() as d:
        t = pathlib.Path(d) / "t.jinja"
        c = pathlib.Path(d) / "c.json"
        c.write_text(json.dumps({"name": "x"}), encoding="utf-8")
        t.write_text("Hi {{ name }}\n\n", encoding="utf-8")
        out = subprocess.run([mla_bin(), "template", "render", "--template", str(t), "--context", str(c)],
                             capture_output=True, check=False, timeout=30)
        assert out.returncode == 0
        assert out.stdout == b"Hi x\n"  # jinja2 drops one trailing newline; nothing is added
        t.write_text("line1\n{{ name | nosuchfilter }}", encoding="utf-8")
        out = subprocess.run([mla_bin(), "template", "render", "--template", str(t), "--context", str(c)],
                             capture_output=True, check=False, timeout=30)
        assert out.returncode == 1
        err = out.stderr.decode()
        assert err.count("\n") == 1 and "line 2, column" in err and "nosuchfilter" in err, err
