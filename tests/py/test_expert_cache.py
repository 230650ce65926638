"""`--weights-memory` (the routed-expert cache, src/model/expert_cache.h) from the command line:
`mla run`, `serve`, `bench` and `doctor` take it and log it on the `engine:` line; a budget that
forces eviction gives the resident run's greedy tokens for a batch; budgets too small or above
physical memory are refused with one line; /metrics and `bench --profile` report the cache; a
read error (the file cut after load) fails that request with a 500 naming the tensor while the
server keeps serving. Read-ahead (`--expert-io-threads`, on by default) gives the same tokens and
reports its predictions and bytes."""
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import requests
from conftest import run_mla

import gguf

from server_util import CHAT_TEMPLATE, MODEL_NAME, SYNTH_CONFIG, VOCAB, Server, metric

BATCH_PROMPTS = ["1 2 3 4 5", "7 8 9", "10 11 12 13 14 15 16 17 18", "40", "21 22 23 24"]


@pytest.fixture(scope="module")
def model(tmp_path_factory, mla_bin):
    """4 layers (3 MoE) x 16 experts of Q8_0: 48 cached experts for the cache to cycle through."""
    path = tmp_path_factory.mktemp("ec") / "ec.gguf"
    run_mla(mla_bin, "gguf", "synth", "-o", str(path), "--n-layer", "4", "--n-expert", "16", "--type", "q8_0",
            "--seed", "5")
    return path


def run_batch(mla_bin, model, tmp_path, *extra):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(BATCH_PROMPTS) + "\n")
    p = run_mla(mla_bin, "run", "-m", str(model), "--batch", str(prompts), "-n", "10", "--json",
                "--max-num-batched-tokens", "16", "--max-num-seqs", "4", *extra)
    return json.loads(p.stdout), p.stderr


def needed_bytes(mla_bin, model, *extra):
    """The smallest budget mla accepts, from its refusal of a 1-byte one."""
    p = run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "--weights-memory", "1", *extra, check=False)
    assert p.returncode != 0
    m = re.search(r"--weights-memory 1 bytes is too small: .* give at least (\d+) bytes$", p.stderr.strip())
    assert m, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert errors == [p.stderr.strip().splitlines()[-1]], p.stderr  # one line, the last
    return int(m.group(1))


def test_batch_tokens_equal_the_resident_run(mla_bin, model, tmp_path):
    resident, _ = run_batch(mla_bin, model, tmp_path)
    budget = needed_bytes(mla_bin, model, "--max-num-batched-tokens", "16")
    for eviction, io_threads in (("lfu", 0), ("lru", 0), ("lfu", 2), ("lru", 1)):
        cached, log = run_batch(mla_bin, model, tmp_path, "--weights-memory", str(budget), "--expert-eviction",
                                eviction, "--expert-io-threads", str(io_threads))
        assert [r["continuation"] for r in cached["requests"]] == [r["continuation"] for r in resident["requests"]]
        assert (f"weights memory {budget} bytes (experts streamed, eviction {eviction}, {io_threads} read-ahead I/O "
                "threads)") in log
        assert re.search(r"expert cache: 16 slots of .*, reads (O_DIRECT|buffered pread \(.*\))", log), log
        assert ("read-ahead off" if io_threads == 0 else f"read-ahead on {io_threads} I/O threads") in log
        ec = cached["expert_cache"]
        assert ec["slots"] == 16
        # 48 experts through 16 slots
        assert ec["misses"] + ec["read_ahead"] > 48 and ec["hits"] > 0 and ec["bytes_read"] > 0
        if io_threads == 0:
            assert ec["predictions"] == 0 and ec["read_ahead_bytes"] == 0
        else:
            assert 0 < ec["read_ahead_bytes"] < ec["bytes_read"]
            assert 0 < ec["predictions_used"] <= min(ec["predictions"], ec["predictable_uses"])
    assert "expert_cache" not in resident


def test_refusals_are_one_line(mla_bin, model):
    n = needed_bytes(mla_bin, model)
    # One byte short of the number given is refused, the number itself is taken.
    short = run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "-n", "1", "--weights-memory", str(n - 1),
                    check=False)
    assert short.returncode != 0 and f"give at least {n} bytes" in short.stderr
    run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "-n", "1", "--weights-memory", str(n))
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
    big = run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "--weights-memory", str(phys + 4096),
                  check=False)
    assert big.returncode != 0
    assert f"is more than this machine's memory ({phys} bytes)" in big.stderr.strip().splitlines()[-1]
    bad = run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "--weights-memory", "12X", check=False)
    assert bad.returncode != 0 and "--weights-memory: unknown unit in '12X'" in bad.stderr
    threads = run_mla(mla_bin, "run", "-m", str(model), "--tokens", "1", "--weights-memory", str(n),
                      "--expert-io-threads", "65", check=False)
    assert threads.returncode != 0
    assert threads.stderr.strip().splitlines()[-1].endswith(
        "--expert-io-threads 65: expected 0 (read on demand only) to 64"), threads.stderr


def test_bench_profile_and_doctor_take_the_budget(mla_bin, model):
    n = needed_bytes(mla_bin, model, "--max-num-batched-tokens", "64")
    p = run_mla(mla_bin, "bench", "-m", str(model), "-p", "16", "-n", "8", "-r", "1", "--profile",
                "--max-num-batched-tokens", "64", "--weights-memory", str(n))
    assert re.search(r"expert cache per token: [\d.]+ hits, [\d.]+ misses \(hit rate [\d.]+%\), [\d.]+ MB read",
                     p.stdout), p.stdout
    assert re.search(r"read-ahead per token: [\d.]+ MB read ahead, [\d.]+ MB on demand; [\d.]+ experts predicted, "
                     r"precision [\d.]+% \(predicted and used\), recall [\d.]+%", p.stdout), p.stdout
    assert f"weights memory {n} bytes" in p.stderr
    d = run_mla(mla_bin, "doctor", str(model), "--weights-memory", "1G", "--no-layout", check=False)
    assert "expert cache: " in d.stderr and "error" not in d.stderr, d.stderr


def moved_last(src: Path, dst: Path, name: str) -> Path:
    """A copy (gguf-py) whose tensor `name` is the last in the file."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        w.add_key_value(key, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in sorted(r.tensors, key=lambda t: t.name == name):
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_serve_metrics_and_a_read_error(mla_bin, tmp_path):
    # The server tests' model with 3 MoE layers of 16 experts.
    cfg = tmp_path / "synth.json"
    cfg.write_text(json.dumps(dict(SYNTH_CONFIG, n_layer=4, n_expert=16, vocab=str(VOCAB),
                                   chat_template=str(CHAT_TEMPLATE))))
    run_mla(mla_bin, "gguf", "synth", "-o", str(tmp_path / "served.gguf"), "--config", str(cfg))
    name = "blk.3.ffn_down_exps.weight"  # the last MoE layer's
    path = moved_last(tmp_path / "served.gguf", tmp_path / "moved.gguf", name)
    budget = needed_bytes(mla_bin, path, "--max-num-batched-tokens", "16")
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    full = path.read_bytes()
    assert int(t.data_offset) + int(t.n_bytes) == len(full)
    server = Server(path, "--weights-memory", str(budget), "--max-num-batched-tokens", "16", "--max-num-seqs", "2")
    try:
        body = {"model": MODEL_NAME, "prompt": "Hello there", "max_tokens": 4, "temperature": 0}
        ok = requests.post(server.url + "/v1/completions", json=body, timeout=30)
        assert ok.status_code == 200, ok.text
        m = server.metrics()
        assert metric(m, "mla:expert_cache_slots", model_name=MODEL_NAME) > 0
        misses = metric(m, "mla:expert_cache_misses_total", model_name=MODEL_NAME)
        assert misses > 0
        assert metric(m, "mla:expert_cache_read_bytes_total", model_name=MODEL_NAME) > 0
        assert metric(m, "mla:expert_cache_stall_seconds_total", model_name=MODEL_NAME) > 0
        # Read-ahead is on by default: the MoE layers after the first are predicted.
        predictions = metric(m, "mla:expert_cache_predictions_total", model_name=MODEL_NAME)
        used = metric(m, "mla:expert_cache_predictions_used_total", model_name=MODEL_NAME)
        assert predictions > 0 and 0 <= used <= predictions
        assert used <= metric(m, "mla:expert_cache_predictable_uses_total", model_name=MODEL_NAME)
        assert metric(m, "mla:expert_cache_read_ahead_total", model_name=MODEL_NAME) >= 0
        assert metric(m, "mla:expert_cache_read_ahead_bytes_total", model_name=MODEL_NAME) >= 0
        # Cut the file inside the routed tensor: experts not cached yet cannot be read.
        with open(path, "r+b") as f:
            f.truncate(int(t.data_offset) + 1)
        errors = []
        for i in range(12):  # other prompts reach experts not read yet
            bad = requests.post(server.url + "/v1/completions",
                                json=dict(body, prompt=f"Another prompt number {i} about {i * i} things"), timeout=30)
            if bad.status_code != 200:
                errors.append(bad)
        assert errors, "no request needed an expert past the cut"
        assert all(e.status_code == 500 for e in errors), [e.text for e in errors]
        assert name in errors[0].json()["error"]["message"], errors[0].text
        assert requests.get(server.url + "/health", timeout=5).status_code == 200
        # The file restored (appended: truncating it to zero would pull the mapped pages of the
        # resident tensors away): the server answers again, with the tokens it gave before.
        with open(path, "ab") as f:
            f.write(full[int(t.data_offset) + 1:])
        again = requests.post(server.url + "/v1/completions", json=body, timeout=30)
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["text"] == ok.json()["choices"][0]["text"]
    finally:
        server.stop()
