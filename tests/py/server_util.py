"""Helpers for the `mla serve` tests: a tiny synthetic deepseek2 model with the DeepSeek-LLM
vocabulary and a chat template (generated once per build, cached in the build directory), a live
server on a free port with its log captured, an SSE reader and a Prometheus text-format parser.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
VOCAB = REPO / "tests" / "fixtures" / "vocab" / "ggml-vocab-deepseek-llm.gguf"
CHAT_TEMPLATE = REPO / "tests" / "fixtures" / "synth" / "chat_template.jinja"
MODEL_NAME = "tiny-deepseek2"

# Small enough that the whole server suite runs in well under a minute of model time on two
# cores; the 102,400-token vocabulary makes the embedding and lm_head the biggest tensors.
SYNTH_CONFIG = {
    "n_layer": 2,
    "n_layer_dense_lead": 1,
    "n_embd": 64,
    "n_ff": 128,
    "n_head": 2,
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_nope": 16,
    "qk_rope": 16,
    "v_head": 16,
    "n_expert": 4,
    "n_expert_used": 2,
    "n_expert_shared": 1,
    "n_ff_exp": 32,
    "n_ctx_train": 4096,
    "seed": 7,
    "name": "tiny synthetic deepseek2 (server tests)",
}


def mla_bin() -> str:
    path = os.environ.get("MLA_BIN") or str(REPO / "build" / "mla")
    if not Path(path).exists():
        raise AssertionError(f"mla binary not found at {path}: build first (make test does)")
    return path


def build_dir() -> Path:
    return Path(os.environ.get("MLA_BUILD_DIR") or REPO / "build")


def synth_model(config: dict | None = None, stem: str = "server-synth") -> Path:
    """The test model (SYNTH_CONFIG, or `config`: other `mla gguf synth` keys, e.g. a deepseek4
    file), generated on first use. Cached by the config, the template and the mla binary (a
    rebuild regenerates it); a file lock keeps parallel test files from racing."""
    if not VOCAB.exists():
        raise AssertionError(f"test vocabulary missing: {VOCAB}")
    config = SYNTH_CONFIG if config is None else config
    binary = Path(mla_bin())
    key = hashlib.sha256(
        json.dumps(config, sort_keys=True).encode()
        + CHAT_TEMPLATE.read_bytes()
        + str(binary.stat().st_mtime_ns).encode()
    ).hexdigest()[:16]
    out_dir = build_dir() / "test-models"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem}-{key}.gguf"
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            cfg = dict(config, vocab=str(VOCAB), chat_template=str(CHAT_TEMPLATE))
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(cfg, f)
            tmp = path.with_suffix(".tmp")
            p = subprocess.run([str(binary), "gguf", "synth", "-o", str(tmp), "--config", f.name],
                               capture_output=True, check=False, text=True)
            os.unlink(f.name)
            if p.returncode != 0:
                raise AssertionError(f"mla gguf synth failed: {p.stderr}")
            tmp.rename(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A live `mla serve` process. The log (stderr) is collected on a thread."""

    def __init__(self, model: Path, *extra: str, env: dict | None = None, wait: bool = True,
                 launcher: tuple = ()):
        """launcher: what runs the server command (e.g. mpirun and its options)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [*launcher, mla_bin(), "serve", "-m", str(model), "--port", str(self.port),
                "--served-model-name", MODEL_NAME, "--threads", "1", *extra]
        full_env = dict(os.environ)
        full_env.pop("MLA_API_KEY", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=full_env)
        self._log: list[str] = []
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if wait:
            self.wait_ready()

    def _read_log(self):
        for line in self.proc.stdout:
            self._log.append(line)

    @property
    def log(self) -> str:
        return "".join(self._log)

    def wait_ready(self, timeout: float = 60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mla serve exited with {self.proc.returncode}:\n{self.log}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"mla serve not ready after {timeout} s:\n{self.log}")

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"mla serve did not stop within {timeout} s:\n{self.log}")
        self._reader.join(5)
        return self.proc.returncode

    def metrics(self) -> dict:
        r = requests.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/plain")
        return parse_prometheus(r.text)


def wait_idle(server: Server, timeout: float = 20.0) -> dict:
    """The server's metrics once nothing runs or waits."""
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        if metric(m, "mla:num_requests_running") == 0 and metric(m, "mla:num_requests_waiting") == 0:
            return m
        assert time.time() < deadline, f"requests still running: {m}"
        time.sleep(0.02)


def sse_events(response: requests.Response) -> list:
    """The JSON payloads of an SSE stream, checking the framing: every event is one `data:` line
    followed by a blank line, and the stream ends with `data: [DONE]`."""
    raw = response.content.decode("utf-8")
    assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
    events = raw.split("\n\n")
    assert events[-1] == ""
    out = []
    for ev in events[:-2]:
        assert ev.startswith("data: ") and "\n" not in ev, repr(ev)
        out.append(json.loads(ev[len("data: "):]))
    assert events[-2] == "data: [DONE]"
    return out


# --- Prometheus text exposition format 0.0.4 ---------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{(?:{_LABEL})(?:,{_LABEL})*,?\}})? (\S+)( -?\d+)?$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _value(s: str) -> float:
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    return float(s)


def parse_prometheus(text: str) -> dict:
    """Parses and checks exposition text. Returns {(name, frozenset(labels)): value}. Checks: the
    line grammar, one TYPE per family given before its samples, sample names belonging to their
    family's type (histograms: _bucket/_sum/_count), no duplicate series, histogram buckets
    cumulative with an le="+Inf" bucket equal to _count."""
    assert text.endswith("\n"), "exposition must end with a line feed"
    types: dict[str, str] = {}
    samples: dict = {}
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            assert re.match(rf"^# HELP {_NAME} ", line), line
            continue
        if line.startswith("# TYPE "):
            m = re.match(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$", line)
            assert m, line
            assert m.group(1) not in types, f"second TYPE for {m.group(1)}"
            types[m.group(1)] = m.group(2)
            continue
        assert not line.startswith("#") or line.startswith("# "), line
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"bad sample line: {line!r}"
        name, labels_text, value = m.group(1), m.group(2) or "", m.group(3)
        labels = frozenset(_LABEL_PAIR.findall(labels_text))
        family = name
        if family not in types:
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in types:
                    family = name[: -len(suffix)]
        assert family in types, f"sample {name} has no TYPE line before it"
        if types[family] == "histogram":
            assert name != family, f"histogram {family} sample without a suffix"
            if name.endswith("_bucket"):
                assert any(k == "le" for k, _ in labels), line
        key = (name, labels)
        assert key not in samples, f"duplicate series {line}"
        samples[key] = _value(value)
    for family, t in types.items():
        if t != "histogram":
            continue
        series: dict = {}
        for (name, labels), v in samples.items():
            if name == family + "_bucket":
                rest = frozenset(p for p in labels if p[0] != "le")
                le = dict(labels)["le"]
                series.setdefault(rest, []).append((_value(le), v))
        for rest, buckets in series.items():
            buckets.sort()
            counts = [c for _, c in buckets]
            assert counts == sorted(counts), f"{family} buckets not cumulative: {buckets}"
            assert buckets[-1][0] == math.inf, f"{family} has no +Inf bucket"
            assert samples[(family + "_count", rest)] == buckets[-1][1]
            assert (family + "_sum", rest) in samples
    return samples


def metric(samples: dict, name: str, **labels) -> float:
    """The value of one series; labels not given must be the model_name only."""
    want = dict(labels, model_name=MODEL_NAME)
    for (n, ls), v in samples.items():
        if n == name and dict(ls) == want:
            return v
    raise KeyError(f"{name}{want} not exposed")
