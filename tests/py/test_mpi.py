"""Several processes under mpirun (src/parallel/): `mpirun -np N mla run` must give the tokens and
the logits of the single-process engine bit for bit, bring every rank's log lines to rank 0's log
tagged with the rank, spread rank 0's MLA_* environment, and stop with one line naming the rank on
bad input. The reference is the single-process `mla run` of the same file (whose own correctness
against transformers and llama.cpp is tested elsewhere)."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from conftest import run_mla

from server_util import MODEL_NAME, Server

ROOT = Path(__file__).resolve().parents[2]
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))
TINY = ROOT / "models" / "tiny-q8_0.gguf"
MPIRUN = shutil.which("mpirun")

SMALL = ["--n-embd", "64", "--n-ff", "128", "--q-lora-rank", "32", "--kv-lora-rank", "64", "--qk-nope", "16",
         "--qk-rope", "16", "--v-head", "16", "--n-ff-exp", "32", "--n-expert-used", "3", "--n-layer", "3",
         "--n-layer-dense-lead", "1", "--n-expert-shared", "1"]


def _mpi_build() -> bool:
    out = subprocess.run([MLA, "version"], capture_output=True, text=True, check=True).stdout
    return "multi-process: mpi" in out


# What this file needs, stated before anything runs. A build without MPI has nothing to test here:
# the whole file is skipped, and conftest.py turns an all-skipped file into exit code 77, which
# ctest lists as "Skipped" rather than "Passed". A build with MPI and no mpirun is a broken
# install (CMake found the library, so scripts/install-deps.sh ran or MPI was installed by hand):
# that fails.
if not _mpi_build():
    pytest.skip(f"{MLA} was built without MPI (`mla version` does not say 'multi-process: mpi'; CMake found no "
                "MPI library or was given -DMLA_MPI=OFF): the multi-process runtime is NOT TESTED",
                allow_module_level=True)
if MPIRUN is None:
    pytest.fail(f"{MLA} was built with MPI but mpirun is not on PATH: install Open MPI (scripts/install-deps.sh "
                "installs openmpi-bin) to run the multi-process tests", pytrace=False)

# Open MPI refuses root without --allow-run-as-root (CI runs as root) and more ranks than cores
# without --oversubscribe; the rest keeps a small test quick and quiet.
MPI_FLAGS = ["--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca", "btl", "self,vader",
             "--mca", "btl_vader_single_copy_mechanism", "none"]


# Several ranks run the row-major matmul kernels (repacking would copy every rank's shard), so the
# single-process reference runs them too: --no-repack. The packed kernels round differently.
ENGINE_COMMANDS = ("run", "serve", "bench", "perplexity", "doctor")


def mla(*args, check=True, timeout=120):
    no_repack = ["--no-repack"] if args[0] in ENGINE_COMMANDS else []
    return run_mla(MLA, *args, *no_repack, check=check, timeout=timeout)


def mpirun(n, *args, check=True, timeout=120):
    r = subprocess.run([MPIRUN, *MPI_FLAGS, "-np", str(n), MLA, *map(str, args)], capture_output=True, check=False,
                       text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def mpmd(*parts, timeout=120):
    """mpirun A : B : ... (one rank per part), each part a list of arguments after -np 1."""
    cmd = [MPIRUN, *MPI_FLAGS]
    for i, p in enumerate(parts):
        if i:
            cmd.append(":")
        cmd += ["-np", "1", *map(str, p)]
    return subprocess.run(cmd, capture_output=True, check=False, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("mpi")
    path = d / "synth-moe.gguf"
    mla("gguf", "synth", "-o", path, "--type", "q8_0", "--seed", "11", "--n-expert", "7", *SMALL)
    return path


# Other shapes of the family, each split over the ranks: no q LoRA with merged gate/up experts and
# 5 heads; DSA (glm-dsa, an indexer with top_k 4 so that sparse selection starts early, one shared
# indexer layer); the older fused attn_kv_b layout with K-quants.
VARIANTS = {
    "lite-merged": {"q_lora_rank": 0, "merged_gate_up": True, "n_head": 5, "n_expert": 6, "type": "q8_0"},
    "glm-dsa": {"arch": "glm-dsa", "n_head": 4, "n_expert": 5, "indexer_top_k": 4, "n_indexer_head": 2,
                "indexer_head_dim": 32, "indexer_types": "101", "type": "f16", "gating": "sigmoid"},
    "fused-q4k": {"layout": "fused", "n_embd": 256, "n_ff": 256, "n_ff_exp": 256, "q_lora_rank": 256,
                  "kv_lora_rank": 256, "n_expert": 4, "type": "q4_k"},
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    d = tmp_path_factory.mktemp("mpi-variants")
    out = {}
    small = {SMALL[i][2:].replace("-", "_"): int(SMALL[i + 1]) for i in range(0, len(SMALL), 2)}
    for name, cfg in VARIANTS.items():
        out[name] = d / f"{name}.gguf"
        (d / f"{name}.json").write_text(json.dumps({**small, **cfg, "seed": 21}))
        mla("gguf", "synth", "-o", out[name], "--config", d / f"{name}.json")
    return out


@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_tiny_model_tokens_and_logits_match_single_process(tmp_path, n_ranks):
    args = ["run", "-m", TINY, "-p", "def fibonacci(n):", "-n", "16", "--json", "-t", "1"]
    one = json.loads(mla(*args, "--dump-logits", tmp_path / "one.bin").stdout)
    many = json.loads(mpirun(n_ranks, *args, "--dump-logits", tmp_path / "many.bin").stdout)
    assert many["continuation"] == one["continuation"]
    assert len(one["continuation"]) == 16
    # Bit for bit: the routed experts are summed in the single-process order across the ranks.
    assert (tmp_path / "many.bin").read_bytes() == (tmp_path / "one.bin").read_bytes()


@pytest.mark.parametrize("n_ranks", [2, 3])
@pytest.mark.parametrize("path", ["auto", "mqa", "mha"])
def test_synth_batch_with_chunked_prefill_prefix_hits_and_forks_matches(tmp_path, synth, n_ranks, path):
    # Seven experts over 2 or 3 ranks: uneven ranges (4+3, 3+2+2). Shared prompt prefixes (prefix
    # cache hits), n = 2 forks (copy-on-write blocks, sampled on rank 0 with a seed), a token
    # budget of 8 (chunked prefill) and small blocks.
    batch = tmp_path / "batch.txt"
    common = list(range(1, 21))
    lines = [
        {"tokens": common + [30, 31, 32], "max_tokens": 6},
        {"tokens": common + [40], "max_tokens": 5},
        {"tokens": [7, 8, 9], "max_tokens": 7},
        {"tokens": common[:9], "max_tokens": 4, "n": 2, "temperature": 0.9, "seed": 3},
    ]
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    args = ["run", "-m", synth, "--batch", batch, "--json", "--ignore-eos", "-t", "1", "--max-num-batched-tokens",
            "8", "--block-size", "4", "--mla-path", path]
    one = json.loads(mla(*args).stdout)
    many = json.loads(mpirun(n_ranks, *args).stdout)
    assert [r["continuation"] for r in many["requests"]] == [r["continuation"] for r in one["requests"]]
    assert sum(len(r["continuation"]) for r in one["requests"]) == 6 + 5 + 7 + 4 * 2
    assert one["prefix_cache_hit_rate"] > 0


def test_worker_logs_and_dispatch_trace_reach_rank_zero(synth):
    r = mpirun(3, "run", "-m", synth, "--tokens", "1,2,3,4", "-n", "2", "-t", "1", "--trace", "dispatch:1")
    log = r.stderr
    for rank in (1, 2):
        assert f"[rank {rank}] parallel: rank {rank} of 3" in log
        assert f"[rank {rank}] dispatch layer=blk.0 " in log
        assert f"[rank {rank}] dispatch layer=blk.2 " in log
    # Rank 0's own lines carry no tag.
    assert "parallel: rank 0 of 3" in log and "[rank 0]" not in log
    # The line format is rank 0's: the workers wrote nothing to their own stderr except through it.
    assert all("] [rank" in line for line in log.splitlines() if "[rank " in line)


def test_worker_environment_is_rank_zeros_with_a_warning(synth):
    run = [MLA, "run", "-m", synth, "--tokens", "1,2,3", "-n", "1", "-t", "1"]
    r = mpmd(["env", "MLA_TRACE=dispatch:1", *run], ["env", "MLA_TRACE=dispatch:5", "MLA_PREFAULT=0", *run])
    assert r.returncode == 0, r.stderr
    assert "[rank 1] environment: MLA_TRACE is 'dispatch:5' here but 'dispatch:1' on rank 0" in r.stderr
    assert "[rank 1] environment: MLA_PREFAULT is '0' here but unset on rank 0" in r.stderr
    # Rank 1 traces as rank 0 asked: one call per layer (it would log prefill and decode with 5).
    assert r.stderr.count("[rank 1] dispatch layer=blk.0 ") == 1


def test_too_many_ranks_for_the_experts_is_one_line(tmp_path):
    path = tmp_path / "three-experts.gguf"
    mla("gguf", "synth", "-o", path, "--type", "f32", "--seed", "2", "--n-expert", "3", *SMALL)
    r = mpirun(4, "run", "-m", path, "--tokens", "1,2", "-n", "1", "-t", "1", check=False)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("mla: error:")]
    want = ("mla: error: all 4 ranks: 4 ranks but the model has 3 routed experts: expert parallelism needs at most "
            "one rank per expert")
    assert errors == [want]


def test_rank_that_cannot_open_the_file_is_named(tmp_path, synth):
    run = ["run", "--tokens", "1,2", "-n", "1", "-t", "1"]
    r = mpmd([MLA, *run, "-m", synth], [MLA, *run, "-m", tmp_path / "missing.gguf"])
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("mla: error:")]
    assert len(errors) == 1 and errors[0].startswith("mla: error: rank 1: ") and "missing.gguf" in errors[0]


def test_ranks_with_different_files_are_refused(tmp_path, synth):
    other = tmp_path / "other.gguf"
    mla("gguf", "synth", "-o", other, "--type", "q8_0", "--seed", "12", "--n-expert", "7", *SMALL)
    run = ["run", "--tokens", "1,2", "-n", "1", "-t", "1"]
    r = mpmd([MLA, *run, "-m", synth], [MLA, *run, "-m", synth], [MLA, *run, "-m", other])
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("mla: error:")]
    assert len(errors) == 1 and errors[0].startswith("mla: error: rank 2 opened a different model file than rank 0")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_synth_variants_logits_match_single_process(tmp_path, variants, variant):
    args = ["run", "-m", variants[variant], "--tokens", ",".join(str(i) for i in range(3, 15)), "-n", "10",
            "--ignore-eos", "--json", "-t", "1", "--max-num-batched-tokens", "5"]
    one = json.loads(mla(*args, "--dump-logits", tmp_path / "one.bin").stdout)
    for n_ranks in (2, 3, 4):
        many = json.loads(mpirun(n_ranks, *args, "--dump-logits", tmp_path / "many.bin").stdout)
        assert many["continuation"] == one["continuation"], n_ranks
        assert (tmp_path / "many.bin").read_bytes() == (tmp_path / "one.bin").read_bytes(), n_ranks


# ---- mla serve under mpirun ----

VOCAB = ROOT / "tests" / "fixtures" / "vocab" / "ggml-vocab-deepseek-llm.gguf"
CHAT_TEMPLATE = ROOT / "tests" / "fixtures" / "synth" / "chat_template.jinja"


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    """A synth MoE with a real vocabulary (text in, text out), 4 heads and 6 experts: up to 4 ranks."""
    d = tmp_path_factory.mktemp("mpi-serve")
    small = {SMALL[i][2:].replace("-", "_"): int(SMALL[i + 1]) for i in range(0, len(SMALL), 2)}
    cfg = {**small, "n_head": 4, "n_expert": 6, "n_ctx_train": 65536, "type": "q8_0", "seed": 9,
           "vocab": str(VOCAB), "chat_template": str(CHAT_TEMPLATE)}
    (d / "cfg.json").write_text(json.dumps(cfg))
    path = d / "served.gguf"
    mla("gguf", "synth", "-o", path, "--config", d / "cfg.json")
    return path


class MpiServer(Server):
    """`mpirun -np N mla serve` (N = 0: plain `mla serve`) on the served model."""

    def __init__(self, n_ranks, model, *extra):
        self.n_ranks = n_ranks
        launcher = (MPIRUN, *MPI_FLAGS, "-np", str(n_ranks)) if n_ranks else ()
        no_repack = () if n_ranks else ("--no-repack",)
        super().__init__(model, "--kv-cache-tokens", "70000", *extra, *no_repack, launcher=launcher)

    def complete(self, prompt, max_tokens, **kw):
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **kw}
        return requests.post(self.url + "/v1/completions", json=body, timeout=60)

    def rank_pid(self, rank):
        m = re.search(rf"parallel: rank {rank} of \d+ \(pid (\d+) on ", self.log)
        assert m, self.log
        return int(m.group(1))

    def close(self, timeout=30):
        """A graceful stop: SIGTERM to rank 0, which drains and stops the workers. (mpirun itself
        answers SIGTERM by killing the whole job.)"""
        if self.n_ranks and self.proc.poll() is None:
            os.kill(self.rank_pid(0), signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass  # stop() below kills it and says so
        return self.stop(timeout=timeout)


def test_serve_under_mpirun_answers_like_one_process(served_model):
    prompts = ["The quick brown fox", "def main():\n    ", "1, 2, 3, 5, 8,"]
    one = MpiServer(0, served_model)
    try:
        want = [one.complete(p, 12, logprobs=1).json()["choices"][0] for p in prompts]
    finally:
        assert one.close() == 0
    many = MpiServer(3, served_model)
    try:
        got = [many.complete(p, 12, logprobs=1).json()["choices"][0] for p in prompts]
    finally:
        rc = many.close()
    assert rc == 0, many.log
    assert [g["text"] for g in got] == [w["text"] for w in want]
    assert [g["logprobs"]["token_logprobs"] for g in got] == [w["logprobs"]["token_logprobs"] for w in want]
    assert all(len(w["logprobs"]["tokens"]) == 12 for w in want)
    assert "[rank 2] parallel: rank 2 of 3" in many.log


def test_killed_worker_fails_requests_with_503_and_the_job_exits(served_model):
    server = MpiServer(3, served_model)
    try:
        worker = server.rank_pid(2)
        results = []

        def long_request():
            results.append(server.complete("Once upon a time", 60000, ignore_eos=True))

        threads = [threading.Thread(target=long_request) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # both are decoding
        assert all(t.is_alive() for t in threads), "the requests ended before the worker was killed"
        t_kill = time.time()
        os.kill(worker, signal.SIGKILL)
        for t in threads:
            t.join(30)
        assert [r.status_code for r in results] == [503, 503], [r.text for r in results]
        assert all("rank 2" in r.json()["error"]["message"] for r in results)
        server.proc.wait(30)  # no hang: the job ends
        assert time.time() - t_kill < 30
    finally:
        server.close()
    assert server.proc.returncode != 0
    assert re.search(rf"parallel: rank 2 \(pid {worker} on \S+\) exited: the multi-process engine cannot continue",
                     server.log), server.log


def test_kv_cache_dir_under_mpirun_restarts_with_every_ranks_rows(served_model, tmp_path):
    """The prefix cache's disk tier under 3 ranks: rank 0 keeps the blocks (one key for every rank;
    every rank's cache holds the same rows) and sends a loaded block's rows to the workers with the
    step. After a restart, hits on disk give the one-process answer without a cache."""
    prompt = " ".join(f"line {i}: the fox jumps over dog {i}." for i in range(12))  # > 6 blocks of 16
    one = MpiServer(0, served_model, "--no-enable-prefix-caching")
    try:
        want = one.complete(prompt, 8, logprobs=1).json()["choices"][0]
    finally:
        assert one.close() == 0
    for run in ("cold", "restart"):
        many = MpiServer(3, served_model, "--kv-cache-dir", tmp_path)
        try:
            got = many.complete(prompt, 8, logprobs=1).json()["choices"][0]
            m = many.metrics()
        finally:
            rc = many.close()
        assert rc == 0, many.log
        assert got["text"] == want["text"], run
        assert got["logprobs"]["token_logprobs"] == want["logprobs"]["token_logprobs"], run
        disk_hits = m[("mla:prefix_cache_tier_hits_total", frozenset({("model_name", MODEL_NAME), ("tier", "disk")}))]
        assert (disk_hits >= 6) == (run == "restart"), (run, disk_hits)
    assert list(tmp_path.glob("*/*.blk"))

# ---- what each rank holds and moves: mla bench under mpirun ----

BIG = {"n_layer": 4, "n_layer_dense_lead": 1, "n_embd": 512, "n_ff": 2048, "n_head": 8, "q_lora_rank": 256,
       "kv_lora_rank": 128, "qk_nope": 32, "qk_rope": 32, "v_head": 32, "n_expert": 12, "n_expert_used": 2,
       "n_expert_shared": 1, "n_ff_exp": 1024, "type": "q8_0", "seed": 3}
# Tensors the ranks split (by experts, heads, FFN columns or output rows); the rest every rank
# reads whole, but token_embd (rows by use) and output (rank 0 only).
SPLIT = ("_exps.", "attn_q_b.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down.", "_shexp.")


def test_each_rank_reads_its_share_of_the_file(tmp_path):
    from gguf import GGUFReader

    path = tmp_path / "big.gguf"
    (tmp_path / "big.json").write_text(json.dumps(BIG))
    mla("gguf", "synth", "-o", path, "--config", tmp_path / "big.json")
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    split = sum(n for name, n in sizes.items() if any(s in name for s in SPLIT))
    # Norms, the router bias and attn_k_b/attn_v_b are read once at load into F32 copies.
    at_load = ("norm", "exp_probs_b", "attn_k_b", "attn_v_b")
    every = sum(n for name, n in sizes.items() if not any(s in name for s in SPLIT + at_load)
                and name not in ("token_embd.weight", "output.weight"))
    bench = ["bench", "-m", path, "-p", "16", "-n", "8", "-r", "1", "-t", "1", "--membw-size", "8M", "--json"]
    one = json.loads(mla(*bench).stdout)[-1]["ranks"]
    assert len(one) == 1 and one[0]["shard_bytes"] == split + every + sizes["output.weight"]
    whole = one[0]["model_rss_bytes"]
    assert whole >= 0.95 * path.stat().st_size  # one process touches every weight (all experts are routed to)
    for n_ranks in (2, 3):
        rows = json.loads(mpirun(n_ranks, *bench).stdout)
        ranks = rows[-1]["ranks"]
        assert rows[-1]["n_ranks"] == n_ranks and rows[-1]["comm_bytes_per_token"] > 0
        # The engine's accounting against gguf-py's tensor sizes: the split tensors' bytes divide
        # among the ranks (at most one expert's worth apart), the rest is every rank's.
        assert sum(r["shard_split_bytes"] for r in ranks) == split
        one_expert = sum(n for name, n in sizes.items() if "_exps." in name) / BIG["n_expert"]
        for r in ranks:
            assert abs(r["shard_split_bytes"] - split / n_ranks) <= one_expert
            assert r["shard_bytes"] - r["shard_split_bytes"] == every + (sizes["output.weight"] if r["rank"] == 0 else 0)
        # Measured: the pages of the file mapped into each rank. Linux maps a page-cache folio
        # (up to 2 MiB here) whole, so a rank holds a little beside each boundary of its share.
        for r in ranks:
            assert r["model_rss_bytes"] >= 0.9 * r["shard_split_bytes"]
            assert r["model_rss_bytes"] <= (0.8 if n_ranks == 2 else 0.7) * whole, (n_ranks, r)
        assert sum(r["model_rss_bytes"] for r in ranks) >= 0.95 * whole
