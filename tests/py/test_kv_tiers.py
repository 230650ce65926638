"""The prefix cache's lower tiers through a live `mla serve`: --kv-cache-dir finds its blocks again
after a restart (tier-2 hits on /metrics, the same greedy tokens and logprobs as the cold run),
a damaged directory (a file truncated mid-block, a temporary file left by a killed write, another
model's directory, a server killed while writing) costs hits and never answers, an unusable
directory or a tiny cap leaves the server serving; and agent clients keep their prefix when the
Anthropic billing line, a request header or the tail of the system prompt changes."""
import os
import re
import signal
import time
from pathlib import Path

import requests

from server_util import Server, metric, synth_model, wait_idle

# About 300 tokens: 18 full blocks of 16.
PROMPT = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog number {i * 7}." for i in range(20))


def completion(server: Server, prompt: str, n: int = 6) -> tuple:
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                            "logprobs": 3}, timeout=120)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def wait_log(server: Server, pattern: str, timeout: float = 10) -> re.Match:
    """The first match of pattern in the server's log, once its reader thread has the line."""
    deadline = time.time() + timeout
    while not (m := re.search(pattern, server.log)):
        assert time.time() < deadline, f"{pattern!r} not in the log:\n{server.log}"
        time.sleep(0.02)
    return m


def block_files(d: Path) -> list:
    return sorted(d.glob("*/*.blk"))


def tier(m: dict, name: str, which: str) -> float:
    return metric(m, name, tier=which)


def warm(d: Path, *extra: str) -> tuple:
    """A first server over d answers PROMPT (cold: d is empty) and stops; its writer finishes."""
    s = Server(synth_model(), "--kv-cache-dir", str(d), *extra)
    try:
        cold = completion(s, PROMPT)
        m = wait_idle(s)
        assert metric(m, "mla:prefix_cache_hits_total") == 0
    finally:
        assert s.stop() == 0, s.log
    assert len(block_files(d)) >= 18, list(d.rglob("*"))
    return cold


def test_restart_finds_its_blocks_on_disk(tmp_path):
    cold = warm(tmp_path)
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path), "--trace", "tiers:4")
    try:
        assert int(wait_log(s, r"holds (\d+) blocks").group(1)) >= 18  # the start-up scan's line
        assert completion(s, PROMPT) == cold
        trace = wait_log(s, r"tiers lookup blocks=(\d+) arena=0 host=0 disk=(\d+) reused=0")
        assert int(trace.group(1)) == int(trace.group(2)) >= 18, trace.group(0)
        m = wait_idle(s)
        assert tier(m, "mla:prefix_cache_tier_hits_total", "disk") >= 18
        assert metric(m, "mla:prefix_cache_tier_tokens_loaded_total") >= 18 * 16 - 1
        assert metric(m, "mla:prefix_cache_disk_read_bytes_total") > 0
        assert metric(m, "mla:prefix_cache_disk_files_rejected_total") == 0
        # Loaded blocks are the arena's now: the same prompt again hits there, not on disk.
        disk_hits = tier(m, "mla:prefix_cache_tier_hits_total", "disk")
        assert completion(s, PROMPT) == cold
        m = wait_idle(s)
        assert tier(m, "mla:prefix_cache_tier_hits_total", "disk") == disk_hits
    finally:
        assert s.stop() == 0, s.log


def test_another_cache_dtype_does_not_read_the_blocks(tmp_path):
    warm(tmp_path)
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path), "--kv-cache-dtype", "f32")
    try:
        completion(s, PROMPT)
        m = wait_idle(s)
        assert tier(m, "mla:prefix_cache_tier_hits_total", "disk") == 0
        assert metric(m, "mla:prefix_cache_disk_files_rejected_total") == 0  # the F16 blocks stay
    finally:
        assert s.stop() == 0, s.log
    assert len(list(tmp_path.iterdir())) == 2  # one directory per fingerprint


def test_damaged_directory_costs_hits_not_answers(tmp_path):
    cold = warm(tmp_path)
    files = block_files(tmp_path)
    fp_dir = files[0].parent
    victim = files[len(files) // 2]
    with open(victim, "r+b") as f:  # cut mid-block
        f.truncate(victim.stat().st_size // 2)
    (fp_dir / "00000000deadbeef.tmp").write_bytes(b"\0" * 100)  # a write killed before its rename
    foreign = tmp_path / "0123456789abcdef"  # another model's directory: never read nor touched
    foreign.mkdir()
    (foreign / files[0].name).write_bytes(files[0].read_bytes())
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path))
    try:
        wait_log(s, "truncated")
        wait_log(s, "did not finish")
        assert completion(s, PROMPT) == cold
        m = wait_idle(s)
        assert metric(m, "mla:prefix_cache_disk_files_rejected_total") == 2
        assert tier(m, "mla:prefix_cache_tier_hits_total", "disk") >= 1
    finally:
        assert s.stop() == 0, s.log
    assert (foreign / files[0].name).exists()


def test_server_killed_while_writing_restarts_clean(tmp_path):
    cold = warm(tmp_path / "ref")
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path / "run"))
    # The writer is busy with the prompt's blocks when SIGKILL lands (or just done with them).
    assert completion(s, PROMPT) == cold
    s.stop(signal.SIGKILL)
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path / "run"))
    try:
        assert completion(s, PROMPT) == cold
        m = wait_idle(s)
        # Whatever the kill left: complete files load, a partial one is deleted, never loaded.
        assert not list((tmp_path / "run").glob("*/*.tmp"))
        assert metric(m, "mla:prefix_cache_hits_total") >= 0
    finally:
        assert s.stop() == 0, s.log


def test_unusable_directory_and_tiny_cap_leave_the_server_serving(tmp_path):
    cold = warm(tmp_path / "ref")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    s = Server(synth_model(), "--kv-cache-dir", str(not_a_dir), "--kv-cache-host-bytes", "64M")
    try:
        wait_log(s, "cannot use")
        assert completion(s, PROMPT) == cold
    finally:
        assert s.stop() == 0, s.log
    # A cap below one block: every block written is evicted at once (as a full disk keeps none).
    capped = tmp_path / "capped"
    s = Server(synth_model(), "--kv-cache-dir", str(capped), "--kv-cache-disk-bytes", "1K")
    try:
        assert completion(s, PROMPT) == cold
        time.sleep(0.2)
        assert completion(s, PROMPT) == cold
        wait_idle(s)
    finally:
        assert s.stop() == 0, s.log
    assert block_files(capped) == []
    if os.geteuid() != 0:  # root writes through directory permissions
        ro = tmp_path / "ro"
        warm(ro)
        for p in [ro, *ro.iterdir()]:
            p.chmod(0o555)
        s = Server(synth_model(), "--kv-cache-dir", str(ro))
        try:
            wait_log(s, "not writable")
            assert completion(s, PROMPT) == cold
            assert tier(wait_idle(s), "mla:prefix_cache_tier_hits_total", "disk") >= 18
        finally:
            assert s.stop() == 0, s.log


SYSTEM = " ".join(f"Rule {i}: answer tersely and cite file {i}." for i in range(14))


def anthropic_turn(server: Server, system, header: str) -> None:
    r = requests.post(server.url + "/v1/messages",
                      headers={"anthropic-version": "2023-06-01", "x-client-trace": header},
                      json={"model": "m", "max_tokens": 2, "system": system,
                            "messages": [{"role": "user", "content": "List the files."}]}, timeout=120)
    assert r.status_code == 200, r.text


def test_agent_clients_keep_their_prefix(tmp_path):
    s = Server(synth_model(), "--kv-cache-dir", str(tmp_path))
    try:
        def hits_of(fn) -> float:
            before = wait_idle(s)
            fn()
            return metric(wait_idle(s), "mla:prefix_cache_hits_total") - metric(before, "mla:prefix_cache_hits_total")

        n_system = requests.post(s.url + "/tokenize", json={"prompt": SYSTEM}).json()["count"]
        assert n_system >= 160

        def billing(cch: str) -> dict:
            return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.100.7b4; cch={cch};"}

        anthropic_turn(s, [billing("aaaaa"), {"type": "text", "text": SYSTEM + " Today: Monday."}], "1")
        # Another billing hash, another header value, another tail: all of SYSTEM still matches.
        hits = hits_of(lambda: anthropic_turn(
            s, [billing("bbbbb"), {"type": "text", "text": SYSTEM + " Today: Tuesday."}], "2"))
        assert hits >= n_system - 32, (hits, n_system)
        # The OpenAI endpoint, a system prompt whose tail changes.
        def chat(tail: str):
            r = requests.post(s.url + "/v1/chat/completions",
                              json={"messages": [{"role": "system", "content": SYSTEM + tail},
                                                 {"role": "user", "content": "hi"}], "max_tokens": 2})
            assert r.status_code == 200, r.text

        chat(" Mode A.")
        assert hits_of(lambda: chat(" Mode B, verbose.")) >= n_system - 32
    finally:
        assert s.stop() == 0, s.log
