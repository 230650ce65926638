"""EleutherAI's lm-evaluation-harness (`lm_eval`, pinned in tools/requirements-test.txt) against
`mla serve` through its `local-completions` model, on the two tasks in tests/fixtures/lm-eval (a
multiple-choice loglikelihood task and a generate_until task over local JSONL files; no hub),
for the tiny model's Q8_0 and Q4_K files. lm-eval tokenizes through the server's /tokenize and
/tokenizer_info (its `remote` tokenizer) and scores with `echo` + `logprobs` + `max_tokens`.

Checked against references outside the server:
- every loglikelihood equals the engine's own scoring of the same tokens (`mla run --tokens IDS
  --dump-logits FILE`, log-softmax here) to 1e-4;
- the loglikelihoods differ from llama.cpp's on the same file by no more than llama.cpp's own
  rounding noise there (mean and max, 25% margin; tests/fixtures/lm-eval/llama-cpp-reference.json,
  tools/llama-cpp/lm_eval_reference.py), and the server split context and continuation into the
  same token ids as llama.cpp's tokenizer;
- every generation is the engine's greedy continuation (`mla run -n 8`) cut at the first stop
  string.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from server_util import MODEL_NAME, REPO, Server, mla_bin

pytest.importorskip("lm_eval", reason="lm_eval is in tools/requirements-test.txt: run scripts/install-deps.sh")

TASKS = REPO / "tests" / "fixtures" / "lm-eval"
REFERENCE = json.loads((TASKS / "llama-cpp-reference.json").read_text(encoding="utf-8"))
N_VOCAB = 4096
# Both engines round activations for their quantized dot products (llama.cpp to Q8_0 / Q8_K blocks),
# each in its own way, so on the same file they differ by about that rounding noise. The reference
# measures llama.cpp's as the gap between llama.cpp on the file and on its F32 copy (nats per
# loglikelihood, 96 pairs): mean 0.039 / max 0.64 on Q8_0, mean 0.068 / max 0.55 on Q4_K; measured
# |mla - llama.cpp|: mean 0.026 / max 0.11 and mean 0.056 / max 0.53.
NOISE_MARGIN = 1.25


def log_softmax_rows(dump: Path, n_rows: int) -> np.ndarray:
    rows = np.fromfile(dump, dtype=np.float32).reshape(-1, N_VOCAB)[:n_rows].astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))


def mla_run(model: Path, ids: list[int], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([mla_bin(), "run", "-m", str(model), "--tokens", ",".join(map(str, ids)), "--temp", "0",
                           "--threads", "1", *args], check=True, capture_output=True, text=True)


def samples(out_dir: Path, task: str) -> list[dict]:
    files = sorted(out_dir.rglob(f"samples_{task}_*.jsonl"))
    assert files, f"lm_eval wrote no samples for {task} under {out_dir}"
    return [json.loads(line) for line in files[-1].read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module", params=["tiny-q8_0.gguf", "tiny-q4_k.gguf"])
def evaluated(request, tmp_path_factory):
    name = request.param
    model = REPO / "models" / name
    out = tmp_path_factory.mktemp("lm-eval")
    server = Server(model, "--max-model-len", "256")
    try:
        env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "HF_DATASETS_CACHE": str(out / "hf-datasets"), "HF_HOME": str(out / "hf")}
        args = [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args",
                (f"base_url={server.url}/v1/completions,model={MODEL_NAME},tokenizer_backend=remote,"
                 "tokenized_requests=True,max_length=256,max_retries=1"),
                "--tasks", "tiny_python_mc,tiny_python_gen", "--include_path", str(TASKS),
                "--output_path", str(out), "--log_samples"]
        run = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        # The tokenization lm-eval used: the server's, which tests below compare with llama.cpp's.
        def encode(text: str) -> list[int]:
            r = requests.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=30)
            return r.json()["tokens"]

        mc = samples(out, "tiny_python_mc")
        pairs = []
        for s in mc:
            for k in sorted(s["arguments"]):
                context, continuation = s["arguments"][k]["arg_0"], s["arguments"][k]["arg_1"]
                ll = float(s["resps"][int(k.split("_")[-1])][0][0])
                whole, ctx = encode(context + continuation), encode(context)
                pairs.append({"context": context, "continuation": continuation, "loglikelihood": ll,
                              "context_ids": ctx, "continuation_ids": whole[len(ctx):], "whole": whole})
        gen = []
        for s in samples(out, "tiny_python_gen"):
            context, kwargs = s["arguments"]["gen_args_0"]["arg_0"], s["arguments"]["gen_args_0"]["arg_1"]
            gen.append({"context": context, "ids": encode(context), "response": s["resps"][0][0],
                        "until": kwargs["until"], "max_gen_toks": kwargs["max_gen_toks"]})
        results = json.loads(max(out.rglob("results_*.json")).read_text())["results"]
        yield {"name": name, "model": model, "pairs": pairs, "gen": gen, "results": results}
    finally:
        server.stop()


def test_lm_eval_scores_both_tasks(evaluated):
    res = evaluated["results"]
    mc, gen = res["tiny_python_mc"], res["tiny_python_gen"]
    print(f"{evaluated['name']}: tiny_python_mc acc {mc['acc,none']:.4f} acc_norm {mc['acc_norm,none']:.4f}, "
          f"tiny_python_gen exact_match {gen['exact_match,first-three-words']:.4f}")
    assert len(evaluated["pairs"]) == 24 * 4
    assert len(evaluated["gen"]) == 12
    # Four choices: chance is 0.25. The model has read Python documentation; it does better.
    assert mc["acc,none"] > 0.25


def test_loglikelihoods_equal_the_engines_own_scoring(evaluated, tmp_path):
    worst = 0.0
    for i, p in enumerate(evaluated["pairs"]):
        dump = tmp_path / f"{i}.f32"
        mla_run(evaluated["model"], p["whole"], "-n", "1", "--dump-logits", str(dump))
        lp = log_softmax_rows(dump, len(p["whole"]) - 1)
        n_ctx = len(p["context_ids"])
        want = sum(lp[j - 1, p["whole"][j]] for j in range(n_ctx, len(p["whole"])))
        worst = max(worst, abs(want - p["loglikelihood"]))
        assert abs(want - p["loglikelihood"]) <= 1e-4, (p["context"], p["continuation"], want, p["loglikelihood"])
    print(f"{evaluated['name']}: max |lm-eval - engine| = {worst:.2e}")


def test_loglikelihoods_match_llama_cpp_within_quantization_noise(evaluated):
    ref = {(r["context"], r["continuation"]): r for r in REFERENCE["models"][evaluated["name"]]}
    gap, noise, exact = [], [], []
    for p in evaluated["pairs"]:
        r = ref[(p["context"], p["continuation"])]
        # The server split context and continuation into llama.cpp's token ids.
        assert p["context_ids"] == r["context_ids"], p["context"]
        assert p["continuation_ids"] == r["continuation_ids"], p["continuation"]
        gap.append(abs(p["loglikelihood"] - r["loglikelihood"]))
        noise.append(abs(r["loglikelihood"] - r["loglikelihood_f32_copy"]))
        exact.append(abs(p["loglikelihood"] - r["loglikelihood_f32_copy"]))
    gap, noise, exact = map(np.array, (gap, noise, exact))
    print(f"{evaluated['name']}: |mla - llama.cpp| mean {gap.mean():.4f} max {gap.max():.4f}; llama.cpp's own "
          f"noise mean {noise.mean():.4f} max {noise.max():.4f}; |mla - llama.cpp F32 copy| mean {exact.mean():.4f} "
          f"max {exact.max():.4f} ({len(gap)} pairs)")
    assert gap.mean() <= NOISE_MARGIN * noise.mean()
    assert gap.max() <= NOISE_MARGIN * noise.max()


def test_generations_are_the_engines_greedy_continuations(evaluated):
    for g in evaluated["gen"]:
        out = json.loads(mla_run(evaluated["model"], g["ids"], "-n", str(g["max_gen_toks"]), "--json").stdout)
        text = out["text"]
        cut = min((text.find(u) for u in g["until"] if u in text), default=len(text))
        assert g["response"] == text[:cut], (g["context"], g["response"], text)
