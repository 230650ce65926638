"""Speculative decoding with the tiny model's MTP layer through the mla binary (issue 13).

- The engine's MTP draft logits (`mla run --mtp-logits`, F32 weights and an F32 cache) against the
  training module's (tests/fixtures/tiny-mtp, float64 torch), <= 1e-4, on both MLA paths; and a
  greedy K=1 run over the fixture's 32 greedy tokens: the same tokens, and the numbers of drafted
  and accepted tokens the fixture's reference decoder counts.
- `mla serve --speculative-config`: a request served with speculation answers as one without it,
  /metrics counts drafts with vLLM's spec_decode names; bad configurations stop the server at
  start-up with one line naming the problem.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import requests
from conftest import REPO, run_mla

from server_util import MODEL_NAME, Server, metric

sys.path.insert(0, str(REPO / "tests" / "py"))
import gguf_f32

FIX = REPO / "tests" / "fixtures" / "tiny-mtp"
TINY = REPO / "models" / "tiny-q8_0.gguf"
SPEC1 = '{"method": "mtp", "num_speculative_tokens": 1}'


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("mtp") / "tiny-f32.gguf"
    gguf_f32.write_f32_copy(TINY, out)
    return out


@pytest.fixture(scope="module")
def fixture():
    return json.loads((FIX / "draft_logits.json").read_text())


@pytest.mark.parametrize("path", ["mha", "mqa"])
def test_draft_logits_match_the_training_module(mla_bin, f32_model, fixture, tmp_path, path):
    for case in fixture["cases"]:
        dump = tmp_path / f"{case['file']}.{path}"
        ids = ",".join(map(str, case["tokens"]))
        r = run_mla(
            mla_bin,
            "run",
            "-m",
            str(f32_model),
            "--tokens",
            ids,
            "-n",
            "32",
            "--temp",
            "0",
            "--ignore-eos",
            "--kv-cache-dtype",
            "f32",
            "--mla-path",
            path,
            "--mtp-logits",
            str(dump),
            "--speculative-config",
            SPEC1,
            "--json",
            "-t",
            "2",
        )
        got = np.fromfile(dump, dtype="<f4").reshape(case["rows"], case["vocab"])
        want = np.fromfile(FIX / case["file"], dtype="<f4").reshape(case["rows"], case["vocab"])
        diff = float(np.abs(got - want).max())
        assert diff <= 1e-4, (case["what"], path, diff)
        assert got.argmax(axis=1).tolist() == case["mtp_argmax"]
        out = json.loads(r.stdout)
        ref = case["greedy"]
        assert out["continuation"] == ref["tokens"], case["what"]
        # Both leave out a draft when one token is left to generate (as llama-server does).
        assert out["spec_accepted_tokens"] == ref["k1"]["accepted"], (out, ref["k1"])
        assert out["spec_draft_tokens"] == ref["k1"]["drafted"], (out, ref["k1"])
        assert out["spec_accepted_tokens"] > 0


def test_serve_with_speculation_answers_as_without_and_counts_drafts():
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
    answers = {}
    for spec in (None, '{"method": "mtp", "num_speculative_tokens": 3}'):
        server = Server(TINY, *(["--speculative-config", spec] if spec else []))
        try:
            r = requests.post(server.url + "/v1/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            answers[spec is not None] = (r.json()["choices"][0]["text"], r.json()["usage"])
            m = server.metrics()
        finally:
            server.stop()
        if spec:
            assert metric(m, "mla:spec_decode_num_drafts_total") > 0
            assert metric(m, "mla:spec_decode_num_draft_tokens_total") >= metric(m, "mla:spec_decode_num_drafts_total")
            assert metric(m, "mla:spec_decode_num_accepted_tokens_total") > 0
            assert metric(m, "mla:spec_decode_num_accepted_tokens_per_pos_total", position="0") > 0
        else:
            assert not any(name.startswith("mla:spec_decode") for name, _ in m)
    assert answers[True] == answers[False]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"method": "mtp", "num_speculative_tokens": 5}', "num_speculative_tokens must be 1 to 4, got 5"),
        ('{"method": "eagle", "num_speculative_tokens": 2}', 'method "eagle" is not supported'),
        ('{"method": "mtp"', "not valid JSON"),
        ('{"method": "mtp", "num_speculative_tokens": 2, "draft": 1}', "unknown key 'draft'"),
    ],
)
def test_serve_refuses_bad_configurations_at_startup(mla_bin, config, message):
    p = subprocess.run(
        [mla_bin, "serve", "-m", str(TINY), "--port", "0", "--speculative-config", config],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if message in ln]
    assert len(lines) == 1, p.stderr
    assert "--speculative-config" in lines[0]


def test_a_file_without_an_mtp_layer_is_refused(mla_bin):
    no_mtp = REPO / "tests" / "fixtures" / "reference" / "deepseek-v3-tiny" / "model-f32.gguf"
    for cmd in (["serve", "--port", "0"], ["run", "--tokens", "1,2,3"]):
        p = subprocess.run(
            [mla_bin, *cmd, "-m", str(no_mtp), "--speculative-config", SPEC1],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert p.returncode != 0
        assert "needs an MTP (nextn) layer; the file has none" in p.stderr, p.stderr
