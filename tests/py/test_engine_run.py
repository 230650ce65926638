"""`mla run` through the serving engine: --batch FILE runs prompts concurrently and gives each the
tokens it gets alone; KV cache options and the start-up capacity line; --help-env and the warning
for an unknown MLA_* variable; the dispatch trace through MLA_TRACE."""
import json
import os
import re
from pathlib import Path

import pytest
from conftest import run_mla

ROOT = Path(__file__).resolve().parents[2]
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
SMALL = ["--n-embd", "64", "--n-ff", "128", "--q-lora-rank", "32", "--kv-lora-rank", "48", "--qk-nope", "16",
         "--qk-rope", "16", "--v-head", "16", "--n-ff-exp", "32", "--n-expert", "8", "--n-expert-used", "2"]


def mla(*args, **kw):
    return run_mla(MLA, *args, **kw)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("engine") / "small.gguf"
    mla("gguf", "synth", "-o", out, "--type", "q8_0", "--seed", "13", *SMALL)
    return out


PROMPTS = [[1, 2, 3], [7] * 1, list(range(10, 50)), [5, 9, 200, 31, 7], list(range(100, 117))]


def single(model, prompt, n, *extra):
    r = mla("run", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", n, "--json", "--ignore-eos",
            "-t", "2", *extra)
    return json.loads(r.stdout)["continuation"]


def test_batch_file_gives_every_prompt_its_solo_tokens(model, tmp_path):
    batch = tmp_path / "prompts.txt"
    lines = ["# token ids or JSON objects", ",".join(map(str, PROMPTS[0])), " ".join(map(str, PROMPTS[1])), ""]
    lines += [json.dumps({"id": f"j{i}", "tokens": p, "max_tokens": 5 + i}) for i, p in enumerate(PROMPTS[2:])]
    batch.write_text("\n".join(lines) + "\n")
    r = mla("run", "-m", model, "--batch", batch, "-n", "6", "--json", "--ignore-eos", "-t", "2",
            "--max-num-batched-tokens", "16", "--block-size", "4")
    res = json.loads(r.stdout)
    got = {x["id"]: x for x in res["requests"]}
    assert sorted(got) == ["j0", "j1", "j2", "r0", "r1"]
    assert got["r0"]["continuation"] == single(model, PROMPTS[0], 6)
    assert got["r1"]["continuation"] == single(model, PROMPTS[1], 6)
    for i, p in enumerate(PROMPTS[2:]):
        assert got[f"j{i}"]["continuation"] == single(model, p, 5 + i), i
        assert got[f"j{i}"]["finish_reason"] == "length"
    assert res["n_sequences"] == 5
    assert res["decode_tokens_per_second"] > 0
    # auto: decodes go down MQA, prompt chunks down the prefill path the engine announces.
    prefill = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)", r.stderr).group(1)
    assert res["tokens_mqa"] > 0 and (res["tokens_mha"] > 0) == (prefill == "mha")
    # The text form lists every request and the throughput.
    text = mla("run", "-m", model, "--batch", batch, "-n", "6", "--ignore-eos", "-t", "2").stdout
    assert re.search(r"^\[j2\] 7 tokens \(length\): (\d+ ){6}\d+$", text, re.MULTILINE)
    assert re.search(r"^decode:  \d+ tokens in .* tokens/s, 5 sequences\)$", text, re.MULTILINE)


def test_kv_cache_options_and_capacity_line(model):
    # Latent row 48 + 16 = 64 values, 2 layers: F16 128 B/token/layer, Q8_0 2 blocks x 34 = 68.
    r = mla("run", "-m", model, "--tokens", "1,2,3", "-n", "2", "--kv-cache-tokens", "100", "--block-size", "8")
    assert "kv cache: F16, block 8, 13 blocks = 104 tokens, 128 B/token/layer x 2 layers = 256 B/token" in r.stderr
    # 1 MiB / (68 * 2 * 16 bytes per block) = 481.9 → 481 blocks.
    r = mla("run", "-m", model, "--tokens", "1,2,3", "-n", "2", "--kv-cache-dtype", "q8_0",
            "--kv-cache-memory", "1M")
    assert "kv cache: Q8_0, block 16, 481 blocks = 7696 tokens, 68 B/token/layer x 2 layers = 136 B/token" in r.stderr
    # Every dtype runs (the capacity line names it) and gives the F32 cache's greedy tokens on a
    # short run of this model and prompt (a cache whose rows are wrong would not).
    outs = {}
    for d in ("f32", "f16", "bf16", "q8_0"):
        r = mla("run", "-m", model, "--tokens", ",".join(map(str, PROMPTS[3])), "-n", 8, "--json", "--ignore-eos",
                "-t", "2", "--kv-cache-dtype", d)
        assert f"kv cache: {d.upper()}, " in r.stderr
        outs[d] = json.loads(r.stdout)["continuation"]
    assert len(outs["f32"]) == 8
    for d in ("f16", "bf16", "q8_0"):
        assert outs[d] == outs["f32"], d
    bad = mla("run", "-m", model, "--tokens", "1", "--kv-cache-dtype", "q4_k", check=False)
    assert bad.returncode != 0 and "unknown kv cache dtype 'q4_k'" in bad.stderr
    bad = mla("run", "-m", model, "--tokens", ",".join(["1"] * 40), "--kv-cache-tokens", "32", check=False)
    assert bad.returncode != 0 and "the prompt has 40 tokens; the limit is 31" in bad.stderr


def test_prefix_cache_and_preemption_keep_tokens(model, tmp_path):
    shared = list(range(200, 240))
    batch = tmp_path / "shared.txt"
    reqs = [shared + [i, i + 1] for i in range(6)]
    batch.write_text("\n".join(",".join(map(str, p)) for p in reqs) + "\n")
    # 10 blocks of 16 tokens for six 50-token sequences: they cannot all run at once.
    r = mla("run", "-m", model, "--batch", batch, "-n", "8", "--json", "--ignore-eos", "-t", "2",
            "--kv-cache-tokens", "160", "--max-num-batched-tokens", "32")
    res = json.loads(r.stdout)
    assert res["prefix_cache_hit_rate"] > 0
    assert res["preemptions"] >= 1  # the point of the small cache: a sequence was preempted and recomputed
    for x in res["requests"]:
        i = int(x["id"][1:])
        assert x["continuation"] == single(model, reqs[i], 8), x["id"]


def test_help_env_unknown_variable_and_trace(model):
    r = mla("run", "--help-env")
    assert "MLA_TRACE" in r.stdout and "MLA_LOG_LEVEL" in r.stdout
    r = mla("run", "-m", model, "--tokens", "1", "-n", "2", env={"MLA_TRCE": "dispatch:1", "MLA_TRACE": "dispatch:1"})
    assert "unknown environment variable MLA_TRCE is ignored (did you mean MLA_TRACE?" in r.stderr
    # A 1-token prompt under auto with the F32 kernels (the default): a prompt token, so the
    # prefill path (MHA at these widths), as every chunking of a longer prompt would send it.
    assert "dispatch layer=blk.0 is_sparse=0 num_mqa=0 num_mha=1 total_toks=1 policy=auto" in r.stderr
    assert r.stderr.count("dispatch layer=blk.0") == 1
    # With the exact kernels the paths agree, and auto goes by the chunk's length: one token is a
    # decode, MQA.
    r = mla("run", "-m", model, "--tokens", "1", "-n", "2", "--trace", "dispatch:1", "--attention-precision", "exact")
    assert "dispatch layer=blk.0 is_sparse=0 num_mqa=1 num_mha=0 total_toks=1 policy=auto" in r.stderr
    r = mla("run", "-m", model, "--tokens", "1", "-n", "2", "--log-level", "warn", "--trace", "dispatch:1")
    assert "dispatch layer=" not in r.stderr and "kv cache:" not in r.stderr
    bad = mla("run", "-m", model, "--tokens", "1", "--log-level", "loud", check=False)
    assert bad.returncode != 0 and "unknown log level 'loud'" in bad.stderr
