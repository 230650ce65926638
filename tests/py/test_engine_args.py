"""The engine flags `mla run`, `mla serve` and `mla bench` share (src/cli/engine_args.h): the same
names, types, defaults and help in every command, the same resolved configuration in the
`engine: ...` start-up line, one KV-dtype parser, and the old spellings still accepted with a
deprecation warning."""
import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import run_mla

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny-q8_0.gguf"

MODEL_FLAGS = ["--threads", "--mla-path", "--max-num-batched-tokens", "--kv-cache-dtype", "--speculative-config",
               "--no-prefault", "--weights-memory", "--expert-eviction", "--simd", "--no-repack"]
# The engine line's tail: the quant kernels' family this host runs (by default its best) and repacking.
KERNELS = r", simd (avx512|avx2|scalar), repack (on|off)$"
CAPACITY_FLAGS = ["--max-num-seqs", "--max-model-len", "--enable-prefix-caching", "--kv-cache-tokens",
                  "--kv-cache-memory", "--block-size", "--no-prefix-cache", "--kv-cache-host-bytes",
                  "--kv-cache-disk-bytes"]


def help_entries(mla_bin, command):
    """{long flag name: (first column of its --help entry, description)} for every option."""
    text = run_mla(mla_bin, command, "--help").stdout
    entries, last = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
        if m:
            head = m.group(1).strip()
            names = head.split(" ")[0].split(",")
            last = next(n for n in names if n.startswith("--")).split("{")[0]
            entries[last] = (head, m.group(2) or "")
        elif last and line.startswith("      ") and line.strip():
            head, desc = entries[last]
            entries[last] = (head, (desc + " " + line.strip()).strip())
        else:
            last = None
    return entries


def engine_line(stderr):
    lines = re.findall(r"engine: (max_num_batched_tokens .*)$", stderr, re.MULTILINE)
    assert len(lines) == 1, stderr
    return lines[0]


def test_shared_flags_have_one_spelling_and_one_default(mla_bin):
    run, serve, bench = (help_entries(mla_bin, c) for c in ("run", "serve", "bench"))
    for flag in MODEL_FLAGS + CAPACITY_FLAGS:
        assert flag in run and flag in serve, flag
        assert run[flag] == serve[flag], flag
    for flag in MODEL_FLAGS:
        assert bench[flag][0] == run[flag][0], flag  # name, type and default (help text is bench's own)
    for flag in CAPACITY_FLAGS:
        assert flag not in bench, flag  # one sequence at a time, on a cache sized to the tests
    assert run["--kv-cache-dir"] == serve["--kv-cache-dir"]  # bench's is --prefix-reuse's own
    assert run["--max-num-batched-tokens"][0] == "--max-num-batched-tokens INT=2048"
    assert run["--kv-cache-dtype"][0] == "--kv-cache-dtype TEXT=f16"
    assert run["--max-num-seqs"][0] == "--max-num-seqs INT=64"
    assert "--no-enable-prefix-caching" in run["--enable-prefix-caching"][0]
    # The doctor's budget is the same default.
    assert help_entries(mla_bin, "doctor")["--max-num-batched-tokens"][0] == run["--max-num-batched-tokens"][0]


def serve_engine_line(mla_bin, *args):
    """The `engine:` line of `mla serve`, which it logs before loading the model; then SIGTERM."""
    p = subprocess.Popen([mla_bin, "serve", "-m", str(TINY), "--port", "0", "--self-check=off", *args],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        seen = []
        for line in p.stderr:
            seen.append(line)
            if "engine: " in line:
                return engine_line(line), "".join(seen)
        raise AssertionError("mla serve exited without an engine line:\n" + "".join(seen))
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)


@pytest.mark.parametrize("args", [
    [],
    ["-t", "1", "--max-num-batched-tokens", "64", "--max-num-seqs", "3", "--max-model-len", "200",
     "--kv-cache-dtype", "bf16", "--kv-cache-tokens", "4096", "--block-size", "8", "--mla-path", "mqa",
     "--no-enable-prefix-caching", "--attention-precision", "exact"],
])
def test_run_and_serve_resolve_the_same_engine(mla_bin, args):
    r = run_mla(mla_bin, "run", "-m", TINY, "--tokens", "1,2,3", "-n", "1", *args)
    line, _ = serve_engine_line(mla_bin, *args)
    assert engine_line(r.stderr) == line
    if not args:
        assert line.startswith("max_num_batched_tokens 2048, max_num_seqs 64, max_model_len auto, prefix caching on, "
                               "kv cache F16 (32768 tokens, block 16), mla_path auto, attention f32, dsa on, "
                               "speculative tokens 0")
    else:
        assert line.startswith("max_num_batched_tokens 64, max_num_seqs 3, max_model_len 200, prefix caching off, "
                               "kv cache BF16 (4096 tokens, block 8), mla_path mqa, attention exact")
        assert re.search("threads 1, prefault on" + KERNELS, line), line


def test_bench_resolves_the_model_flags_the_same_way(mla_bin):
    r = run_mla(mla_bin, "bench", "-m", TINY, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--membw-size", "1M",
                "--kv-cache-dtype", "bf16", "--mla-path", "mha")
    # One sequence, no prefix caching, a cache of whole 256-token blocks for the longest test.
    line = engine_line(r.stderr)
    assert line.startswith("max_num_batched_tokens 2048, max_num_seqs 1, max_model_len auto, prefix caching "
                           "off, kv cache BF16 (256 tokens, block 16), mla_path mha, attention f32, dsa on, "
                           "speculative tokens 0, threads 1, prefault on, simd "), line
    assert re.search(KERNELS, line) and line.endswith("repack on"), line


def test_old_spelling_still_works_and_says_it_is_deprecated(mla_bin):
    base = ["run", "-m", TINY, "--tokens", "1,2,3,4", "-n", "3", "--json"]
    new = run_mla(mla_bin, *base, "--no-enable-prefix-caching")
    old = run_mla(mla_bin, *base, "--no-prefix-cache")
    assert "prefix caching off" in engine_line(new.stderr) and engine_line(old.stderr) == engine_line(new.stderr)
    warning = "run: --no-prefix-cache is deprecated, use --no-enable-prefix-caching"
    assert warning in old.stderr and "deprecated" not in new.stderr
    assert json.loads(old.stdout)["continuation"] == json.loads(new.stdout)["continuation"]
    on = run_mla(mla_bin, *base, "--enable-prefix-caching")
    assert "prefix caching on" in engine_line(on.stderr)
    line, log = serve_engine_line(mla_bin, "--no-prefix-cache")
    assert "prefix caching off" in line and "serve: --no-prefix-cache is deprecated" in log


def test_no_prefault_is_a_flag_and_the_variable_a_deprecated_alias(mla_bin):
    base = ["run", "-m", TINY, "--tokens", "1,2,3,4", "-n", "3", "--json"]
    default = run_mla(mla_bin, *base)
    flag = run_mla(mla_bin, *base, "--no-prefault")
    env = run_mla(mla_bin, *base, env={"MLA_PREFAULT": "0"})
    env_on = run_mla(mla_bin, *base, env={"MLA_PREFAULT": "1"})
    assert "prefault on, " in engine_line(default.stderr) and "deprecated" not in default.stderr
    assert "prefault off, " in engine_line(flag.stderr) and "deprecated" not in flag.stderr
    assert engine_line(env.stderr) == engine_line(flag.stderr)
    assert engine_line(env_on.stderr) == engine_line(default.stderr)
    warning = "run: environment variable MLA_PREFAULT is deprecated, use --no-prefault"
    assert warning in env.stderr and warning in env_on.stderr
    # Paging changes when the file's bytes are read, never what the model computes.
    assert json.loads(flag.stdout)["continuation"] == json.loads(default.stdout)["continuation"]
    line, _ = serve_engine_line(mla_bin, "--no-prefault")
    assert "prefault off, " in line
    # The product's --help-env no longer lists the test suite's variables.
    help_env = run_mla(mla_bin, "run", "--help-env").stdout
    assert "MLA_PREFAULT" in help_env and "--no-prefault" in help_env
    for name in ("MLA_BIN", "MLA_BUILD_DIR", "MLA_FUZZ_CASES", "MLA_SOAK_CLIENTS"):
        assert name not in help_env, name


def test_simd_and_repack_are_flags_and_the_variables_deprecated_aliases(mla_bin):
    base = ["run", "-m", TINY, "--tokens", "1,2,3,4", "-n", "3", "--json"]
    default = engine_line(run_mla(mla_bin, *base).stderr)
    best = re.search(KERNELS, default).group(1)
    assert default.endswith(f"simd {best}, repack on")
    flag = run_mla(mla_bin, *base, "--simd", "scalar", "--no-repack")
    assert engine_line(flag.stderr).endswith("simd scalar, repack off") and "deprecated" not in flag.stderr
    env = run_mla(mla_bin, *base, env={"MLA_SIMD": "scalar", "MLA_REPACK": "0"})
    assert engine_line(env.stderr) == engine_line(flag.stderr)
    assert "run: environment variable MLA_SIMD is deprecated, use --simd" in env.stderr
    assert "run: environment variable MLA_REPACK is deprecated, use --no-repack" in env.stderr
    # The variables are read as the flags: the same kernels, the same tokens.
    assert json.loads(env.stdout)["continuation"] == json.loads(flag.stdout)["continuation"]
    # A flag given wins over the variable.
    both = run_mla(mla_bin, *base, "--simd", best, env={"MLA_SIMD": "scalar"})
    assert engine_line(both.stderr) == default
    line, _ = serve_engine_line(mla_bin, "--simd", "scalar")
    assert line.endswith("simd scalar, repack on")
    bad = run_mla(mla_bin, *base, "--simd", "sse4", check=False)
    assert bad.returncode != 0 and "--simd" in bad.stderr
    help_env = run_mla(mla_bin, "run", "--help-env").stdout
    assert "--simd" in help_env and "--no-repack" in help_env


@pytest.mark.parametrize("command", [["run", "--tokens", "1"], ["serve", "--port", "0"], ["bench", "-n", "1"],
                                     ["doctor"]])
def test_one_kv_cache_dtype_parser(mla_bin, command):
    args = [command[0], *(["-m"] if command[0] != "doctor" else []), TINY, *command[1:], "--kv-cache-dtype", "q4_k"]
    r = run_mla(mla_bin, *args, check=False, timeout=120)
    assert r.returncode != 0 and "unknown kv cache dtype 'q4_k' (expected f16, f32, bf16 or q8_0)" in r.stderr


def test_kv_cache_tokens_and_memory_exclude_each_other(mla_bin):
    for command in (["run", "--tokens", "1"], ["serve", "--port", "0"]):
        r = run_mla(mla_bin, command[0], "-m", TINY, *command[1:], "--kv-cache-tokens", "64", "--kv-cache-memory",
                    "1M", check=False, timeout=120)
        assert r.returncode != 0
        assert f"{command[0]}: give --kv-cache-tokens or --kv-cache-memory, not both" in r.stderr
