"""`mla gguf synth` / `mla gguf convert-mla-layout` / `mla gguf inspect` / `mla run` end to end
on small synthetic deepseek2 files (one with the DeepSeek-V2 vocabulary)."""
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla

import gguf

ROOT = Path(__file__).resolve().parents[2]
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
VOCAB = ROOT / "tests" / "fixtures" / "vocab" / "ggml-vocab-deepseek-llm.gguf"


def mla(*args, **kw):
    return run_mla(MLA, *args, **kw)


SMALL = ["--n-embd", "64", "--n-ff", "128", "--q-lora-rank", "32", "--kv-lora-rank", "64", "--qk-nope", "16",
         "--qk-rope", "16", "--v-head", "16", "--n-ff-exp", "32", "--n-expert", "8", "--n-expert-used", "2"]


def test_synth_with_deepseek_v2_vocab_runs_and_inspects(tmp_path):
    out = tmp_path / "v2vocab.gguf"
    mla("gguf", "synth", "-o", out, "--vocab", VOCAB, "--type", "q8_0", "--seed", "5", *SMALL)
    # The vocabulary is the vocab file's, token for token (gguf-py needs ~30 s per file of this
    # size, so the files are read back with `mla gguf inspect --json --full`, tested against gguf-py).
    def keys(path):
        md = json.loads(mla("gguf", "inspect", path, "--json", "--full").stdout)["metadata"]
        return {k["key"]: k["value"] for k in md}, json.loads(mla("gguf", "inspect", path, "--json").stdout)["tensors"]
    got, tensors = keys(out)
    want, _ = keys(VOCAB)
    tok_keys = sorted(k for k in want if k.startswith("tokenizer."))
    assert tok_keys and all(got[k] == want[k] for k in tok_keys)
    n_vocab = len(want["tokenizer.ggml.tokens"])
    assert got["deepseek2.vocab_size"] == n_vocab
    t = {x["name"]: x for x in tensors}
    assert t["token_embd.weight"]["ne"] == [64, n_vocab] and t["token_embd.weight"]["type"] == "Q8_0"
    assert t["blk.0.attn_k_b.weight"]["ne"] == [16, 64, 4]
    assert t["blk.0.attn_v_b.weight"]["ne"] == [64, 16, 4]

    info = mla("gguf", "inspect", out).stdout
    assert "derived hyper-parameters (deepseek2):" in info
    assert re.search(r"qk_nope / qk_rope / v_head\s+16 / 16 / 16", info)
    assert re.search(r"latent cache row\s+80 floats", info)
    assert f"vocabulary                   {n_vocab}" in info

    res = json.loads(mla("run", "-m", out, "--tokens", "1,2,3,4,5,6,7,8", "-n", "8", "--json", "--ignore-eos").stdout)
    assert len(res["continuation"]) == 8
    assert all(0 <= x < n_vocab for x in res["continuation"])
    assert res["prefill_tokens_per_second"] > 0 and res["decode_tokens_per_second"] > 0
    # --warmup: an untimed request first; the result and the counts are the real request's alone.
    warm = json.loads(mla("run", "-m", out, "--tokens", "1,2,3,4,5,6,7,8", "-n", "8", "--json", "--ignore-eos",
                          "--warmup").stdout)
    assert warm["continuation"] == res["continuation"]
    assert warm["prefill_tokens"] == 8 and warm["decode_tokens"] == 7
    assert "do not go together" in mla("run", "-m", out, "--tokens", "1,2", "--warmup", "--dump-logits",
                                       str(tmp_path / "l.bin"), check=False).stderr
    text = mla("run", "-m", out, "--tokens", "1,2,3", "-n", "4", "--ignore-eos").stdout
    assert re.search(r"^continuation ids: \d+ \d+ \d+ \d+$", text, re.MULTILINE)
    assert re.search(r"^prefill: 3 tokens in .* tokens/s\)$", text, re.MULTILINE)
    assert re.search(r"^decode:  3 tokens in .* tokens/s\)$", text, re.MULTILINE)


def test_paths_and_layouts_agree_through_cli(tmp_path):
    split = tmp_path / "split.gguf"
    fused = tmp_path / "fused.gguf"
    mla("gguf", "synth", "-o", split, "--type", "q4_k", "--rope-scaling", "yarn", "--seed", "9", *SMALL)
    mla("gguf", "convert-mla-layout", split, fused, "--layout", "fused")
    names = {x.name for x in gguf.GGUFReader(str(fused)).tensors}
    assert "blk.0.attn_kv_b.weight" in names and "blk.0.attn_k_b.weight" not in names
    logits = {}
    for f in (split, fused):
        for p in ("mha", "mqa"):
            dump = tmp_path / f"{f.stem}-{p}.f32"
            mla("run", "-m", f, "--tokens", "5,9,200,31,7", "-n", "4", "--mla-path", p, "--dump-logits", dump,
                "--kv-cache-dtype", "f32", "--ignore-eos")
            logits[(f.stem, p)] = np.fromfile(dump, dtype="<f4")
    ref = logits[("split", "mha")]
    assert ref.size == 8 * 512
    for k, v in logits.items():
        assert np.abs(v - ref).max() <= 1e-5 * np.abs(ref).max(), k
    assert np.array_equal(logits[("split", "mqa")], logits[("fused", "mqa")])


def test_synth_json_config_and_errors(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"n_layer": 3, "q_lora_rank": 0, "gating": "softmax", "types": {"ffn_exps": "q4_0"},
                               "layout": "fused", "n_embd": 64, "n_ff": 64, "kv_lora_rank": 32, "qk_nope": 16,
                               "qk_rope": 8, "v_head": 16, "n_ff_exp": 32}))
    out = tmp_path / "j.gguf"
    mla("gguf", "synth", "-o", out, "--config", cfg, "--n-layer", "2")  # flags override the file
    r = gguf.GGUFReader(str(out))
    assert int(r.fields["deepseek2.block_count"].contents()) == 2
    names = {x.name: x for x in r.tensors}
    assert "blk.0.attn_q.weight" in names and "blk.0.attn_kv_b.weight" in names
    assert names["blk.1.ffn_up_exps.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_0
    bad = mla("gguf", "synth", "-o", tmp_path / "b.gguf", "--gating", "relu", check=False)
    assert bad.returncode != 0 and "gating 'relu' is not softmax or sigmoid" in bad.stderr
    bad = mla("run", "-m", out, "--tokens", "1,x", check=False)
    assert bad.returncode != 0 and "'x' is not a non-negative token id" in bad.stderr
    bad = mla("run", "-m", out, "--tokens", "999999", check=False)
    assert bad.returncode != 0 and "prompt token 999999 at position 0 is out of range" in bad.stderr


def other(path):
    return "mqa" if path == "mha" else "mha"


def step0_rel(primary, other_run, n):
    """The largest over the prompt's rows of max|p - o| / max|p|, in float64 (what --verify-paths
    reports for a step: path_rel_diff per logits row, the largest row)."""
    p, o = primary[:n].astype(np.float64), other_run[:n].astype(np.float64)
    return max(float(np.abs(p[i] - o[i]).max() / np.abs(p[i]).max()) for i in range(n))


@pytest.mark.parametrize("precision", ["f32", "exact"], ids=["f32-kernels", "exact-kernels"])
@pytest.mark.parametrize("wtype", ["f32", "q4_k"])
def test_verify_paths_step0_is_the_forced_runs_difference(tmp_path, wtype, precision):
    """--verify-paths reruns each step end to end down the other paths: at step 0 (the prompt, empty
    cache) its logits difference is exactly that of two forced-path runs' --dump-logits, for each
    policy, and the primary run's own logits are untouched by the rerun. It passes or fails by the
    doctor's tolerances, with the exit status to match. With the F32 attention kernels
    (--attention-precision f32) and F32 weights the paths' logits differ by ~1e-7; with the exact
    kernels (the default) they are equal, and verify reports 0."""

    def mla(*args, **kw):
        return run_mla(MLA, *args, **kw)

    model = tmp_path / f"{wtype}.gguf"
    mla("gguf", "synth", "-o", model, "--type", wtype, "--seed", "9", *SMALL)
    prompt = [5, 9, 200, 31, 7, 11, 64]
    n = len(prompt)
    base = ["run", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", "3", "--ignore-eos", "-t", "2",
            "--attention-precision", precision]
    forced = {}
    for p in ("mha", "mqa"):
        dump = tmp_path / f"{p}.f32"
        mla(*base, "--mla-path", p, "--dump-logits", dump)
        forced[p] = np.fromfile(dump, dtype="<f4").reshape(-1, 512)
    for policy in ("mha", "mqa", "auto"):
        dump = tmp_path / f"verify-{policy}.f32"
        r = mla(*base, "--mla-path", policy, "--verify-paths", "--json", "--dump-logits", dump, check=False)
        res = json.loads(r.stdout)
        v = res["verify_paths"]
        primary = policy
        if policy == "auto":  # the prompt goes where the model's auto sends prefill chunks
            primary = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)",
                                r.stderr).group(1)
        got = np.fromfile(dump, dtype="<f4").reshape(-1, 512)
        # auto decodes down MQA whatever its prefill took, so past the prompt only the forced mqa
        # run is the same computation.
        rows = n if policy == "auto" else len(got)
        assert np.array_equal(got[:rows], forced[primary][:rows]), policy
        assert len(v["steps"]) == 3 and v["steps"][0]["tokens"] == n  # the prompt, then 2 decode steps
        assert v["steps"][0]["logits_rel"] == step0_rel(forced[primary], forced[other(primary)], n), (policy, v)
        if precision == "exact":  # the exact kernels: the paths give the same bits
            assert v["max_logits_rel"] == 0 and v["max_layer_rel"] == 0 and v["ok"], v
        elif wtype == "f32":  # a difference there is, and it is the forced runs' to the last bit
            assert v["steps"][0]["logits_rel"] > 0
        assert re.search(rf"verify-paths step=0 tokens={n} policy={policy} .* logits_rel=", r.stderr)
        assert len(v["layer_rel"]) == 2 and v["max_logits_rel"] == max(s["logits_rel"] for s in v["steps"])
        ok = v["greedy_agree"] and v["max_logits_rel"] <= v["tol_logits"] and v["max_layer_rel"] <= v["tol_layer"]
        assert v["ok"] == ok and (r.returncode == 0) == ok, (policy, v)
        assert v["verdict"].startswith("ok" if ok else "FAIL"), v


def test_auto_is_one_decision_for_run_perplexity_and_doctor(tmp_path):
    """`auto` is decided by the model alone, so the engine (`mla run`), `mla perplexity` and the
    doctor's single-sequence runs send a prefill down the same path, and each reports the tokens
    its model counted per path."""
    tiny = ROOT / "models" / "tiny-q8_0.gguf"
    r = mla("run", "-m", tiny, "--tokens", ",".join(map(str, range(10, 18))), "-n", "2", "--json", "--ignore-eos",
            "-t", "2")
    prefill = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)", r.stderr).group(1)
    res = json.loads(r.stdout)
    assert res[f"tokens_{prefill}"] == 8 + (prefill == "mqa") and res[f"tokens_{other(prefill)}"] == (prefill == "mha")
    text = tmp_path / "text.txt"
    text.write_text("A function returns a value, and a class groups data with the methods that work on it. " * 8)
    ppl = json.loads(mla("perplexity", "-m", tiny, "-f", text, "-c", "32", "--chunks", "2", "-t", "2", "--json").stdout)
    assert ppl[f"tokens_{prefill}"] == 64 and ppl[f"tokens_{other(prefill)}"] == 0
    d = run_mla(MLA, "doctor", tiny, "--json", "--no-layout", "-t", "2", "--n-greedy", "2", check=False)
    rep = json.loads(d.stdout)
    runs = {p["name"]: p for p in rep["paths"]}
    # chunks of 3 (a last piece of 1 and each greedy step are decodes: MQA)
    assert runs["chunked prefill (3)"]["tokens_" + prefill] > 0
    assert (runs["chunked prefill (3)"]["tokens_mha"] > 0) == (prefill == "mha")
    assert runs["mqa"]["tokens_mha"] == 0 and runs["1-token prefill"]["tokens_mha"] == 0
    steps = "\n".join(rep["dispatch"])
    assert re.search(rf"step 1: model sent .* total_toks=\d+ is_sparse=0 policy=auto \(query \d+->{prefill}\)", steps)
