"""`mla bench`: the llama-bench-style tests (pp, tg, tg at depth), the weight bytes a decode token
reads checked against the file's tensor sizes as gguf-py reads them, the bandwidth probe, bad
options; and the `v2lite` synth preset's keys against DeepSeek-V2-Lite's published widths."""
import json
import os
from pathlib import Path

import pytest
from conftest import run_mla

from gguf import GGUFReader

ROOT = Path(__file__).resolve().parents[2]
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
SMALL = ["--n-embd", "64", "--n-ff", "128", "--q-lora-rank", "32", "--kv-lora-rank", "48", "--qk-nope", "16",
         "--qk-rope", "16", "--v-head", "16", "--n-ff-exp", "32", "--n-expert", "8", "--n-expert-used", "2",
         "--n-layer", "3"]


def mla(*args, **kw):
    return run_mla(MLA, *args, **kw)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "small.gguf"
    mla("gguf", "synth", "-o", out, "--type", "q8_0", "--seed", "5", *SMALL)
    return out


def field(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0] if f.types[0].name != "STRING" else bytes(f.parts[f.data[0]]).decode()


def test_bench_json_tests_and_weight_bytes(model):
    r = mla("bench", "-m", model, "-p", "32", "-n", "8", "-d", "0,40", "-r", "2", "-t", "2", "--json",
            "--membw-size", "8M", "--log-level", "warn")
    rows = json.loads(r.stdout)
    assert [x["test"] for x in rows] == ["pp32", "tg8", "tg8@d40"]
    for x in rows:
        assert len(x["samples_ts"]) == 2 and x["avg_ts"] > 0 and x["n_threads"] == 2

    # A decode token reads every matrix but the embedding table and the routed experts, plus
    # n_expert_used experts' gate, up and down rows in each MoE layer (one sequence: distinct).
    rd = GGUFReader(str(model))
    dense = sum(int(t.n_bytes) for t in rd.tensors if t.name != "token_embd.weight" and "_exps." not in t.name)
    per_layer = {}
    for t in rd.tensors:
        if "_exps." in t.name:
            layer = t.name.split(".")[1]
            per_layer[layer] = per_layer.get(layer, 0) + int(t.n_bytes)
    n_expert = field(rd, "deepseek2.expert_count")
    k = field(rd, "deepseek2.expert_used_count")
    assert len(per_layer) == 2  # 3 layers, 1 dense
    want = dense + sum(b // n_expert * k for b in per_layer.values())
    assert [x["n_depth"] for x in rows] == [0, 0, 40]
    for x in rows[1:]:
        assert x["weight_bytes_per_token"] == want
        assert x["membw_gbps"] > 0
        assert x["gbps"] == pytest.approx(want * x["avg_ts"] / 1e9, rel=1e-9)
    assert "weight_bytes_per_token" not in rows[0]
    assert rows[0]["model_size"] == sum(int(t.n_bytes) for t in rd.tensors)
    assert rows[0]["model_n_params"] == sum(int(t.n_elements) for t in rd.tensors)


def test_bench_table_and_membw(model):
    r = mla("bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "-t", "1", "--membw-size", "8M",
            "--log-level", "warn")
    lines = [l for l in r.stdout.splitlines() if l.startswith("| deepseek2")]
    assert [l.split("|")[5].strip() for l in lines] == ["pp16", "tg4"]
    assert "±" in lines[0] and "GB/s" in r.stdout
    r = mla("bench", "--membw", "--membw-size", "16M", "-t", "2", "--json")
    j = json.loads(r.stdout)
    assert j["membw_gbps"] > 0.1 and j["n_threads"] == 2


def test_bench_stage_profile(model):
    """--profile / the JSON stages: a decode token's bytes by forward stage add up to the file's
    matrices as gguf-py sizes them (the head: output.weight; the MLA kernels: attn_k_b and attn_v_b
    plus the cached rows), and the pool's regions are counted only when there are workers."""
    rd = GGUFReader(str(model))
    size = {t.name: int(t.n_bytes) for t in rd.tensors}
    by_suffix = {}
    for name, b in size.items():
        if name.startswith("blk."):
            suffix = name.split(".", 2)[2]
            by_suffix[suffix] = by_suffix.get(suffix, 0) + b
    for threads in (1, 2):
        r = mla("bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "-t", str(threads), "--json",
                "--membw-size", "8M", "--log-level", "warn")
        _, tg = json.loads(r.stdout)
        st = {s["stage"]: s for s in tg["stages"]}
        assert list(st) == ["embed", "attn_in", "attention", "attn_out", "router", "experts", "dense_ffn", "head"]
        assert st["head"]["bytes_per_token"] == size["output.weight"]
        assert st["attn_out"]["bytes_per_token"] == by_suffix["attn_output.weight"]
        assert st["router"]["bytes_per_token"] == by_suffix["ffn_gate_inp.weight"]
        # The MQA kernel reads W_UK and W_UV once per layer, and the context rows (a few per token).
        proj = by_suffix["attn_k_b.weight"] + by_suffix["attn_v_b.weight"]
        assert proj < st["attention"]["bytes_per_token"] < proj + 3 * 64 * 1024
        # The stages count the matrices they read (not the norm vectors and the router bias, nor
        # the embedding table); with the latent rows taken out, they are weight_bytes_per_token.
        vectors = sum(int(t.n_bytes) for t in rd.tensors if len(t.shape) == 1)
        matrices = sum(s["bytes_per_token"] for s in tg["stages"]) - (st["attention"]["bytes_per_token"] - proj)
        assert vectors > 0 and matrices + vectors == tg["weight_bytes_per_token"]
        assert all(s["seconds_per_token"] >= 0 for s in tg["stages"]) and st["head"]["seconds_per_token"] > 0
        assert (tg["pool_regions_per_token"] > 0) == (threads > 1)
        # The stages' regions are the pool's, but for those outside them (none in a decode step).
        assert sum(s["regions_per_token"] for s in tg["stages"]) == pytest.approx(tg["pool_regions_per_token"])
    r = mla("bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "2", "--profile", "--membw-size", "8M",
            "--log-level", "warn")
    assert "tg4:" in r.stdout and "| head |" in r.stdout and "thread-pool regions" in r.stdout


@pytest.mark.parametrize("args, msg", [
    (["-r", "0"], "-r must be >= 1"),
    (["-p", "0", "-n", "0"], "no tests"),
    (["-d", "-5"], "-d values must be >= 0"),
    (["-p", "100000", "-n", "0"], "the model allows"),
])
def test_bench_bad_options(model, args, msg):
    r = mla("bench", "-m", model, *args, check=False)
    assert r.returncode != 0
    err = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(err) == 1 and err[0].startswith("mla: error: bench:") and msg in err[0], r.stderr


def test_bench_prefix_reuse_phases(model, tmp_path):
    """--prefix-reuse: the shared prefix's whole blocks come from the KV cache, host RAM, then disk
    after a restart; the cold requests find nothing; the directory given keeps the blocks."""
    r = mla("bench", "-m", model, "--prefix-reuse", "100,20", "-r", "2", "-t", "1", "--json",
            "--kv-cache-dir", tmp_path)
    out = json.loads(r.stdout)
    assert out["n_prefix"] == 100 and out["block_size"] == 16
    phases = {p["phase"].split(" ")[0] + p["phase"].split(" ")[1] if p["phase"] != "cold" else "cold": p
              for p in out["phases"]}
    assert [len(p["samples_seconds"]) for p in phases.values()] == [2, 2, 2, 2]
    assert phases["cold"]["tokens_cached"] == 0 and phases["cold"]["tokens_loaded"] == 0
    assert phases["tier0"]["tokens_cached"] == 2 * 96 and phases["tier0"]["tokens_loaded"] == 0
    assert phases["tier1"]["tokens_cached"] == 2 * 96 and phases["tier1"]["tokens_loaded"] == 2 * 96
    assert phases["tier2"]["tokens_cached"] == 2 * 96 and phases["tier2"]["tokens_loaded"] == 2 * 96
    assert out["disk_bytes_read"] > 0
    assert list(tmp_path.glob("*/*.blk"))


def test_bench_without_model():
    r = mla("bench", check=False)
    assert r.returncode != 0 and "give -m FILE" in r.stderr


def test_v2lite_preset_keys(tmp_path):
    # Widths kept small where a test needs speed; the preset's other values are DeepSeek-V2-Lite's
    # (config.json: 16 heads, kv_lora 512, qk_nope 128 + rope 64, v 128, 2 shared experts, top-6,
    # softmax scoring, 1 dense layer, YaRN factor 40 over 4096, mscale_all_dim 0.707).
    out = tmp_path / "v2lite.gguf"
    mla("gguf", "synth", "-o", out, "--preset", "v2lite", "--n-embd", "64", "--n-ff", "64", "--n-ff-exp", "32",
        "--n-expert", "8", "--n-vocab", "300", "--q-lora-rank", "32", "--type", "f32")
    rd = GGUFReader(str(out))
    a = "deepseek2."
    assert field(rd, a + "block_count") == 4
    assert field(rd, a + "attention.head_count") == 16
    assert field(rd, a + "attention.kv_lora_rank") == 512
    assert field(rd, a + "attention.key_length_mla") == 192
    assert field(rd, a + "attention.value_length_mla") == 128
    assert field(rd, a + "rope.dimension_count") == 64
    assert field(rd, a + "expert_used_count") == 6
    assert field(rd, a + "expert_shared_count") == 2
    assert field(rd, a + "expert_gating_func") == 1
    assert field(rd, a + "leading_dense_block_count") == 1
    assert field(rd, a + "rope.scaling.factor") == 40
    assert field(rd, a + "rope.scaling.original_context_length") == 4096
    assert field(rd, a + "rope.scaling.yarn_log_multiplier") == pytest.approx(0.0707, rel=1e-6)
    assert "deepseek2.expert_weights_norm" not in rd.fields or field(rd, a + "expert_weights_norm") is False


def test_bench_no_warmup_runs_each_test_once_per_repetition(model):
    """The dispatch trace logs every forward's first layer: a pp16 test is one prefill, so -r 2
    gives three (the untimed warm-up, then two) and, with --no-warmup, two."""
    def prefills(*extra):
        r = mla("bench", "-m", model, "-p", "16", "-n", "0", "-r", "2", "-t", "1", "--membw-size", "8M",
                "--trace", "dispatch:1000", *extra)
        return sum("dispatch layer=blk.0 " in line and "total_toks=16" in line for line in r.stderr.splitlines())

    assert prefills() == 3
    assert prefills("--no-warmup") == 2
