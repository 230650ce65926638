"""`mla doctor` on the embedded model, on copies of it broken on purpose (made here with gguf-py,
tests/py/broken_models.py), on the YaRN reference fixture with a key removed, and on a random
synth model; `mla serve --self-check`.

What each broken copy must be caught by follows from how it was broken, not from the doctor:
a shape the loader must reject is a load error; a break that is the same on every path (heads
permuted, absorbed weights rescaled with the latent norm compensating) cannot be a path
disagreement and must be named by the head-order or overflow check; a key whose absence changes
RoPE is a keys finding.
"""
import json
import re
import subprocess

import broken_models as bm
import pytest
from conftest import REPO

import gguf

from server_util import Server

TINY = REPO / "models" / "tiny-q8_0.gguf"
YARN = REPO / "tests" / "fixtures" / "reference" / "deepseek-v2-lite-tiny" / "model-f32.gguf"
GOLDEN = REPO / "tests" / "fixtures" / "tiny" / "golden.json"


def doctor(mla_bin, path, *args):
    p = subprocess.run([mla_bin, "doctor", str(path), "--json", "-t", "2", *args],  # noqa: PLW1510 (the caller checks the return code)
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    assert (p.returncode == 0) == (rep["verdict"]["status"] == "ok"), rep["verdict"]
    return rep


def statuses(rep):
    return {c["name"]: c["status"] for c in rep["checks"]}


def paths_by_name(rep):
    return {p["name"]: p for p in rep["paths"]}


@pytest.fixture(scope="module")
def healthy(mla_bin):
    return doctor(mla_bin, TINY)


def test_default_model_is_ok(healthy):
    rep = healthy
    assert rep["verdict"]["status"] == "ok" and rep["verdict"]["failed"] == []
    assert rep["file"]["architecture"] == "deepseek2"
    assert rep["file"]["mla_layout"].startswith("split")
    # The MTP block as gguf-py reads the file: nextn_predict_layers and the blk.N.nextn.* tensors
    r = gguf.GGUFReader(TINY)
    n_nextn = r.fields["deepseek2.nextn_predict_layers"].contents()
    n_mtp = sum(".nextn." in t.name for t in r.tensors)
    assert rep["file"]["indexer"].startswith("n/a")
    assert rep["file"]["mtp"] == f"present ({n_nextn} nextn layer(s), {n_mtp} tensors)"
    st = statuses(rep)
    for name in ("load", "keys", "heads", "overflow", "paths", "output"):
        assert st[name] == "ok", (name, rep["checks"])
    paths = paths_by_name(rep)
    for name in ("mqa", "1-token prefill", "chunked prefill (3)", "fused layout, mha", "fused layout, mqa"):
        p = paths[name]
        assert p["status"] == "ok" and p["greedy_agree"], p
        assert len(p["layer_rel"]) == 3 and max(p["layer_rel"]) < 1e-4, p
    assert paths["dense vs sparse"]["status"] == "n/a"
    # Absent keys as gguf-py reads the file: every reported key is absent there, and the known
    # RoPE scaling keys the tiny model lacks are all reported with the loader's defaults.
    fields = gguf.GGUFReader(TINY).fields
    absent = {k["key"]: k["default"] for k in rep["file"]["absent_keys"]}
    assert absent and not any(k in fields for k in absent)
    assert absent["deepseek2.rope.scaling.type"] == '""' and absent["deepseek2.rope.scaling.factor"] == "1"
    assert "deepseek2.attention.kv_lora_rank" in fields and "deepseek2.attention.kv_lora_rank" not in absent
    # The greedy tokens are transformers' (tests/fixtures/tiny/golden.json).
    golden = json.loads(GOLDEN.read_text())["cases"][0]
    assert golden["prompt_text"] == "Hello"
    assert rep["canaries"][0]["tokens"] == golden["prompt_ids"]
    greedy = [g["id"] for g in rep["output"]["greedy"]]
    assert greedy == golden["continuation_ids"][:len(greedy)]
    # Scheduling: a multi-token prompt is one prefill sequence (down the model's auto prefill
    # path, all its tokens on it, as the model counted them), decode steps and a 1-token prompt go
    # down MQA.
    lines = "\n".join(rep["dispatch"])
    assert re.search(r"step 1: model sent (tokens_mqa=0 tokens_mha=4|tokens_mqa=4 tokens_mha=0) total_toks=4 "
                     r"is_sparse=0 policy=auto \(query 4->(mha|mqa)\)", lines), lines
    assert "tokens_mqa=1 tokens_mha=0 total_toks=1 is_sparse=0 policy=auto (query 1->mqa)" in lines


def test_text_report(mla_bin):
    p = subprocess.run([mla_bin, "doctor", str(TINY), "-t", "2", "--no-layout", "--n-greedy", "4"],  # noqa: PLW1510 (the caller checks the return code)
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for section in ("\nFile\n", "Numerics of the absorbed path", "Path agreement", "Scheduling", "\nOutput\n"):
        assert section in out
    assert "fused layout, mha" in out and "skipped (--no-layout)" in out
    assert out.rstrip().endswith("verdict: ok")


def test_q4_k_model_is_ok(mla_bin):
    # Q4_K weights take Q8_K activations: a flipped rounding there moves a later layer by ~1e-3,
    # which is not a path disagreement.
    rep = doctor(mla_bin, REPO / "models" / "tiny-q4_k.gguf", "--no-layout", "--n-greedy", "4")
    assert rep["verdict"]["status"] == "ok", rep["verdict"]


def test_quantized_cache_paths_agree(mla_bin):
    # A Q8_0 latent cache rounds each row to 127 levels per block: the paths' 1e-7 differences
    # may flip one rounding, which is not a disagreement.
    rep = doctor(mla_bin, TINY, "--no-layout", "--kv-cache-dtype", "q8_0", "--n-greedy", "4")
    assert rep["kv_dtype"] == "Q8_0"
    assert statuses(rep)["paths"] == "ok", rep["checks"]
    assert rep["verdict"]["status"] == "ok", rep["verdict"]


@pytest.fixture(scope="module")
def broken_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("broken")


# (maker, source, failing check, words its line must contain, checks that must still pass)
BREAKS = {
    "heads_reversed": (bm.heads_reversed, TINY, "heads", ["attn_k_b heads look permuted", "reversed"],
                       ["load", "paths"]),
    "kb_vb_exchanged": (bm.kb_vb_exchanged, TINY, "load", ["attn_k_b", "expected shape"], []),
    "absorbed_scaled": (bm.absorbed_scaled, TINY, "overflow", ["F16", "q·W_UK"], ["paths", "output", "heads"]),
    "wrong_kv_lora_rank": (bm.wrong_kv_lora_rank, TINY, "load", ["kv_lora_rank"], []),
    "yarn_without_type": (lambda s, d: bm.drop_key(s, d, "deepseek2.rope.scaling.type"), YARN, "keys",
                          ["rope.scaling.type is absent", "not applied"], ["paths"]),
    "yarn_without_factor": (lambda s, d: bm.drop_key(s, d, "deepseek2.rope.scaling.factor"), YARN, "keys",
                            ["rope.scaling.factor is absent", "no-op"], ["paths"]),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_broken_copy_is_caught(mla_bin, broken_dir, name):
    maker, src, check, words, still_ok = BREAKS[name]
    path = maker(src, broken_dir / f"{name}.gguf")
    rep = doctor(mla_bin, path, "--no-layout")
    assert rep["verdict"]["status"] == "FAIL", rep["verdict"]
    assert check in rep["verdict"]["failed"], rep["verdict"]
    line = rep["verdict"]["line"]
    for w in words:
        assert w in line, (w, line)
    st = statuses(rep)
    for name_ok in still_ok:
        assert st[name_ok] == "ok", (name_ok, rep["checks"])


def test_yarn_fixture_intact_keys_ok(mla_bin):
    # The intact fixture (random weights from transformers): nothing wrong with its keys or
    # paths; its output is random, which the output check reports as such.
    rep = doctor(mla_bin, YARN, "--no-layout")
    st = statuses(rep)
    assert st["keys"] == "ok" and st["paths"] == "ok", rep["checks"]
    assert rep["verdict"]["status"] == "untrained" and rep["verdict"]["failed"] == ["output"]


def test_random_synth_is_untrained_not_broken(mla_bin, tmp_path):
    model = tmp_path / "synth.gguf"
    subprocess.run([mla_bin, "gguf", "synth", "-o", str(model), "--vocab", str(TINY), "--seed", "5"],
                   check=True, capture_output=True)
    rep = doctor(mla_bin, model)
    assert rep["verdict"]["status"] == "untrained", rep["verdict"]
    assert rep["verdict"]["failed"] == ["output"]
    assert "random/untrained" in rep["verdict"]["line"]
    st = statuses(rep)
    assert st["paths"] == "ok" and st["heads"] == "ok" and st["load"] == "ok", rep["checks"]


def test_unreadable_file_is_a_load_failure(mla_bin, tmp_path):
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 8)
    rep = doctor(mla_bin, bad)
    assert rep["verdict"]["failed"] == ["load"]


def test_serve_self_check(mla_bin):
    s = Server(TINY, "--self-check", "--log-level", "debug")
    try:
        # The self-check runs on the engine's weights: the file is bound (and repacked, where the
        # CPU has the packed kernels) once per process, not once more for the check.
        assert s.log.count("weights repacked") <= 1, s.log
        assert s.log.count("weights bound") == 1, s.log
        assert "self-check: ok (mha, mqa, 1-token prefill, chunked prefill (3) agree" in s.log
    finally:
        assert s.stop() == 0
    s = Server(TINY, "--self-check=off")
    try:
        assert "self-check" not in s.log
    finally:
        s.stop()
    p = subprocess.run([mla_bin, "serve", "-m", str(TINY), "--port", "0", "--self-check=sometimes"],  # noqa: PLW1510 (the caller checks the return code)
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--self-check" in p.stderr


@pytest.mark.parametrize(("path", "other"), [("mha", "mqa"), ("mqa", "mha")])
def test_serve_self_check_with_forced_path(path, other):
    # A forced --mla-path loads W_UK in that path's form only, and the self-check reuses those
    # weights (no second load for the other form): it checks the served path's chunkings.
    s = Server(TINY, "--self-check", "--mla-path", path, "--log-level", "debug")
    try:
        assert f"self-check: ok ({path}, 1-token prefill, chunked prefill (3) agree" in s.log, s.log
        assert f"{other} not checked" in s.log, s.log
        assert s.log.count("weights bound") == 1, s.log
        assert f"W_UK for {path}," in s.log, s.log
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("model", ["glm-dsa-tiny", "glm-dsa-shared-tiny", "deepseek32-tiny"])
def test_dsa_fixture_sparse_equals_dense_within_top_k(mla_bin, model):
    # The transformers DSA fixtures (random weights): the indexer is found, the sparse forward
    # equals the dense one while the context fits top_k, and every path agrees.
    path = REPO / "tests" / "fixtures" / "dsa-reference" / model / "model-f32.gguf"
    rep = doctor(mla_bin, path, "--no-layout")
    assert rep["file"]["indexer"].startswith("present"), rep["file"]
    sparse = paths_by_name(rep)["dense vs sparse"]
    assert sparse["status"] == "ok", sparse
    assert sparse["logits_rel"] <= 1e-6 and sparse["greedy_agree"], sparse
    assert statuses(rep)["paths"] == "ok", rep["checks"]
    assert rep["verdict"]["failed"] == ["output"], rep["verdict"]
