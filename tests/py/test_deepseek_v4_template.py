"""models/templates/deepseek-v4.jinja against vLLM's DeepSeek-V4 prompt encoder.

DeepSeek ships V4's prompt format as Python (encoding_dsv4.py), not as a Jinja template. The
prompts in tests/fixtures/chat/deepseek-v4-prompts.json were written by vLLM's own DeepSeek-V4
tokenizer (tools/vllm-ref/gen_dsv4_prompts.py, vLLM pinned in tools/vllm-ref/setup.sh) for
conversations with and without tools, tool results, reasoning, developer messages and every
thinking / reasoning_effort / drop_thinking switch. The template must reproduce each prompt
exactly, rendered by mla.cpp's Jinja engine and by jinja2 as transformers configures it.
"""
import json
import pathlib

from test_chat_templates import mla_render_batch, reference_compile, reference_env, reference_render

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "models" / "templates" / "deepseek-v4.jinja"
FIXTURE = ROOT / "tests" / "fixtures" / "chat" / "deepseek-v4-prompts.json"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

# What the fixture must cover, so that a shrunken fixture fails rather than passes by testing less.
MIN_CASES = 98
MIN_CONVERSATIONS = 14


def contexts(doc, add_generation_prompt=True):
    out = []
    for case in doc["cases"]:
        conv = doc["conversations"][case["conversation"]]
        ctx = dict(case["chat_template_kwargs"])
        ctx.update(messages=conv["messages"], add_generation_prompt=add_generation_prompt, bos_token=BOS,
                   eos_token=EOS)
        if conv["tools"]:
            ctx["tools"] = conv["tools"]
        out.append(ctx)
    return out


def label(case):
    return f"{case['conversation']} {json.dumps(case['chat_template_kwargs'])}"


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at char {i}: want {a[max(0, i - 60):i + 60]!r}, got {b[max(0, i - 60):i + 60]!r}"


def load():
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert len(doc["cases"]) >= MIN_CASES and len(doc["conversations"]) >= MIN_CONVERSATIONS
    return doc


def test_template_renders_vllms_prompts():
    doc = load()
    source = TEMPLATE.read_text(encoding="utf-8")
    ctxs = contexts(doc)
    mla = mla_render_batch(source, ctxs)
    compiled = reference_compile(reference_env(), source)
    problems = []
    for case, ctx, got in zip(doc["cases"], ctxs, mla):
        want = case["prompt"]
        for engine, result in (("mla", got), ("jinja2", reference_render(compiled, ctx))):
            if result[0] != "ok":
                problems.append(f"{label(case)}: {engine} failed: {result[1][:300]}")
            elif result[1] != want:
                problems.append(f"{label(case)}: {engine} differs {first_difference(want, result[1])}")
    assert not problems, f"{len(problems)} renders differ from vLLM's:\n" + "\n".join(problems)


def test_without_generation_prompt_the_opener_is_left_out():
    """vLLM always opens the assistant turn after a final user turn; with add_generation_prompt
    false the template stops before that opener and is otherwise the same."""
    doc = load()
    source = TEMPLATE.read_text(encoding="utf-8")
    ctxs = contexts(doc, add_generation_prompt=False)
    n_cut = 0
    for case, got in zip(doc["cases"], mla_render_batch(source, ctxs)):
        want = case["prompt"]
        last_role = doc["conversations"][case["conversation"]]["messages"][-1]["role"]
        if last_role in ("user", "system", "tool"):
            opener = next(o for o in ("<｜Assistant｜><think>", "<｜Assistant｜></think>") if want.endswith(o))
            want = want[: -len(opener)]
            n_cut += 1
        assert got == ("ok", want), f"{label(case)}: {got[1][:200]!r}"
    assert n_cut >= 70


def test_bad_messages_are_refused():
    source = TEMPLATE.read_text(encoding="utf-8")
    base = {"bos_token": BOS, "eos_token": EOS, "add_generation_prompt": True}
    bad = [
        [{"role": "narrator", "content": "x"}],
        [{"role": "user", "content": "x"}, {"role": "developer", "content": ""}],
        [{"role": "user", "content": [{"type": "audio", "data": "x"}]}],
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}],
    ]
    results = mla_render_batch(source, [dict(base, messages=m) for m in bad])
    compiled = reference_compile(reference_env(), source)
    for messages, got in zip(bad, results):
        assert got[0] == "error", f"{messages}: rendered {got[1][:200]!r}"
        assert reference_render(compiled, dict(base, messages=messages))[0] == "error", messages
