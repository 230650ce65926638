"""`mla doctor` and `mla run --verify-paths` on DeepSeek-V4 (`deepseek4`) files: the committed
transformers fixture and a synthetic file with a tokenizer pass; copies of the fixture broken on
purpose with gguf-py (tests/py/broken_models.py) reach the check their break must reach: a tensor
nothing reads is a layout warning; a NaN weight in a layer's K=V projection makes every later logit
NaN (finite, and the agreement checks cannot pass on NaN); a tensor the CSA schedule needs under
another name is a load error naming it. `mla run --verify-paths` reruns each chunk with CSA over
every entry and says how far the two were apart."""
import json
import subprocess

import broken_models as bm
import numpy as np
from conftest import REPO
from test_server_deepseek4 import DS4_CONFIG

import gguf

from server_util import synth_model

MIXED = REPO / "tests" / "fixtures" / "deepseek4" / "mixed" / "model-f32.gguf"


def doctor(mla_bin, path, *args):
    p = subprocess.run([mla_bin, "doctor", str(path), "-t", "2", *args],  # noqa: PLW1510 (the caller checks it)
                       capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    return p


def check_line(text, name):
    lines = [ln.split() for ln in text.splitlines() if ln.strip().startswith(f"check {name} ")]
    assert len(lines) == 1, text
    return lines[0][2]  # ok | warn | FAIL | n/a


def test_fixture_is_ok(mla_bin):
    p = doctor(mla_bin, MIXED)
    assert p.returncode == 0, p.stdout
    # Every tensor of the file (as gguf-py counts them) is one the schedule binds.
    assert f"the schedule's {len(gguf.GGUFReader(MIXED).tensors)} tensors bound" in p.stdout, p.stdout
    for name in ("load", "layout", "finite", "paths", "sparse"):
        assert check_line(p.stdout, name) == "ok", p.stdout
    assert check_line(p.stdout, "absorbed") == "n/a"
    assert "no absorbed vs decompressed pair" in p.stdout
    assert p.stdout.rstrip().endswith("verdict: ok")


def test_synthetic_file_with_a_tokenizer_is_ok(mla_bin):
    p = doctor(mla_bin, synth_model(DS4_CONFIG, "server-deepseek4"), "--prompt", "The quick brown fox jumps over")
    assert p.returncode == 0, p.stdout
    assert "fixed token ids" not in p.stdout  # the canary went through the file's tokenizer
    # indexer_top_k 4, CSA ratio 4: 4 * (4 + 1) - 1 tokens keep every entry for every query.
    assert "sparse vs dense        ok    " in p.stdout and "(19 tokens: up to 4 CSA entries" in p.stdout, p.stdout


def test_nan_weight_fails_finite(mla_bin, tmp_path):
    def edit(name, t):
        if name != "blk.1.attn_kv.weight":
            return None
        data = np.array(t.data, dtype=np.float32)
        data.flat[5] = np.nan
        return data, None
    broken = bm.copy_gguf(MIXED, tmp_path / "nan.gguf", edit=edit)
    p = doctor(mla_bin, broken)
    assert p.returncode == 1
    assert check_line(p.stdout, "finite") == "FAIL", p.stdout
    assert check_line(p.stdout, "paths") == "FAIL", p.stdout  # NaN agrees with nothing
    assert check_line(p.stdout, "load") == "ok"
    assert "verdict: FAIL: finite: canary 1: logit 0 at position 0" in p.stdout, p.stdout


def test_tensor_nothing_reads_is_a_layout_warning(mla_bin, tmp_path):
    broken = bm.copy_gguf(MIXED, tmp_path / "extra.gguf", add={"blk.1.attn_kv_b.weight": np.zeros((32, 16))})
    p = doctor(mla_bin, broken)
    assert p.returncode == 0, p.stdout  # a warning, not a failure: the model still computes
    assert check_line(p.stdout, "layout") == "warn", p.stdout
    assert "1 other tensor(s) nothing reads: blk.1.attn_kv_b.weight" in p.stdout, p.stdout


def test_missing_csa_tensor_fails_load(mla_bin, tmp_path):
    broken = bm.copy_gguf(MIXED, tmp_path / "renamed.gguf",
                          rename={"blk.3.indexer.proj.weight": "blk.3.indexer.projection.weight"})
    p = doctor(mla_bin, broken)
    assert p.returncode == 1
    assert check_line(p.stdout, "load") == "FAIL", p.stdout
    assert "missing tensor 'blk.3.indexer.proj.weight'" in p.stdout, p.stdout


def test_run_verify_paths(mla_bin):
    model = synth_model(DS4_CONFIG, "server-deepseek4")
    p = subprocess.run([mla_bin, "run", "-m", str(model), "--tokens", ",".join(map(str, range(100, 130))), "-n", "8",
                        "--ignore-eos", "--verify-paths", "--json", "-t", "2", "--max-num-batched-tokens", "7"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)["verify_paths"]
    assert v["ok"] and v["greedy_agree"] and v["max_logits_rel"] <= 1e-4, v
    # indexer_top_k 4, CSA ratio 4: a chunk is compared while its last position + 1 <= 4 * 4 + 3 = 19:
    # the prompt's chunks ending at 7 and 14; not those ending at 21, 28 and 30, nor the 7 decode steps.
    assert v["chunks_compared"] == 2 and v["chunks_beyond_top_k"] == 3 + 7, v
    assert "verify-paths seq=" in p.stderr and "(CSA rerun over every entry)" in p.stderr
    assert "verify-paths: ok (sparse vs dense CSA: logits <=" in p.stderr
