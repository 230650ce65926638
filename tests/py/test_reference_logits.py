"""mla.cpp logits vs the transformers reference (tests/fixtures/reference, built by
tools/reference/make_fixtures.py): for every fixture model and prompt, max |Δlogit| <= 5e-5 at
every prompt position and every greedy step, top-1 equal everywhere, and the greedy
continuation identical — with --mla-path mha and mqa, on the converter's (split) layout and on a
fused-layout copy made by `mla gguf convert-mla-layout`."""
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
REF_DIR = Path(os.environ.get("MLA_REFERENCE_DIR", ROOT / "tests" / "fixtures" / "reference"))
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
# The issue asks for <= 1e-4; tools/reference/NOTES.md shows 5e-5 still separates every listed
# mistake (rms eps 1e-5 for 1e-6 included) while a correct F32 forward stays near 1e-5.
TOL = 5e-5

# What tools/reference/make_fixtures.py writes (its MODELS and CASES): every model and prompt
# listed here must be present and is compared, so a fixture that goes missing fails instead of
# leaving fewer parametrizations. Fixtures beyond these (a regenerated MLA_REFERENCE_DIR) are
# compared too.
EXPECTED_MODELS = ("deepseek-v2-lite-tiny", "deepseek-v3-tiny")
EXPECTED_CASES = ("long", "one", "short")
# Logit rows one run of one model compares (prompt positions + greedy steps) with today's fixtures:
# prompts of 128, 1 and 7 tokens, 32 greedy steps each.
MIN_ROWS_PER_RUN = 128 + 1 + 7 + 3 * 32
MODELS = sorted(set(EXPECTED_MODELS) | {p.parent.name for p in REF_DIR.glob("*/reference.json")})


def load_ref(model):
    d = REF_DIR / model
    ref = json.loads((d / "reference.json").read_text())
    return d, ref


def test_fixtures_present():
    missing = [m for m in EXPECTED_MODELS if not (REF_DIR / m / "reference.json").is_file()]
    assert not missing, f"reference fixtures missing under {REF_DIR}: {missing} (tools/reference/make_fixtures.py)"
    for m in MODELS:
        d, ref = load_ref(m)
        assert set(EXPECTED_CASES) <= set(ref["cases"]), f"{m}: cases {sorted(ref['cases'])}, want {EXPECTED_CASES}"
        for name, case in ref["cases"].items():
            assert case["greedy"]["new_token_ids"], f"{m}/{name}: no greedy steps to compare"
            for spec in (case["logits"], case["greedy"]["step_logits"]):
                data = (d / spec["file"]).read_bytes()
                assert len(data) == 4 * int(np.prod(spec["shape"])), f"{m}/{spec['file']}: not of shape {spec['shape']}"
                assert hashlib.sha256(data).hexdigest() == spec["sha256"], f"{m}/{spec['file']} does not match reference.json"


def read_f32(d, spec):
    a = np.fromfile(d / spec["file"], dtype="<f4")
    return a.reshape(spec["shape"])


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """{model: {"split": converter's file, "fused": mla.cpp's fused copy}}"""
    out = {}
    tmp = tmp_path_factory.mktemp("fused")
    for m in MODELS:
        d, ref = load_ref(m)
        src = d / ref["gguf"]["file"]
        assert hashlib.sha256(src.read_bytes()).hexdigest() == ref["gguf"]["sha256"], f"{src} does not match reference.json"
        fused = tmp / f"{m}-fused.gguf"
        subprocess.run([MLA, "gguf", "convert-mla-layout", str(src), str(fused), "--layout", "fused"], check=True,
                       capture_output=True)
        out[m] = {"split": src, "fused": fused}
    return out


def run_mla(model_path, tokens, n_predict, path, dump, extra=()):
    cmd = [MLA, "run", "-m", str(model_path), "--tokens", ",".join(map(str, tokens)), "-n", str(n_predict),
           "--mla-path", path, "--dump-logits", str(dump), "--json", "--threads", "2",
           # The reference is F32 throughout and does not stop at EOS.
           "--kv-cache-dtype", "f32", "--ignore-eos", *extra]
    r = subprocess.run(cmd, capture_output=True, check=False, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("layout", ["split", "fused"])
@pytest.mark.parametrize("mla_path", ["mha", "mqa"])
@pytest.mark.parametrize("model", MODELS)
def test_logits_match_transformers(model, mla_path, layout, model_files, tmp_path):
    d, ref = load_ref(model)
    vocab = ref["hf_config"]["vocab_size"]
    worst = {}
    n_rows = 0  # logit rows compared
    for name, case in ref["cases"].items():
        tokens = case["token_ids"]
        greedy = case["greedy"]["new_token_ids"]
        want_prompt = read_f32(d, case["logits"])          # [n_prompt, vocab]
        want_steps = read_f32(d, case["greedy"]["step_logits"])  # [n_new, vocab]: last position at each step
        dump = tmp_path / f"{name}.f32"
        res, _ = run_mla(model_files[model][layout], tokens, len(greedy), mla_path, dump)
        got = np.fromfile(dump, dtype="<f4").reshape(-1, vocab)
        n = len(tokens)
        assert got.shape[0] == n + len(greedy) - 1
        got_prompt, got_steps = got[:n], got[n - 1:]
        assert got_steps.shape == want_steps.shape
        d_prompt = float(np.abs(got_prompt - want_prompt).max())
        d_steps = float(np.abs(got_steps - want_steps).max())
        worst[name] = max(d_prompt, d_steps)
        n_rows += got_prompt.shape[0] + got_steps.shape[0]
        assert d_prompt <= TOL, f"{name}: prompt logits differ by {d_prompt:.3e}"
        assert d_steps <= TOL, f"{name}: greedy-step logits differ by {d_steps:.3e}"
        assert np.array_equal(got_prompt.argmax(1), want_prompt.argmax(1)), f"{name}: top-1 differs on the prompt"
        assert np.array_equal(got_steps.argmax(1), want_steps.argmax(1)), f"{name}: top-1 differs on greedy steps"
        assert res["continuation"] == greedy, f"{name}: greedy continuation differs"
    assert set(EXPECTED_CASES) <= set(worst), f"compared {sorted(worst)}, want at least {EXPECTED_CASES}"
    assert n_rows >= MIN_ROWS_PER_RUN, f"compared {n_rows} logit rows, want at least {MIN_ROWS_PER_RUN}"
    print(f"\n{model} {layout} {mla_path}: max|Δlogit| " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))


@pytest.mark.parametrize("model", MODELS)
def test_verify_paths_reports_small_differences(model, model_files, tmp_path):
    _, ref = load_ref(model)
    case = ref["cases"]["short"] if "short" in ref["cases"] else next(iter(ref["cases"].values()))
    _, err = run_mla(model_files[model]["split"], case["token_ids"], 3, "auto", tmp_path / "x.f32",
                     extra=["--verify-paths", "--trace", "dispatch:1"])
    # One line per step: the step rerun end to end down the other paths, every layer and the logits.
    steps = re.findall(r"verify-paths step=\d+ .* logits_rel=([0-9.e+-]+) .* layers=\[([^\]]*)\]", err)
    n_layer = ref["hf_config"]["num_hidden_layers"]
    assert len(steps) == 3, err  # prefill + 2 decode steps
    rel = [float(x) for _, layers in steps for x in layers.split()]
    assert len(rel) == 3 * n_layer, err
    assert max(rel) <= 1e-5 and max(float(x) for x, _ in steps) <= 1e-4, err
    assert "verify-paths: ok" in err, err
    prefill = re.search(r"mla path auto: .*(?:longer \(prefill chunks\)|prompt tokens) down (mha|mqa)", err).group(1)
    one = "num_mqa=0 num_mha=1" if prefill == "mha" else "num_mqa=1 num_mha=0"
    assert len(re.findall(rf"dispatch layer=blk\.\d+ is_sparse=0 {one} total_toks=(?:[2-9]|[1-9][0-9]+) ", err)) == n_layer, err
